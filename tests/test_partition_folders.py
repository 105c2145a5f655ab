"""An append's partials, written by Spark as one file and split into partition folders by this
process, land where Spark's own partitioned write puts them, and Spark reads them back the same:
folder names of every character Spark escapes, NULL and empty values, and each column type the split
takes. A folder named otherwise would not be retracted when its source partition is rewritten."""

from __future__ import annotations

import glob
import os
from datetime import date
from decimal import Decimal

from pyspark.sql import types as T

from mt_magic.spark.partition_folders import split_into_folders, splittable

SCHEMA = T.StructType([T.StructField("mt_partition", T.StringType()), T.StructField("mt_paired", T.StringType()),
                       T.StructField("n", T.LongType()), T.StructField("small", T.ShortType()),
                       T.StructField("amount", T.DecimalType(12, 2)), T.StructField("wide", T.DecimalType(30, 4)),
                       T.StructField("ratio", T.DoubleType()), T.StructField("day", T.DateType()),
                       T.StructField("flag", T.BooleanType()), T.StructField("name", T.StringType()),
                       T.StructField("raw", T.BinaryType())])
COLUMNS = ("mt_partition", "mt_paired")


def _rows() -> list[tuple]:
    values = [chr(code) + "x" for code in range(1, 256)] + ["", None, "é✓", "a b", "ü/ü", "m'3=%2F"]
    return [(value, values[(i * 7) % len(values)], i, i % 300, Decimal(i) / 4, Decimal(i * 1000003) / 16,
             i / 3, date(1500 + i, 1 + i % 12, 1), i % 2 == 0, None if i % 5 == 0 else f"n{i}", bytes([i % 256]))
            for i, value in enumerate(values)]


def _read(spark, folder: str):
    files = sorted(glob.glob(f"{folder}/*/*/*.parquet"))
    data = T.StructType(SCHEMA.fields[2:])
    return spark.read.schema(T.StructType([*data.fields, *SCHEMA.fields[:2]])).option("basePath", folder) \
        .parquet(*files).collect()


def test_split_rows_land_where_sparks_partitioned_write_puts_them(spark, tmp_path):
    frame = spark.createDataFrame(_rows(), SCHEMA)
    frame.write.partitionBy(*COLUMNS).parquet(str(tmp_path / "spark"))
    split = f"file:{tmp_path / 'split'}"
    assert splittable(SCHEMA, split)
    frame.coalesce(1).write.parquet(split)
    split_into_folders([f"file:{path}" for path in glob.glob(f"{tmp_path / 'split'}/*.parquet")], COLUMNS)

    def folders(name: str) -> set[str]:
        return {os.path.relpath(os.path.dirname(p), tmp_path / name) for p in glob.glob(f"{tmp_path / name}/*/*/*.parquet")}

    assert folders("split") == folders("spark") and len(folders("spark")) > 250
    assert not glob.glob(f"{tmp_path / 'split'}/*.parquet")      # the unsplit file is gone
    assert sorted(_read(spark, str(tmp_path / "split")), key=repr) == sorted(_read(spark, str(tmp_path / "spark")), key=repr)


def test_rows_of_other_types_are_left_to_spark(tmp_path):
    nested = T.StructType([T.StructField("mt_partition", T.StringType()), T.StructField("at", T.TimestampType())])
    assert not splittable(nested, f"file:{tmp_path}")
    assert not splittable(SCHEMA, "hdfs://namenode/warehouse/t")
