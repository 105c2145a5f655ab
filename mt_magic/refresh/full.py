"""One batch refresh of a materialized table: the whole table or some of its partitions."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mt_magic.catalog.model import Column, MaterializedTable, Storage, Target
from mt_magic.incremental.provenance import PARTITION
from mt_magic.storage.formats import data_source_options, folder_writer
from mt_magic.storage.versions import TableStorage
from mt_magic.spark.tables import refresh_listings
from mt_magic.spark.errors import spark_call
from mt_magic.spark.frames import counting_rows, listed_by_driver, query_frame
from mt_magic.spark.jobs import job_scope
from mt_magic.spark.types import type_from_json, type_sql
from mt_magic.sql.statements import quote_identifier, sql_string

if TYPE_CHECKING:
    from mt_magic.refresh.provenance_state import Keeping

FAILED_TASKS_SETTLE_S = 2.0   # how long tasks of a failed write may still create its folder


@dataclass(frozen=True)
class RefreshResult:
    storage: Storage
    rows: int
    duration_s: float
    job_group: str


def job_group(table: MaterializedTable) -> str:
    return f"mt_magic:{table.identifier}"


def table_dataframe(spark: Any, table: MaterializedTable) -> DataFrame:
    return query_frame(spark, shaped_sql(table.definition_query, table.columns, table.identifier))


def shape(source: DataFrame, columns: Sequence[Column], identifier: str, carried: Sequence[str] = ()) -> DataFrame:
    """The query's output shaped into the table's columns: order, declared types, NOT NULL (checked
    on every NOT NULL column: asking the query's schema which are nullable would cost a round trip
    over Connect, and Spark drops the check where the value cannot be NULL). `carried`: columns
    kept as they are after the table's (an aggregate's state, written in the same files)."""
    return source.selectExpr(*_shaped(columns, identifier), *map(quote_identifier, carried))


def shaped_sql(query: str, columns: Sequence[Column], identifier: str, names: Sequence[str] = (),
               carried: Sequence[str] = ()) -> str:
    """`shape` written around a query's text (its output columns renamed to `names` first, when
    given): one statement for Spark to analyse, where a DataFrame step more is one analysis more on a
    classic session."""
    aliases = f"({', '.join(map(quote_identifier, names))})" if names else ""
    select = ", ".join([*_shaped(columns, identifier), *map(quote_identifier, carried)])
    return f"SELECT {select} FROM (\n{query}\n) AS mt_query{aliases}"


def shaped(table: MaterializedTable, query: str, keeping: Keeping | None) -> str:
    """The query shaped as the table's columns; `keeping`: with the source partition last."""
    if keeping is None:
        return shaped_sql(query, table.columns, table.identifier, table.query_columns)
    return shaped_sql(query, table.columns, table.identifier,
                      [*table.query_columns, PARTITION] if table.query_columns else (), carried=[PARTITION])


def _shaped(columns: Sequence[Column], identifier: str) -> list[str]:
    expressions = []
    for column in columns:
        if column.computed is not None:
            expression = f"({column.computed})"
        else:
            expression = quote_identifier(column.name)
            if not column.nullable:
                message = sql_string(f"Column '{column.name}' of {identifier} is NOT NULL, "
                                     "but the query produced a NULL.")
                expression = f"coalesce({expression}, raise_error({message}))"
        expressions.append(f"CAST({expression} AS {type_sql(type_from_json(column.type_json))}) AS "
                           f"{quote_identifier(column.name)}")
    return expressions


def refresh_frame(spark: Any, table: MaterializedTable, target: Target) -> DataFrame:
    """What a refresh of `target` writes: the query's result, shaped, for the target's partitions."""
    frame = table_dataframe(spark, table)
    for key, value in target.spec.items():
        frame = frame.where(F.col(quote_identifier(key)) == F.lit(value))
    if target.key is not None:     # Spark pushes the filter down to the changed source partitions
        frame = frame.where(F.col(quote_identifier(target.key)).isin(list(target.values)))
    return frame


def run_refresh(spark: Any, storage: TableStorage, table: MaterializedTable, target: Target,
                dynamic_options: dict[str, str] | None = None, listings: Future | None = None,
                verify: Callable[[], None] | None = None, files: Sequence[str] = ()) -> RefreshResult:
    """Write a new version from the current source data and publish it; the old stays on failure.
    `listings`: the sources' cached listings are being forgotten already (wait for it). `verify`,
    after the write and before the publish, raises when what was read must not be published.
    `files`: the sources' files as the snapshot listed them, which Spark lists again as it plans (by
    the driver where they are local: a source of many partition folders is listed by a job else)."""
    started = time.monotonic()
    group = job_group(table)
    described = ", ".join(f"{k}={v}" for k, v in target.describe().items())
    with job_scope(spark, group, f"refresh {table.identifier} ({described or 'table'})"), \
            listed_by_driver(spark, files):
        # Another session or application may have written a source: read what is there now.
        if listings is not None:
            listings.result()
        else:
            refresh_listings(spark, table.source_tables)
        frame, rows = counting_rows(refresh_frame(spark, table, target))
        version = storage.new_version(table)
        writer = folder_writer(frame, table.storage.format, data_source_options(
            {**table.options, **(dynamic_options or {})}), table.partition_keys)
        try:
            spark_call(lambda: writer.save(version), f"Refreshing {table.identifier}")
            storage.files.mkdirs(version)   # an empty result may leave no folder at all
            if verify is not None:
                verify()
            published = storage.publish(table, version, target)
        except BaseException:
            # The refresh's own error is what counts; a version left here goes by the next sweep.
            with contextlib.suppress(Exception):
                storage.discard_version(table, version, settle_s=FAILED_TASKS_SETTLE_S)
            raise
        storage.written(version)
    return RefreshResult(published, rows(),
                         time.monotonic() - started, group)
