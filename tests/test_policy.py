"""'refresh.policy': each refresh's technique follows it, DESCRIBE says it before, the history after, and
a query the delta rules cannot maintain is refused under 'incremental'."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from mt_magic.errors import MaterializedTableError

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


def test_incremental_refuses_a_query_it_cannot_maintain_and_leaves_nothing(spark, gw, sales):
    with pytest.raises(MaterializedTableError, match=r"cannot be maintained incrementally: LIMIT"):
        gw.execute("CREATE MATERIALIZED TABLE top3 WITH ('refresh.policy' = 'incremental') REFRESH_MODE = FULL "
                   "AS SELECT ds, amount FROM sales ORDER BY amount DESC LIMIT 3")
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
    with pytest.raises(MaterializedTableError, match="cannot be maintained incrementally: LEFT JOIN"):
        gw.execute("CREATE MATERIALIZED TABLE outer_mt WITH ('refresh.policy' = 'incremental') AS "
                   "SELECT s.ds, t.ds AS other FROM sales s LEFT JOIN sales t ON s.product_id = t.product_id")
    gw.execute("CREATE MATERIALIZED TABLE later FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
               "SELECT ds FROM sales ORDER BY ds LIMIT 1")
    with pytest.raises(MaterializedTableError, match="cannot be maintained incrementally: LIMIT"):
        gw.execute("ALTER MATERIALIZED TABLE later SET ('refresh.policy' = 'incremental')")
    assert gw.describe("later")["refresh_policy"] == "auto"
