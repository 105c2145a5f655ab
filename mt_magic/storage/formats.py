"""The data source a table is stored with, the options it reads, and the one way data is written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mt_magic.errors import ValidationError
from mt_magic.spark.tables import check_data_source

# Options that steer where and how data is stored, never passed to the data source.
RESERVED_OPTIONS = ("connector", "format", "path")


def data_source_options(options: dict[str, str]) -> dict[str, str]:
    """Table options the data source itself reads (compression, header, ...)."""
    return {k: v for k, v in options.items()
            if k not in RESERVED_OPTIONS and not k.startswith(("partition.fields.", "materialized-table.", "refresh."))}


def folder_writer(frame: Any, fmt: str, options: Mapping[str, str], partition_keys: Sequence[str]) -> Any:
    """The one way data is written: into a new folder (never over data), in the table's format."""
    writer = frame.write.format(fmt).mode("error").options(**options)
    return writer.partitionBy(*partition_keys) if partition_keys else writer


def data_source_format(spark: Any, options: Mapping[str, str], default: str) -> str:
    """The Spark data source WITH options name, as Flink's filesystem connector reads them."""
    connector = options.get("connector")
    if connector is not None and connector != "filesystem":
        raise ValidationError(
            f"Option 'connector' = '{connector}' is not supported: the table is stored by a Spark data "
            "source; leave 'connector' out or set it to 'filesystem', and pick the data source with "
            "'format'.")
    fmt = options.get("format", default)
    check_data_source(spark, fmt)
    return fmt
