"""The embedded scheduler fires on its own, on the wall-clock grid (polled, never a fixed sleep)."""

from __future__ import annotations

import time

from helpers import wait_for


def test_scheduled_refresh_fires_by_itself(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = FULL "
               "AS SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id")
    info = gw.describe("t")
    assert info["refresh_handler"]["cron_expression"] == "0/2 * * * * ? *"
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 7, 70.0)")
    wait_for(lambda: spark.table("t").where("product_id = 7").count() == 1, timeout=30)
    last = gw.describe("t")["last_refresh"]
    assert last["outcome"] == "SUCCEEDED" and int(last["schedule_time"][-2:]) % 2 == 0


def test_suspended_table_is_not_refreshed(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL "
               "AS SELECT * FROM sales")
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 6, 60.0)")     # a fire with nothing new skips
    wait_for(lambda: gw.describe("t")["last_refresh"]["schedule_time"] is not None, timeout=30)
    gw.execute("ALTER MATERIALIZED TABLE t SUSPEND")
    wait_for(lambda: not gw.refreshing(gw.describe("t")["identifier"]), timeout=30)
    before = gw.describe("t")["last_refresh"]["started_at"]
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 7, 70.0)")
    # a fire would come within 1 s; watch three grid periods for one that must not come
    end = time.monotonic() + 3
    while time.monotonic() < end:
        assert gw.describe("t")["last_refresh"]["started_at"] == before
        time.sleep(0.25)
    assert spark.table("t").count() == 5
