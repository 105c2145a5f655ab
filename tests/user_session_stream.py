"""Run by test_continuous: a user's own SparkSession (not local_session), a CONTINUOUS table over a
partitioned source whose day is overwritten twice; prints the table's rows once it shows each state.
Then a CONTINUOUS table whose batch writes for 12 s is suspended mid-write and resumed: prints how long
SUSPEND waited and the rows the table shows after RESUME. Then tables suspended in their first batch and
resumed at once: prints their status once they show their second row."""

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

# A batch that writes for 12 s (each row sleeps in the write's task): SUSPEND waits for the write.
spark.sql("CREATE TABLE slow_src (k INT, pause BIGINT) USING parquet")
spark.sql("INSERT INTO slow_src VALUES (1, 0)")
gateway.execute("CREATE MATERIALIZED TABLE slow FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = CONTINUOUS AS "
                "SELECT k, reflect('java.lang.Thread', 'sleep', pause) AS slept FROM slow_src")
deadline = time.monotonic() + 90
while spark.table("slow").count() != 1:
    assert time.monotonic() < deadline, "slow never showed its first row"
    time.sleep(0.2)
while not any(entry["input_rows"] for entry in (gateway.progress("slow") or {}).get("history", [])):
    assert time.monotonic() < deadline, "slow's stream never read its first row"     # its first batch
    time.sleep(0.2)
spark.sql("INSERT INTO slow_src VALUES (2, 12000)")
tracker = spark.sparkContext.statusTracker()
stream = next(q for q in spark.streams.active if q.name and "slow" in q.name)
# The batch writes once a job of the stream's own group runs (per_day's jobs run meanwhile too).
while not set(tracker.getActiveJobsIds()) & set(tracker.getJobIdsForGroup(str(stream.runId))):
    assert time.monotonic() < deadline, "the slow batch never started"
    time.sleep(0.05)
started = time.monotonic()
gateway.execute("ALTER MATERIALIZED TABLE slow SUSPEND")
print(f"suspend waited {time.monotonic() - started >= 5}", flush=True)
gateway.execute("ALTER MATERIALIZED TABLE slow RESUME")
deadline = time.monotonic() + 90
while spark.table("slow").count() != 2:
    assert time.monotonic() < deadline, "slow never showed the second row"
    time.sleep(0.2)
print(f"slow = {sorted(r.k for r in spark.table('slow').collect())}", flush=True)

# Suspended while its first batch runs and the next is due, resumed at once: the stopped run's end
# reaches the listener after the new run started, and is not taken for the new run's failure.
for round_ in range(3):
    spark.sql(f"CREATE TABLE quick_src{round_} (k INT, pause BIGINT) USING parquet")
    spark.sql(f"INSERT INTO quick_src{round_} VALUES (1, 0)")
    gateway.execute(f"CREATE MATERIALIZED TABLE quick{round_} FRESHNESS = INTERVAL '1' SECOND "
                    "REFRESH_MODE = CONTINUOUS AS SELECT k, reflect('java.lang.Thread', 'sleep', pause) AS slept "
                    f"FROM quick_src{round_}")
    stream = next(q for q in spark.streams.active if q.name and f"quick{round_}" in q.name)
    deadline = time.monotonic() + 90
    while not set(tracker.getActiveJobsIds()) & set(tracker.getJobIdsForGroup(str(stream.runId))):
        assert time.monotonic() < deadline, "the first batch never started"
        time.sleep(0.02)
    spark.sql(f"INSERT INTO quick_src{round_} VALUES (2, 2000)")
    gateway.execute(f"ALTER MATERIALIZED TABLE quick{round_} SUSPEND; ALTER MATERIALIZED TABLE quick{round_} RESUME")
    while spark.table(f"quick{round_}").count() != 2:
        assert time.monotonic() < deadline, f"quick{round_} never showed the second row"
        time.sleep(0.2)
    described = gateway.describe(f"quick{round_}")
    print(f"quick{round_}", described["refresh_status"], described["consecutive_failures"], flush=True)
# Hadoop's warning when SUSPEND interrupts a checkpoint write waiting for its `chmod` (a race, as in
# one CI run; forced here): logged as Hadoop's Shell.joinThread logs it, with the interruption's stack.
jvm = spark._jvm
jvm.org.slf4j.LoggerFactory.getLogger("org.apache.hadoop.util.Shell").warn(
    "Interrupted while joining on: Thread[chmod]", jvm.java.lang.InterruptedException())
# Spark's record of a broadcast whose writing thread was interrupted (a stopping stream's; one CI run
# showed it in this script, a race): logged as TorrentBroadcast.writeBlocks logs it.
jvm.org.slf4j.LoggerFactory.getLogger("org.apache.spark.broadcast.TorrentBroadcast").error(
    "Store broadcast broadcast_105 fail, remove all pieces of the broadcast")
gateway.close()
spark.stop()
