"""Readers polling a table during refreshes see the old data or the new, never empty or mixed."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import functions as F


@pytest.mark.parametrize("partitioned", [False, True])
def test_readers_never_see_a_partial_table(spark, gw, db, partitioned):
    spark.sql("CREATE TABLE src (k STRING, gen INT) USING parquet")
    spark.sql("INSERT INTO src SELECT CAST(id % 8 AS STRING), 0 FROM range(400)")
    clause = "PARTITIONED BY (k)" if partitioned else ""
    gw.execute(f"CREATE MATERIALIZED TABLE mt {clause} REFRESH_MODE = FULL AS SELECT k, gen FROM src")
    seen, errors, stop = [], [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                row = spark.table(f"{db}.mt").agg(F.count("*"), F.countDistinct("gen"), F.min("gen")).first()
                seen.append(tuple(row))
            except Exception as error:     # any failed read is a failure of atomic publishing
                errors.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for generation in range(1, 5):
            spark.sql(f"INSERT OVERWRITE src SELECT CAST(id % 8 AS STRING), {generation} FROM range(400)")
            gw.execute("ALTER MATERIALIZED TABLE mt REFRESH")
    finally:
        stop.set()
        reader.join(60)
    assert errors == []
    assert len(seen) > 5
    assert all(count == 400 and distinct == 1 for count, distinct, _ in seen), set(seen)
    assert {gen for _, _, gen in seen} > {0}
