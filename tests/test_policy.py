"""'refresh.policy': each refresh's technique follows it, DESCRIBE says it before, the history after, and
a query the delta rules cannot maintain is refused under 'incremental'."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from mt_magic.errors import MaterializedTableError
from mt_magic.spark.kind import is_connect

QUERY = "SELECT ds, COUNT(*) AS n, SUM(amount) AS total FROM sales GROUP BY ds"


def _fire(gw, name: str, day: int) -> dict:
    """A scheduled refresh (a fire of FRESHNESS 1 DAY), and its history entry."""
    gw.refresh(name, schedule_time=(datetime(2030, 1, 1) + timedelta(days=day)).strftime("%Y-%m-%d %H:%M:%S"))
    return gw.history(name, limit=1)[0]


def _matches(spark, name: str) -> bool:
    return sorted(map(tuple, spark.table(name).collect())) == sorted(map(tuple, spark.sql(QUERY).collect()))


@pytest.mark.parametrize("policy", ["auto", "incremental", "full"])
def test_an_append_then_an_overwrite_follow_the_policy(spark, gw, sales, policy):
    gw.execute(f"CREATE MATERIALIZED TABLE mt WITH ('refresh.policy' = '{policy}') "
               f"FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {QUERY}")
    source = f"spark_catalog.{spark.catalog.currentDatabase()}.sales"
    spark.sql("INSERT INTO sales VALUES ('2024-01-02', 3, 2.0), ('2024-01-05', 1, 1.0)")
    appended = _fire(gw, "mt", 1)
    assert appended["technique"] == ("full" if policy == "full" else "incremental"), appended
    assert _matches(spark, "mt")
    spark.sql("INSERT OVERWRITE sales VALUES ('2024-01-09', 1, 4.0)")
    rewritten = _fire(gw, "mt", 2)
    assert rewritten["technique"] == "full"
    assert rewritten["reason"] == ("'refresh.policy' = 'full'" if policy == "full" else f"{source} was rewritten")
    assert _matches(spark, "mt")


def test_a_few_rows_appended_are_merged_with_a_small_state_in_one_job(spark, gw, sales):
    """The state and the appended rows are small: each is read as one partition and merged with no
    shuffle, the refresh one job that writes its result (a shuffle adds one, and re-planning between);
    over Connect a refresh's jobs are not counted."""
    gw.execute(f"CREATE MATERIALIZED TABLE mt FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {QUERY}")
    spark.sql("INSERT INTO sales VALUES ('2024-01-02', 3, 2.0), ('2024-01-05', 1, 1.0)")
    appended = _fire(gw, "mt", 1)
    assert (appended["technique"], appended["jobs"]) == ("incremental", None if is_connect(spark) else 1), appended
    assert _matches(spark, "mt")


def test_incremental_refuses_a_query_it_cannot_maintain_and_leaves_nothing(spark, gw, sales):
    with pytest.raises(MaterializedTableError, match=r"cannot be maintained incrementally: OFFSET"):
        gw.execute("CREATE MATERIALIZED TABLE top3 WITH ('refresh.policy' = 'incremental') REFRESH_MODE = FULL "
                   "AS SELECT ds, amount FROM sales ORDER BY amount DESC LIMIT 3 OFFSET 1")
    assert not spark.catalog.tableExists("top3")
    assert gw.execute("SHOW MATERIALIZED TABLES")[0].rows == []
    with pytest.raises(MaterializedTableError, match="'refresh.policy' = 'sometimes' is not one of"):
        gw.execute(f"CREATE MATERIALIZED TABLE mt WITH ('refresh.policy' = 'sometimes') AS {QUERY}")


def test_describe_and_the_dry_run_say_the_technique_and_alter_switches_the_policy(spark, gw, sales):
    create = f"CREATE MATERIALIZED TABLE mt FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {QUERY}"
    [dry] = gw.execute(create, dry_run=True)
    assert "refresh technique incremental (merge by ds)" in dry.message, dry.message
    gw.execute(create)
    spark.sql("INSERT INTO sales VALUES ('2024-01-02', 3, 2.0)")
    source = f"spark_catalog.{spark.catalog.currentDatabase()}.sales"
    rows = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE mt REFRESH")[0].rows)
    assert rows[f"source {source}"].startswith("appended 1 file (") and \
        rows[f"source {source}"].endswith("→ incremental (merge by ds)")
    assert rows["a scheduled refresh now"] == "would refresh incremental (merge by ds)"
    described = gw.describe("mt")
    assert (described["refresh_policy"], described["technique"]) == ("auto", "incremental (merge by ds)")
    rows = {r[0]: r[1] for r in gw.execute("DESCRIBE mt")[0].rows}
    assert rows["Refresh Policy"] == "auto" and rows["Refresh Technique"] == "incremental (merge by ds)"

    gw.execute("ALTER MATERIALIZED TABLE mt SET ('refresh.policy' = 'full')")
    assert gw.describe("mt")["technique"] == "full: 'refresh.policy' = 'full'"
    assert _fire(gw, "mt", 1)["technique"] == "full"
    gw.execute("ALTER MATERIALIZED TABLE mt RESET ('refresh.policy')")
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 3, 2.0)")
    assert _fire(gw, "mt", 2)["technique"] in ("incremental", "full")    # a full refresh kept no state
    spark.sql("INSERT INTO sales VALUES ('2024-01-04', 3, 2.0)")
    assert _fire(gw, "mt", 3)["technique"] == "incremental"
    assert _matches(spark, "mt")
    with pytest.raises(MaterializedTableError, match=r"cannot be maintained incrementally: the window function SUM\(…\)"):
        gw.execute("CREATE MATERIALIZED TABLE windowed WITH ('refresh.policy' = 'incremental') AS SELECT ds, "
                   "SUM(amount) OVER (PARTITION BY ds) AS s FROM sales")
    gw.execute("CREATE MATERIALIZED TABLE later FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
               "SELECT ds FROM sales LIMIT 1")
    with pytest.raises(MaterializedTableError, match="cannot be maintained incrementally: LIMIT"):
        gw.execute("ALTER MATERIALIZED TABLE later SET ('refresh.policy' = 'incremental')")
    assert gw.describe("later")["refresh_policy"] == "auto"


BY_PRODUCT = ("SELECT s.product_id, d.region, COUNT(*) AS n, SUM(s.amount) AS total FROM sales s "
              "JOIN regions d ON s.product_id % 2 = d.k GROUP BY s.product_id, d.region")


def test_auto_maintains_a_fact_append_and_recomputes_when_a_dimension_is_appended(spark, gw, sales):
    """The cost rule: an append to the large side reads the change and the state (1,000 groups); an
    append to the small side would read the whole fact table and merge the state on top, so auto
    recomputes, records why and what it weighed (the join that weighs the most) — and 'incremental'
    maintains it all the same."""
    spark.sql("INSERT INTO sales SELECT '2024-02-01', CAST(id % 1000 AS INT), CAST(id AS DOUBLE) FROM range(20000)")
    spark.sql("CREATE TABLE regions (k INT, region STRING) USING parquet")
    spark.sql("INSERT INTO regions VALUES (0, 'even'), (1, 'odd')")
    gw.execute(f"CREATE MATERIALIZED TABLE by_product FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {BY_PRODUCT}")

    def matches() -> bool:
        return sorted(map(tuple, spark.table("by_product").collect())) == \
            sorted(map(tuple, spark.sql(BY_PRODUCT).collect()))
    spark.sql("INSERT INTO sales VALUES ('2024-02-02', 3, 2.0), ('2024-02-02', 4, 1.0)")
    fact = _fire(gw, "by_product", 1)
    assert (fact["technique"], fact["reason"], fact["delta_rows"]) == ("incremental", None, 2)
    [appended] = [s for s in fact["sources"].values() if s.startswith("appended")]
    assert appended.endswith(f" ({fact['delta_bytes']} bytes)") and fact["delta_bytes"] > 0
    assert fact["estimate"].startswith("incremental ≈ ") and matches()

    spark.sql("INSERT INTO regions VALUES (0, 'zero')")
    dim = _fire(gw, "by_product", 2)
    assert dim["technique"] == "full" and dim["delta_rows"] is None, dim
    assert dim["reason"] == f"recomputing is expected to cost less ({dim['estimate']})", dim
    database = f"spark_catalog.{spark.catalog.currentDatabase()}"     # the work that makes it dearer, named
    assert f"; the most of it: joining {database}.regions's change with {database}.sales read whole ≈ " \
        in dim["estimate"], dim
    assert matches()
    rows = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE by_product REFRESH")[0].rows)
    assert rows["a scheduled refresh now"].startswith("would skip")

    gw.execute("ALTER MATERIALIZED TABLE by_product SET ('refresh.policy' = 'incremental')")
    spark.sql("INSERT INTO regions VALUES (1, 'one')")      # the policy changes how, not what: still appended
    forced = _fire(gw, "by_product", 3)
    assert (forced["technique"], forced["estimate"], forced["delta_rows"]) == ("incremental", None, 1)
    assert matches()
    history = spark.sql("SELECT technique, estimate, delta_rows, delta_bytes FROM mt_refresh_history('by_product') "
                        "WHERE trigger = 'scheduled' ORDER BY started").collect()
    assert [(r.technique, r.delta_rows) for r in history] == \
        [("incremental", fact["delta_rows"]), ("full", None), ("incremental", forced["delta_rows"])]
    assert history[1].estimate == dim["estimate"] and history[2].delta_bytes == forced["delta_bytes"]


def test_explain_says_per_source_what_auto_would_do_and_what_it_weighed(spark, gw, sales):
    spark.sql("INSERT INTO sales SELECT '2024-02-01', CAST(id % 1000 AS INT), CAST(id AS DOUBLE) FROM range(20000)")
    spark.sql("CREATE TABLE regions (k INT, region STRING) USING parquet")
    spark.sql("INSERT INTO regions VALUES (0, 'even'), (1, 'odd')")
    gw.execute(f"CREATE MATERIALIZED TABLE by_product FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {BY_PRODUCT}")
    database = f"spark_catalog.{spark.catalog.currentDatabase()}"
    spark.sql("INSERT INTO regions VALUES (0, 'zero')")
    rows = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE by_product REFRESH")[0].rows)
    assert rows[f"source {database}.sales"] == "unchanged"
    assert rows[f"source {database}.regions"].startswith("appended 1 file (")
    assert "→ full: recomputing is expected to cost less (incremental ≈ " in rows[f"source {database}.regions"]
    assert rows["cost estimate"].startswith("incremental ≈ ") and ", full ≈ " in rows["cost estimate"]
    spark.sql("INSERT OVERWRITE sales VALUES ('2024-03-01', 1, 1.0)")
    rows = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE by_product REFRESH")[0].rows)
    assert re.fullmatch(rf"rewritten: \d+ files? removed, \d+ written \(\d+ bytes\) → full: {database}\.sales was rewritten",
                        rows[f"source {database}.sales"]), rows
    assert rows["a scheduled refresh now"] == f"would recompute the whole table ({database}.sales was rewritten)"


def test_auto_maintains_a_dimension_append_where_the_partials_are_kept_below_the_join(spark, gw):
    """An aggregate over a day-partitioned fact table whose aggregates read the facts alone keeps its
    partials below the join: an append to the dimension joins them with it again (the facts not read),
    which the cost rule weighs as the kept partials and the dimension — so auto maintains it."""
    spark.sql("CREATE TABLE facts (k INT, v DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("INSERT INTO facts SELECT CAST(id % 3 AS INT), CAST(id AS DOUBLE), concat('d', CAST(id % 4 AS STRING)) "
              "FROM range(20000)")
    spark.sql("CREATE TABLE dims (k INT, region STRING) USING parquet")
    spark.sql("INSERT INTO dims VALUES (0, 'a'), (1, 'b')")
    query = "SELECT d.region, COUNT(*) AS n, SUM(f.v) AS s FROM facts f JOIN dims d ON f.k = d.k GROUP BY d.region"
    gw.execute(f"CREATE MATERIALIZED TABLE regional FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {query}")
    spark.sql("INSERT INTO dims VALUES (2, 'c'), (0, 'c')")
    entry = _fire(gw, "regional", 1)
    assert (entry["technique"], entry["reason"]) == ("incremental", None), entry
    assert entry["estimate"].startswith("incremental ≈ "), entry
    assert sorted(map(tuple, spark.table("regional").collect())) == sorted(map(tuple, spark.sql(query).collect()))
