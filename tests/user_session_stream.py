"""Run by test_continuous: a user's own SparkSession (not local_session), a CONTINUOUS table over a
partitioned source whose day is overwritten twice; prints the table's rows once it shows each state."""

import sys
import time

from pyspark.sql import SparkSession

from mt_magic import Gateway

store, warehouse = sys.argv[1:3]
spark = (SparkSession.builder.master("local[2]").appName("a-users-session").config("spark.ui.enabled", "false")
         .config("spark.sql.warehouse.dir", warehouse).getOrCreate())
gateway = Gateway(spark, catalog_store=store)
spark.sql("CREATE TABLE clicks (user_id INT, ds STRING) USING parquet PARTITIONED BY (ds)")
for day in ("d1", "d2"):
    spark.sql(f"INSERT INTO clicks SELECT CAST(id % 10 AS INT), '{day}' FROM range(1000)")
gateway.execute("CREATE MATERIALIZED TABLE per_day FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = CONTINUOUS AS "
                "SELECT ds, COUNT(*) AS n FROM clicks GROUP BY ds")


def streaming_since(job: str | None) -> str:
    """Waits until a job other than `job` streams the table and has run its first batch (a fresh
    stream reads every file again: an overwrite meanwhile would be a race no reader wins)."""
    deadline = time.monotonic() + 90
    while True:
        handler = gateway.describe("per_day")["refresh_handler"] or {}
        progress = gateway.progress("per_day") or {}
        if handler.get("streaming_query_id") not in (None, job) and \
                any(entry["input_rows"] for entry in progress.get("history", [])):
            return handler["streaming_query_id"]
        assert time.monotonic() < deadline, "the stream did not start again"
        time.sleep(0.2)


job = None
for rows in (1000, 1500, 700):
    if rows != 1000:
        spark.sql(f"INSERT OVERWRITE clicks PARTITION (ds = 'd1') SELECT CAST(id % 10 AS INT) FROM range({rows})")
    deadline = time.monotonic() + 90
    while sorted(map(tuple, spark.table("per_day").collect())) != [("d1", rows), ("d2", 1000)]:
        assert time.monotonic() < deadline, f"per_day never showed d1 = {rows}"
        time.sleep(0.2)
    print(f"d1 = {rows}", flush=True)
    job = streaming_since(job)
gateway.close()
spark.stop()
