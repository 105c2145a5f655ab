"""EXPLAIN says what a refresh would do; the refresh then does exactly that. One decision, made by one
function, for shapes × source changes × policies × triggers — the run's history entry read back in
EXPLAIN's words."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from mt_magic.catalog.history import Technique
from mt_magic.refresh.decision import phrase

TABLES = {   # name → (WITH options, PARTITIONED BY, query)
    "filtered": ("", "", "SELECT day, k, v FROM facts WHERE v > 0"),
    "summed": ("", "", "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM facts GROUP BY k"),
    "summed_incremental": ("'refresh.policy' = 'incremental'", "",
                           "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM facts GROUP BY k"),
    "summed_full": ("'refresh.policy' = 'full'", "", "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM facts GROUP BY k"),
    "daily": ("", "PARTITIONED BY (day) ", "SELECT day, SUM(v) AS s FROM facts GROUP BY day"),
}
CHANGES = {
    "nothing": None,
    "an append": "INSERT INTO facts VALUES (1, 5.0, 'd1'), (4, -1.0, 'd3')",
    "a day rewritten": "INSERT OVERWRITE facts PARTITION (day = 'd2') VALUES (2, 7.0), (5, 1.0)",
    "all rewritten": "INSERT OVERWRITE facts SELECT CAST(id % 4 AS INT), CAST(id AS DOUBLE) - 3, "
                     "concat('d', CAST(id % 3 AS STRING)) FROM range(12)",
}


def test_what_explain_says_a_refresh_would_do_is_what_it_does(spark, gw):
    spark.sql("CREATE TABLE facts (k INT, v DOUBLE, day STRING) USING parquet PARTITIONED BY (day)")
    spark.sql("INSERT INTO facts VALUES (1, 1.0, 'd1'), (2, 2.0, 'd2'), (3, -1.0, 'd2')")
    for name, (options, partitioned, query) in TABLES.items():
        with_ = f"WITH ({options}) " if options else ""
        gw.execute(f"CREATE MATERIALIZED TABLE {name} {partitioned}{with_}FRESHNESS = INTERVAL '1' DAY "
                   f"REFRESH_MODE = FULL AS {query}")
    fires = itertools.count(1)
    seen = set()
    for (change, statement), trigger in itertools.product(CHANGES.items(), ("a scheduled refresh now", "this REFRESH")):
        if statement:
            spark.sql(statement)
        for name, (_, _, query) in TABLES.items():
            said = dict(gw.execute(f"EXPLAIN ALTER MATERIALIZED TABLE {name} REFRESH")[0].rows)[trigger]
            if trigger == "this REFRESH":
                gw.refresh(name)
            else:
                gw.refresh(name, schedule_time=(datetime(2030, 1, 1) + timedelta(days=next(fires))).strftime(
                    "%Y-%m-%d %H:%M:%S"))
            done = gw.history(name, limit=1)[0]
            how = gw.describe(name)["technique"]
            assert said == f"would {phrase(Technique(done['technique']), done['partitions'], done['reason'], how)}", \
                (name, change, trigger, done)
            assert _rows(spark.table(name)) == _rows(spark.sql(query)), (name, change, trigger)
            seen.add(done["technique"])
    assert seen == {str(t) for t in Technique} - {"stream"}, seen     # every technique was decided and run


def _rows(frame) -> list:
    return sorted(tuple(sorted(row.asDict().items())) for row in frame.collect())


def test_explain_shows_a_padded_sides_partials_kept_below_the_join_and_subqueries_read_by_their_keys(spark, gw):
    """Where the sources' partitions make a table keep a LEFT JOIN's padded side's partials below the
    join (TPC-H Q13's shape), count the keys a NOT EXISTS tests (Q22's; their greatest value one compares,
    and two over one table by the same keys one aggregate), keep a scalar subquery's value per key (Q20's)
    or the keys an IN lists (Q18's, its table read around it too; a plain IN's values), the maintained plan
    EXPLAIN and DESCRIBE EXTENDED show says so, not the rule the query's text alone would get — and so
    does EXPLAIN of the CREATE, before the table exists (it showed the text's rule: TPC-H Q4's EXISTS as a
    semi-join's change, where the refreshes then kept a count per key)."""
    db = f"spark_catalog.{spark.catalog.currentDatabase()}"
    spark.sql("CREATE TABLE sales (product_id INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("INSERT INTO sales VALUES (1, 10.0, 'd1'), (2, 0.5, 'd1'), (1, 7.0, 'd2')")
    spark.sql("CREATE TABLE dim (id INT, name STRING) USING parquet")
    spark.sql("INSERT INTO dim VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    queries = {"per_count": "SELECT c, COUNT(*) AS ks FROM (SELECT id, COUNT(amount) AS c FROM dim LEFT JOIN sales "
                            "ON id = product_id AND amount > 1 GROUP BY id) AS x GROUP BY c",
               "unsold": "SELECT name, COUNT(*) AS n FROM dim d WHERE NOT EXISTS (SELECT 1 FROM sales s "
                         "WHERE s.product_id = d.id) GROUP BY name",
               "stocked": "SELECT name FROM dim WHERE id * 5 > (SELECT 0.5 * SUM(amount) FROM sales WHERE product_id = id)",
               "listed": "SELECT ds, SUM(amount) AS total FROM sales WHERE product_id IN (SELECT product_id FROM sales "
                         "GROUP BY product_id HAVING SUM(amount) > 10) GROUP BY ds",
               "bought": "SELECT name FROM dim WHERE id IN (SELECT product_id FROM sales WHERE amount > 1)",
               "undercut": "SELECT name FROM dim d WHERE NOT EXISTS (SELECT 1 FROM sales s WHERE s.product_id = d.id "
                           "AND s.amount > d.id) AND EXISTS (SELECT 1 FROM sales t WHERE t.product_id = d.id)"}
    explained = {}
    for name, query in queries.items():
        create = f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS {query}"
        explained[name] = dict(gw.execute(f"EXPLAIN {create}")[0].rows)
        gw.execute(create)
    for name in queries:
        described = {r[0]: r[1] for r in gw.execute(f"DESCRIBE EXTENDED {name}")[0].rows}
        assert explained[name]["maintained plan"] == described["Maintained Plan"], name
        assert explained[name]["statement"].endswith(f"refresh technique {gw.describe(name)['technique']}"), \
            (name, explained[name]["statement"])
    padded = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE per_count REFRESH")[0].rows)["maintained plan"]
    assert f"scan {db}.sales: its partials kept below the joins, per partition and value of product_id; the side a " \
           "LEFT JOIN pads: any change of it or of the other side joins them all with the other side again" in padded
    assert "LEFT JOIN sales: its kept partials read in its place, a padded row counting one row and no values" in padded
    keys = {r[0]: r[1] for r in gw.execute("DESCRIBE EXTENDED unsold")[0].rows}["Maintained Plan"].splitlines()
    assert keys[0] == f"scan {db}.sales: its appended files read (its change)"
    assert "the keys an EXISTS or NOT EXISTS tests, counted (the aggregate): the query above reads them through a " \
           "LEFT JOIN, a key without rows padded with NULL" in keys
    valued = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE stocked REFRESH")[0].rows)["maintained plan"]
    assert "the value a scalar subquery computes, per key of its correlation (the aggregate): the query above reads " \
           "it through a LEFT JOIN, a key without rows padded with NULL as the subquery's value is" in valued
    assert f"scan {db}.dim: read whole by the query above the aggregate, each refresh (a change of it needs nothing " \
           "more)" in valued
    listed = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE listed REFRESH")[0].rows)["maintained plan"].splitlines()
    assert listed[0] == f"scan {db}.sales: its appended files read (its change)" and "HAVING: applied to the merged " \
        "groups" in listed and "the keys an IN lists, grouped (the aggregate): the query above reads them through the " \
        "IN, a semi-join" in listed
    assert f"scan {db}.sales: read whole by the query above the aggregate, each refresh (its change is the " \
           "aggregate's, as above)" in listed
    bought = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE bought REFRESH")[0].rows)["maintained plan"].splitlines()
    assert bought[2:4] == ["aggregate by sales.product_id: the change's groups added; state: the groups",
                           "the keys an IN lists, grouped (the aggregate): the query above reads them through the IN, "
                           "a semi-join"], bought
    undercut = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE undercut REFRESH")[0].rows)["maintained plan"]
    assert "aggregate by s.product_id: the change's partials merged (MAX, SUM); state: 2 partials per group\nthe " \
           "keys an EXISTS or NOT EXISTS tests, counted or with the least or greatest value it compares (the " \
           "aggregate): the query above reads them through a LEFT JOIN, a key without rows padded with NULL\nseveral " \
           "subqueries of one table by the same keys: one aggregate, each subquery's rows its own FILTER" in undercut, undercut


def test_explain_and_describe_show_the_maintained_plan_operator_by_operator(spark, gw):
    """EXPLAIN of a CREATE and of a refresh, and DESCRIBE EXTENDED, list each operator with its rule and
    state — here a semi-join under an aggregate: the filter is applied to the change, an append to
    `products` adds the rows it lets pass (under `auto`, a recompute costs less: every sale meets the
    change), and a rewrite of `products` recomputes, saying so; a query with a construct no rule maintains names it; a
    RIGHT JOIN and an ANTI JOIN say which side holds still, a scalar subquery in SELECT that its tables do;
    a query above an aggregate it reads as a CTE (twice: TPC-H Q15's shape) is computed again over its groups;
    a COUNT(DISTINCT …) beside a SUM keeps its values as finer groups."""
    db = f"spark_catalog.{spark.catalog.currentDatabase()}"
    spark.sql("CREATE TABLE sales (product_id INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("INSERT INTO sales VALUES (1, 10.0, '2024-01-01'), (2, 5.0, '2024-01-01'), (1, 7.0, '2024-01-02'), "
              "(2, 1.0, '2024-01-04'), (1, 3.0, '2024-01-05'), (1, 2.0, '2024-01-06')")
    spark.sql("CREATE TABLE products (id INT, name STRING) USING parquet")
    spark.sql("INSERT INTO products VALUES (1, 'a'), (2, NULL)")
    query = ("SELECT ds, COUNT(*) AS n, SUM(amount) AS total FROM sales s WHERE EXISTS (SELECT 1 FROM products p "
             "WHERE p.id = s.product_id AND p.name IS NOT NULL) GROUP BY ds HAVING COUNT(*) > 0")
    create = f"CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS {query}"
    plan = dict(gw.execute(f"EXPLAIN {create}")[0].rows)["maintained plan"].splitlines()
    assert plan[:2] == [f"scan {db}.sales: its appended files read (its change)",
                        f"scan {db}.products: read in a subquery of WHERE (an EXISTS or IN): its appended rows "
                        "add the rows they let pass and its old rows did not (a semi-join's change); a rewrite recomputes"]
    assert plan[2].startswith("filter EXISTS(") and plan[2].endswith(": a semi-join, applied to the change; an "
                                                                     "append to its subqueries' tables adds the rows "
                                                                     "it lets pass")
    assert plan[3:] == ["aggregate by ds: the change's partials merged (SUM); state: 2 partials per group",
                        "HAVING: applied to the merged groups"]
    assert gw.store.list() == []
    gw.execute(create)
    spark.sql("INSERT INTO sales VALUES (1, 2.0, '2024-01-03'), (2, 3.0, '2024-01-03')")
    explained = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")[0].rows)
    assert explained["maintained plan"].splitlines() == plan
    assert explained["state kept"] == f"per partition (ds) of {db}.sales: a rewrite of it is retracted, not recomputed"
    assert explained["a scheduled refresh now"] == "would refresh incremental (merge by ds)"
    assert {r[0]: r[1] for r in gw.execute("DESCRIBE EXTENDED t")[0].rows}["Maintained Plan"].splitlines() == plan
    gw.refresh("t", schedule_time="2030-01-01 00:00:00")
    assert gw.history("t", limit=1)[0]["technique"] == "incremental"
    spark.sql("INSERT OVERWRITE sales PARTITION (ds = '2024-01-01') VALUES (1, 4.0)")
    gw.refresh("t", schedule_time="2030-01-01 12:00:00")
    entry = gw.history("t", limit=1)[0]
    assert entry["technique"] == "incremental" and "retracted" in entry["sources"][f"{db}.sales"], (entry["reason"], entry["sources"])
    spark.sql("INSERT INTO products VALUES (2, 'b')")       # product 2's old sales now pass
    explained = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")[0].rows)
    assert explained["a scheduled refresh now"].startswith(    # under auto: the change meets every sale
        "would recompute the whole table (recomputing is expected to cost less"), explained
    gw.execute("ALTER MATERIALIZED TABLE t SET ('refresh.policy' = 'incremental')")
    explained = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")[0].rows)
    assert explained["a scheduled refresh now"] == "would refresh incremental (merge by ds)"
    gw.refresh("t", schedule_time="2030-01-02 00:00:00")
    assert gw.history("t", limit=1)[0]["technique"] == "incremental"
    assert sorted(spark.table("t").collect()) == sorted(spark.sql(query).collect())
    spark.sql("INSERT OVERWRITE products VALUES (1, 'a')")    # product 2's sales stop passing
    reason = f"{db}.products was rewritten"
    explained = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")[0].rows)
    assert explained["a scheduled refresh now"] == f"would recompute the whole table ({reason})"
    gw.refresh("t", schedule_time="2030-01-03 00:00:00")
    entry = gw.history("t", limit=1)[0]
    assert (entry["technique"], entry["reason"]) == ("full", reason)
    assert sorted(spark.table("t").collect()) == sorted(spark.sql(query).collect())
    [other] = gw.execute("EXPLAIN CREATE MATERIALIZED TABLE u FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL "
                         "AS SELECT ds, SUM(amount) AS s FROM sales GROUP BY ds "
                         "HAVING SUM(amount) > (SELECT COUNT(*) FROM products)")
    assert dict(other.rows)["maintained plan"] == "full recompute: a subquery"
    [joined] = gw.execute("EXPLAIN CREATE MATERIALIZED TABLE v FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
                          "SELECT s.ds, p.name, (SELECT MAX(id) FROM products) AS top FROM products p "
                          "RIGHT JOIN sales s ON s.product_id = p.id "
                          "ANTI JOIN products q ON q.id = s.product_id + 1")
    assert dict(joined.rows)["maintained plan"].splitlines() == [
        f"scan {db}.products: read on the left of a RIGHT JOIN, held still (a change recomputes)",
        f"scan {db}.sales: its appended files read (its change)",
        f"scan {db}.products: read on the right of a LEFT ANTI JOIN, held still (a change recomputes)",
        f"scan {db}.products: read in a subquery of SELECT, held still (a change recomputes)",
        "RIGHT JOIN s: linear in its right side while its left side holds still",
        "LEFT ANTI JOIN q: linear in its left side while its right side holds still",
        "scalar subquery in SELECT: evaluated for the change's rows while its tables hold still",
        "result: the change appended as new files (no state)"]
    [top] = gw.execute("EXPLAIN CREATE MATERIALIZED TABLE w FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
                       "WITH per AS (SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id) "
                       "SELECT p.product_id, p.total FROM per p WHERE p.total = (SELECT MAX(total) FROM per)")
    assert dict(top.rows)["maintained plan"].splitlines() == [
        f"scan {db}.sales: its appended files read (its change)",
        "aggregate by product_id: the change's partials merged (SUM); state: 1 partial per group",
        "the query above the aggregate (it reads the aggregate's result): computed again over the groups the "
        "state holds"]
    [distinct] = gw.execute("EXPLAIN CREATE MATERIALIZED TABLE x FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
                            "SELECT ds, COUNT(DISTINCT product_id) AS products, SUM(amount) AS total FROM sales GROUP BY ds")
    assert dict(distinct.rows)["maintained plan"].splitlines() == [
        f"scan {db}.sales: its appended files read (its change)",
        "aggregate by ds: the change's partials merged (SUM); state: 1 partial per group and distinct value of "
        "product_id",
        "DISTINCT aggregates: each group's distinct values counted again from the state (a value whose rows all "
        "left is gone)"]
