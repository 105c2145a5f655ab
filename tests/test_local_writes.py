"""A small result written by this process reads back in Spark exactly as Spark's own write of it:
the same rows, the same schema (nullable, as Spark writes), Spark's footer keys; what it cannot write
as Spark would (too many rows, another format, writer options, partitions, timestamps) is left to
Spark, with nothing written. And a refresh after a small append writes its table that way."""

from __future__ import annotations

import glob
import json
import os
from datetime import date
from decimal import Decimal

import pytest
from pyarrow import parquet
from pyspark.sql import types as T

from mt_magic.spark.local_writes import MAX_ROWS, write_here

SCHEMA = T.StructType([T.StructField("k", T.IntegerType(), False), T.StructField("tiny", T.ByteType()),
                       T.StructField("n", T.LongType()), T.StructField("price", T.DecimalType(15, 2)),
                       T.StructField("wide", T.DecimalType(38, 6)), T.StructField("share", T.DoubleType()),
                       T.StructField("day", T.DateType()), T.StructField("ok", T.BooleanType()),
                       T.StructField("name", T.StringType()), T.StructField("raw", T.BinaryType())])


def _rows() -> list[tuple]:
    return [(i, i % 100 - 50, i * 10**12, Decimal(i) / 8, Decimal(i * 987654321) / 64, i / 7 if i % 9 else None,
             date(1200 + 3 * i, 1 + i % 12, 28), None if i % 4 == 0 else i % 3 == 0,
             ["", "é✓", "a\nb", None, "x" * 300][i % 5], None if i % 6 == 0 else bytes([i % 256, 0]))
            for i in range(250)]


def _footer(folder: str) -> dict[bytes, bytes]:
    [path] = glob.glob(f"{folder}/*.parquet")
    return parquet.read_metadata(path).metadata


def test_rows_written_here_read_back_as_sparks_own_write_of_them(spark, tmp_path):
    frame = spark.createDataFrame(_rows(), SCHEMA)
    frame.write.parquet(str(tmp_path / "spark"))
    assert write_here(spark, frame, f"file:{tmp_path / 'here'}", "parquet", {}, ()) == 250
    ours, theirs = spark.read.parquet(str(tmp_path / "here")), spark.read.parquet(str(tmp_path / "spark"))
    assert ours.schema == theirs.schema and ours.schema["k"].nullable      # (as Spark writes it)
    assert sorted(ours.collect()) == sorted(theirs.collect()) == sorted(frame.collect())
    footer = _footer(str(tmp_path / "here"))
    assert footer[b"org.apache.spark.version"].decode() == spark.version.split("-")[0]
    assert T.StructType.fromJson(json.loads(footer[b"org.apache.spark.sql.parquet.row.metadata"])) \
        == theirs.schema


def test_an_empty_result_is_one_file_of_its_columns(spark, tmp_path):
    frame = spark.createDataFrame(_rows(), SCHEMA).where("k < 0")
    assert write_here(spark, frame, f"file:{tmp_path / 'here'}", "parquet", {}, ()) == 0
    read = spark.read.parquet(str(tmp_path / "here"))
    assert read.count() == 0 and read.columns == SCHEMA.fieldNames()


@pytest.mark.parametrize("case", ["too many rows", "csv", "options", "partitioned", "timestamp", "remote disk"])
def test_what_it_cannot_write_as_spark_would_is_left_to_spark(spark, tmp_path, case):
    frame = spark.range(MAX_ROWS + 1) if case == "too many rows" else spark.createDataFrame(_rows(), SCHEMA)
    if case == "timestamp":
        frame = frame.selectExpr("k", "TIMESTAMP'2024-01-01 10:00:00' AS at")
    folder = "hdfs://namenode/warehouse/t" if case == "remote disk" else f"file:{tmp_path / 'here'}"
    assert write_here(spark, frame, folder, "csv" if case == "csv" else "parquet",
                      {"compression": "gzip"} if case == "options" else {},
                      ("k",) if case == "partitioned" else ()) is None
    assert not os.path.exists(tmp_path / "here")


def test_a_refresh_after_a_small_append_writes_its_small_result_here(spark, gw):
    spark.sql("CREATE TABLE lw_src (k INT, v DOUBLE, m STRING) USING parquet PARTITIONED BY (m)")
    spark.sql("INSERT INTO lw_src VALUES (1, 1.5, 'a'), (2, 2.5, 'b'), (1, 4.0, 'b')")
    query = "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM lw_src GROUP BY k"
    gw.execute(f"CREATE MATERIALIZED TABLE lw_sums WITH ('refresh.policy' = 'incremental') FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS {query}")
    spark.sql("INSERT INTO lw_src VALUES (3, 0.5, 'a'), (2, 1.0, 'c')")
    gw.refresh("lw_sums")
    assert gw.history("lw_sums", limit=1)[0]["technique"] == "incremental"
    assert sorted(spark.table("lw_sums").collect()) == sorted(spark.sql(query).collect())
    written = {parquet.read_metadata(path).created_by.split()[0]
               for path in spark.table("lw_sums").inputFiles() for path in [path.removeprefix("file:")]}
    assert written == {"parquet-cpp-arrow"}
