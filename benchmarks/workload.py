"""What the benchmark scripts share: the source data, the aggregating query they refresh, timing."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

REPEATS = 5
QUERY = "SELECT ds, product_id, SUM(amount) AS total, COUNT(*) AS n FROM src GROUP BY ds, product_id"
# Spark stores partition columns last, so the plain INSERT names them in that order.
PLAIN_QUERY = f"SELECT product_id, total, n, ds FROM ({QUERY})"


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def median(action, repeats: int = REPEATS) -> float:
    return statistics.median(timed(action) for _ in range(repeats))


def exit_on_missed(targets: dict[str, bool]) -> None:
    """Say which targets were missed and exit non-zero, so a run that misses one fails."""
    missed = [name for name, met in targets.items() if not met]
    if missed:
        print("Missed: " + ", ".join(missed))
        sys.exit(1)
    print("Every target met.")


def last_run(gateway, table: str, partitions: dict | None = None) -> dict:
    """The table's newest history entry, checked to be a refresh that ran (not a skip)."""
    last = gateway.history(table, limit=1)[0]
    assert last["outcome"] == "SUCCEEDED" and (partitions is None or last["partitions"] == partitions), last
    return last


def write_source(spark, rows: int, days: int, generation: int = 0) -> None:
    """The partitioned source `src`, (re)written whole: every refresh after it has new files to read."""
    spark.sql(f"INSERT OVERWRITE src SELECT CAST((id + {generation}) % 1000 AS INT) AS product_id, "
              f"CAST(id % 97 AS DOUBLE) AS amount, "
              f"date_format(date_add(DATE'2024-01-01', CAST(id % {days} AS INT)), 'yyyy-MM-dd') AS ds "
              f"FROM range({rows})")


def open_gateway(name: str, remote: str | None = None):
    """A local session and a Gateway on a fresh store, in a new folder."""
    from mt_magic import Gateway
    from mt_magic.session import local_session

    work = tempfile.mkdtemp(prefix=f"mt_magic-{name}-")
    spark = local_session(f"mt_magic-{name}", warehouse=os.path.join(work, "warehouse"), remote=remote)
    return spark, Gateway(spark, catalog_store=os.path.join(work, "store", "catalog.json"))


def open_workload(rows: int, days: int, remote: str | None = None):
    """A session, a Gateway on a fresh store, a partitioned source `src` and an empty `plain` table of
    the query's shape (what plain Spark overwrites), in a new folder."""
    spark, gateway = open_gateway("bench", remote)
    spark.sql("CREATE TABLE src (product_id INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    write_source(spark, rows, days)
    spark.sql(f"CREATE TABLE plain USING parquet PARTITIONED BY (ds) AS {QUERY} LIMIT 0")
    return spark, gateway
