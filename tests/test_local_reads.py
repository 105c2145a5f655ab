"""A few small files read by this process (`spark.local_reads`) hold the rows Spark's own read of them
holds: partition folders of every character Spark escapes, NULL, whole-number and date partitions, each
column type it takes, dates before the Gregorian reform, the file a row came from. Where pyarrow would
read otherwise — timestamps, a column missing or of another type in a file, names differing in case, a
reader option, another format — Spark reads them."""

from __future__ import annotations

import glob
from datetime import date
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from mt_magic.spark.frames import files_frame
from mt_magic.spark.local_reads import read_here

DATA = [T.StructField("n", T.LongType()), T.StructField("small", T.ByteType()), T.StructField("amount", T.DecimalType(9, 2)),
        T.StructField("wide", T.DecimalType(38, 10)), T.StructField("ratio", T.FloatType()),
        T.StructField("day", T.DateType()), T.StructField("flag", T.BooleanType()), T.StructField("name", T.StringType()),
        T.StructField("raw", T.BinaryType())]


def _files(folder) -> list[str]:
    return sorted(f"file:{path}" for path in glob.glob(f"{folder}/**/*.parquet", recursive=True))


def _both(spark, schema: T.StructType, files: list[str], partitions: tuple[str, ...], file_column: str | None = None):
    """Rows read here and rows Spark reads, each sorted."""
    here = read_here(spark, "parquet", schema, {}, files, partitions, file_column)
    assert here is not None
    frame, rows = here
    spark_rows = files_frame(spark, "parquet", schema, {}, files, partitions, file_column).collect()
    assert rows == len(spark_rows)
    assert frame.columns == schema.fieldNames() + ([file_column] if file_column else [])
    return sorted(frame.collect(), key=repr), sorted(spark_rows, key=repr)


def test_partition_folders_of_every_escaped_character_read_as_spark_reads_them(spark, tmp_path):
    values = [chr(code) + "v" for code in range(1, 128)] + ["", None, "é✓", "a b", "ü/ü", "m'3=%2F", "__x__"]
    rows = [(i, i % 100, Decimal(i) / 4, Decimal(i * 1000003) / 7, i / 3, date(1000 + i, 1 + i % 12, 28), i % 2 == 0,
             None if i % 5 == 0 else f"n{i}", bytes([i % 256]), value, i % 3) for i, value in enumerate(values)]
    schema = T.StructType([*DATA, T.StructField("part", T.StringType()), T.StructField("bucket", T.IntegerType())])
    spark.createDataFrame(rows, schema).write.partitionBy("part", "bucket").parquet(str(tmp_path / "t"))
    files = _files(tmp_path / "t")
    assert len(files) > 120
    here, spark_rows = _both(spark, schema, files, ("part", "bucket"), "mt_file")
    assert here == spark_rows


def test_date_and_null_partitions_read_as_spark_reads_them(spark, tmp_path):
    rows = [(1, date(2024, 1, 1)), (2, None), (3, date(1200, 3, 1)), (4, date(2024, 1, 1))]
    schema = T.StructType([T.StructField("n", T.LongType()), T.StructField("ds", T.DateType())])
    spark.createDataFrame(rows, schema).write.partitionBy("ds").parquet(str(tmp_path / "t"))
    here, spark_rows = _both(spark, schema, _files(tmp_path / "t"), ("ds",))
    assert here == spark_rows and len(here) == 4


@pytest.mark.parametrize("case", ["timestamp", "missing column", "other type", "other case", "option", "json"])
def test_what_pyarrow_would_read_otherwise_is_left_to_spark(spark, tmp_path, case):
    schema = T.StructType([T.StructField("n", T.LongType()), T.StructField("name", T.StringType())])
    written = {"timestamp": "n BIGINT, name STRING, at TIMESTAMP", "missing column": "n BIGINT",
               "other type": "n INT, name STRING", "other case": "N BIGINT, name STRING"}.get(case, "n BIGINT, name STRING")
    frame = spark.sql("SELECT 1 AS n, 'a' AS name, TIMESTAMP'2024-01-01 00:00:00' AS at").selectExpr(
        *(f"CAST({c.split()[0].lower()} AS {c.split()[1]}) AS {c.split()[0]}" for c in written.split(", ")))
    fmt = "json" if case == "json" else "parquet"
    frame.write.format(fmt).save(str(tmp_path / "t"))
    files = sorted(f"file:{p}" for p in glob.glob(f"{tmp_path}/t/*.{fmt}"))
    if case == "timestamp":
        schema = schema.add("at", T.TimestampType())
    options = {"mergeSchema": "false"} if case == "option" else {}
    assert read_here(spark, fmt, schema, options, files, ()) is None


def test_a_file_written_again_under_its_name_is_read_again(spark, tmp_path):
    """Rows read here are kept for the process by the file's name, time and size: a file written
    again is read again, and the same file read as another schema is read so."""
    schema = T.StructType([T.StructField("n", T.LongType())])
    for folder, low, high in (("t", 0, 3), ("u", 5, 12)):
        spark.range(low, high, numPartitions=1).selectExpr("id AS n").write.parquet(str(tmp_path / folder))
    [path], [other] = _files(tmp_path / "t"), _files(tmp_path / "u")
    assert sorted(read_here(spark, "parquet", schema, {}, [path], ())[0].collect()) == [(0,), (1,), (2,)]
    with open(other.removeprefix("file:"), "rb") as new, open(path.removeprefix("file:"), "wb") as old:
        old.write(new.read())
    assert sorted(read_here(spark, "parquet", schema, {}, [path], ())[0].collect()) == [(n,) for n in range(5, 12)]
    named = T.StructType([T.StructField("n", T.LongType(), metadata={"comment": "again"})])
    assert read_here(spark, "parquet", named, {}, [path], ())[0].schema["n"].metadata == {"comment": "again"}
