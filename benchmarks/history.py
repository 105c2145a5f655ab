"""Refresh history at scale: 1,000 tables × 100 refreshes (100,000 entries).

Printed, in one run: the cost of recording one entry once 100,000 exist (target ≤ 10 ms), reading
one table's history and every table's, SHOW MATERIALIZED TABLES and the dashboard's status of all
1,000 tables — and plain Spark reading the same history files (spark.read.json, filtered to one
table) as the baseline.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace

from workload import median, open_gateway, timed  # benchmarks/ is the script's own folder
from mt_magic.catalog.history import RefreshEntry, Runner, Trigger
from mt_magic.notebook.status import table_statuses

TABLES, PER_TABLE = 1000, 100


def main() -> None:
    spark, gateway = open_gateway("history")
    try:
        spark.sql("CREATE TABLE src (id INT) USING parquet")
        gateway.execute("CREATE MATERIALIZED TABLE t0000 FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL "
                        "AS SELECT id FROM src")
        template = gateway.store.get(f"spark_catalog.{spark.catalog.currentDatabase()}.t0000")
        store, history = gateway.store, gateway.pipelines.runs.history
        for i in range(1, TABLES):
            store.put(replace(template, name=f"t{i:04d}"))
        runner = Runner("bench", os.getpid(), "app")

        def entry(table: int, n: int) -> RefreshEntry:
            stamp = f"2024-01-01T00:{n // 60:02d}:{n % 60:02d}.000+00:00"
            return RefreshEntry(f"{template.catalog}.{template.database}.t{table:04d}", Trigger.SCHEDULED,
                                None, stamp, stamp, "SUCCEEDED", n, runner, {}, None, 0.5, 3600.0)
        filled = timed(lambda: [history.record(entry(t, n)) for n in range(PER_TABLE) for t in range(TABLES)])
        more = [timed(lambda t=t: history.record(entry(t, PER_TABLE))) for t in range(1000)]
        one = median(lambda: gateway.history("t0500"), 20)
        every = timed(lambda: gateway.history())
        newest = median(lambda: gateway.history(limit=100))
        show = median(lambda: gateway.execute("SHOW MATERIALIZED TABLES"))
        statuses = timed(lambda: table_statuses(gateway))
        spark_one = median(lambda: spark.read.json(history.folder).where(
            f"table = '{template.catalog}.{template.database}.t0500'").collect(), 3)
    finally:
        gateway.close()
        spark.stop()
    print(f"History of {TABLES} tables x {PER_TABLE} refreshes ({TABLES * PER_TABLE:,} entries)")
    print(f"record one entry at 100k: mean {1000 * statistics.mean(more):.2f} ms, p99 "
          f"{1000 * sorted(more)[int(len(more) * 0.99)]:.2f} ms (target <= 10 ms); the first 100k took {filled:.1f} s")
    print(f"one table's history: {1000 * one:.2f} ms; plain Spark reading the files for it: "
          f"{1000 * spark_one:.0f} ms (ours ÷ Spark = 1/{spark_one / one:.0f})")
    print(f"every table's history ({TABLES * PER_TABLE + 1000:,} entries): {every:.2f} s; the newest 100: "
          f"{1000 * newest:.1f} ms")
    print(f"SHOW MATERIALIZED TABLES of {TABLES}: {1000 * show:.1f} ms; the dashboard's status of all "
          f"{TABLES}: {statuses:.2f} s")


if __name__ == "__main__":
    main()
