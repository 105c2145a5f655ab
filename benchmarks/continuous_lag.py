"""CONTINUOUS lag: time from an append to the source completing to the rows being visible.

For FRESHNESS = 1, 2 and 5 seconds, rows are appended to the source at a steady rate and each
batch is polled for through spark.table(mt). Printed: p50 / p95 lag (target on 2 cores: p95 ≤
freshness + 1 s at 2 s and 5 s), the same for plain Spark (a streaming query with Spark's own file
sink, read back with spark.read) at 2 s, and the CPU an idle streaming table uses.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from mt_magic import Gateway
from mt_magic.session import local_session

APPENDS = 6


def lag_samples(spark, count_rows, marker_base: int, interval: float) -> list[float]:
    """Append a batch with a unique user id, then poll until it is visible; once per interval."""
    lags = []
    for i in range(APPENDS):
        marker = marker_base + i
        started = time.monotonic()
        spark.sql(f"INSERT INTO orders VALUES ({marker}, 5.0), ({marker}, 6.0)")
        appended = time.monotonic()
        while count_rows(marker) < 2:
            if time.monotonic() - appended > 60:
                raise RuntimeError(f"batch {marker} not visible within 60 s")
            time.sleep(0.05)
        lags.append(time.monotonic() - appended)
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    return lags


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    work = tempfile.mkdtemp(prefix="mt_magic-lag-")
    spark = local_session("mt_magic-lag", warehouse=os.path.join(work, "warehouse"))
    gateway = Gateway(spark, catalog_store=os.path.join(work, "store", "catalog.json"))
    try:
        spark.sql("CREATE TABLE orders (user_id INT, amount DOUBLE) USING parquet")
        spark.sql("INSERT INTO orders VALUES (0, 1.0)")
        results = {}
        for freshness in (1, 2, 5):
            name = f"mt_{freshness}"
            gateway.execute(f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '{freshness}' SECOND "
                            f"AS SELECT user_id, amount FROM orders WHERE amount > 2")

            def visible(marker: int, table: str = name) -> int:
                return spark.table(table).where(f"user_id = {marker}").count()
            lag_samples(spark, visible, freshness * 1000 - 100, freshness)         # warm-up
            results[freshness] = lag_samples(spark, visible, freshness * 1000, freshness)
            gateway.execute(f"DROP MATERIALIZED TABLE {name}")

        plain_path = os.path.join(work, "plain")
        query = (spark.readStream.table("orders").where("amount > 2").writeStream.format("parquet")
                 .option("checkpointLocation", os.path.join(work, "plain-cp")).trigger(processingTime="2 seconds")
                 .start(plain_path))

        def plain_visible(marker: int) -> int:
            try:
                return spark.read.parquet(plain_path).where(f"user_id = {marker}").count()
            except Exception:   # noqa: BLE001 - nothing written yet
                return 0
        lag_samples(spark, plain_visible, 9000, 2)
        plain = lag_samples(spark, plain_visible, 10000, 2)
        query.stop()

        gateway.execute("CREATE MATERIALIZED TABLE idle FRESHNESS = INTERVAL '2' SECOND AS "
                        "SELECT user_id, amount FROM orders WHERE amount > 2")
        time.sleep(6)                                   # let it settle into idle triggers
        jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
        wall, jvm, python = time.monotonic(), cpu_seconds(jvm_pid), time.process_time()
        time.sleep(20)
        elapsed = time.monotonic() - wall
        idle_cpu = (cpu_seconds(jvm_pid) - jvm + time.process_time() - python) / elapsed

        for freshness, lags in results.items():
            target = f" (target p95 <= {freshness + 1} s)" if freshness in (2, 5) else ""
            print(f"FRESHNESS {freshness} s: lag p50 {p(lags, 50):.2f} s, p95 {p(lags, 95):.2f} s{target}")
        print(f"plain Spark streaming + file sink at a 2 s trigger: p50 {p(plain, 50):.2f} s, "
              f"p95 {p(plain, 95):.2f} s; mt_magic p95 / plain p95 = {p(results[2], 95) / p(plain, 95):.2f}")
        print(f"idle streaming table (2 s trigger): {idle_cpu * 100:.1f}% of one core (JVM + Python)")
    finally:
        gateway.close()
        spark.stop()


if __name__ == "__main__":
    main()
