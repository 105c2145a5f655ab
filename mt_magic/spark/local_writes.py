"""A small result written by this process, where Spark would write it.

Spark's write of a few rows plans a write command, opens and commits its files through Hadoop's
committer and marks the folder done: measured here, 40-75 ms more than collecting the same rows
(TPC-H Q6 after RF1: a refresh of two such writes, 0.34 s against plain Spark's 0.28 s floor). A
refresh whose result is known to be small — an aggregate's output over a few partials, the partials
of a small append — takes its rows from Spark (as Arrow) and writes them here with pyarrow, as one
Parquet file laid out as Spark's writer lays it (its columns nullable, Spark's version and schema in
the footer). Only Parquet with no writer options, unpartitioned, on a local disk, for columns whose
Parquet form pyarrow writes as Spark reads it (`partition_folders.splittable`); more than MAX_ROWS
rows and Spark writes them after all.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import types as T

from mt_magic.spark.files import local_path
from mt_magic.spark.partition_folders import splittable

MAX_ROWS = 100_000
_VERSION = b"org.apache.spark.version"
_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"


def write_here(spark: Any, frame: Any, folder: str, fmt: str, options: Mapping[str, str],
               partition_columns: Sequence[str]) -> int | None:
    """The frame's rows written into the new `folder` as one Parquet file, and their count; None where
    Spark must write them (nothing was written: the folder does not exist)."""
    if fmt.lower() != "parquet" or options or partition_columns:
        return None
    schema = frame.schema
    if not splittable(schema, folder):
        return None
    rows = frame.limit(MAX_ROWS + 1).toArrow()
    if rows.num_rows > MAX_ROWS:
        return None
    import pyarrow
    from pyarrow import parquet
    nullable = T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])
    version = re.match(r"\d+\.\d+\.\d+", spark.version)
    metadata = {_ROW_METADATA: nullable.json().encode(), **({_VERSION: version.group().encode()} if version else {})}
    written = rows.cast(pyarrow.schema([field.with_nullable(True) for field in rows.schema]))
    target = local_path(folder)
    os.makedirs(target)
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    try:
        parquet.write_table(written.replace_schema_metadata(metadata), os.path.join(target, f".{name}"),
                            compression="snappy")
        os.rename(os.path.join(target, f".{name}"), os.path.join(target, name))
    except OSError:
        for leftover in os.listdir(target):
            os.remove(os.path.join(target, leftover))
        os.rmdir(target)
        return None
    return rows.num_rows
