"""What the benchmark scripts share: the source data, the aggregating query they refresh, timing."""

from __future__ import annotations

import os
import statistics
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
    spark.sql("CREATE TABLE src USING parquet PARTITIONED BY (ds) AS SELECT "
              f"date_format(date_add(DATE'2024-01-01', CAST(id % {days} AS INT)), 'yyyy-MM-dd') AS ds, "
              f"CAST(id % 1000 AS INT) AS product_id, CAST(id % 97 AS DOUBLE) AS amount FROM range({rows})")
    spark.sql(f"CREATE TABLE plain USING parquet PARTITIONED BY (ds) AS {QUERY} LIMIT 0")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
    return spark, gateway
