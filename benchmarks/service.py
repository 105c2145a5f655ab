"""What owning a store costs, and how long a client's statement takes to reach its owner.

(a) the owner's own CPU while idle with 100 FULL tables (lease heartbeat every second, mailbox polled
    every 100 ms, 100 cron jobs waiting), as % of one core over 20 s, beside the same process idle
    with only its SparkSession (the JVM's own use is not counted in either);
(b) SUSPEND / RESUME sent by a client gateway (the owner runs it and answers) ÷ the same statement run
    by the owner itself, p50 and p95 of 40 each, and the extra milliseconds the mailbox adds.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from workload import timed

TABLES = 100
IDLE_S = 20.0


def cpu_percent(seconds: float) -> float:
    start_cpu, start = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return 100 * (time.process_time() - start_cpu) / (time.monotonic() - start)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    from mt_magic import Gateway
    from mt_magic.session import local_session

    work = tempfile.mkdtemp(prefix="mt_magic-bench-")
    spark = local_session("mt_magic-bench", warehouse=os.path.join(work, "warehouse"))
    spark.sql("CREATE TABLE src USING parquet AS SELECT id, id % 7 AS k FROM range(1000)")
    baseline = cpu_percent(IDLE_S)
    store = os.path.join(work, "store", "catalog.json")
    owner = Gateway(spark, catalog_store=store, config={"materialized-table.full.initialize": "on-schedule"})
    for n in range(TABLES):
        owner.execute(f"CREATE MATERIALIZED TABLE t{n} FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL "
                      "AS SELECT k, COUNT(*) AS c FROM src GROUP BY k")
    owning = cpu_percent(IDLE_S)
    print(f"(a) idle CPU of this process over {IDLE_S:.0f} s: owning {TABLES} tables {owning:.2f} % of a core, "
          f"SparkSession alone {baseline:.2f} %: the lease, mailbox and scheduler add {owning - baseline:.2f} %")

    client = Gateway(spark, catalog_store=store)
    direct, sent = [], []
    for _ in range(20):
        for action in ("SUSPEND", "RESUME"):
            statement = f"ALTER MATERIALIZED TABLE t0 {action}"
            sent.append(timed(lambda: client.execute(statement)))
            again = "RESUME" if action == "SUSPEND" else "SUSPEND"
            owner.execute(f"ALTER MATERIALIZED TABLE t0 {again}")
            direct.append(timed(lambda: owner.execute(statement)))
    ms = {name: [v * 1000 for v in values] for name, values in (("direct", direct), ("sent", sent))}
    for share, label in ((0.5, "p50"), (0.95, "p95")):
        d, s = percentile(ms["direct"], share), percentile(ms["sent"], share)
        print(f"(b) {label}: by a client {s:.1f} ms ÷ by the owner {d:.1f} ms = {s / d:.2f} "
              f"(+{s - d:.1f} ms through the mailbox)")
    print(f"    mean by a client {statistics.mean(ms['sent']):.1f} ms")
    client.close()
    owner.close()
    spark.stop()


if __name__ == "__main__":
    main()
