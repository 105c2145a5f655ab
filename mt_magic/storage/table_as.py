"""CREATE TABLE AS / CREATE OR REPLACE TABLE AS: FLIP-218's drop-on-failure, made stronger on Spark.

The data is written by Spark's own saveAsTable under a staging name no reader asks for, and the table
appears under its own name by one catalog rename once the data is complete: a reader finds no table or
the whole table, never a partial one. A failed or cancelled write drops the staging table and deletes
what it wrote. REPLACE renames the old table away only after the new data is complete, and puts it back
if the swap fails.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from mt_magic.errors import ValidationError
from mt_magic.storage.versions import TABLE_PROPERTY, data_source_format, data_source_options, folder_writer
from mt_magic.results import Result
from mt_magic.spark.catalog import (TableLookup, database_location, lookup_table, partition_locations,
                                    switch_partition_locations, table_facts)
from mt_magic.spark.commands import command_rows
from mt_magic.spark.errors import spark_call
from mt_magic.spark.files import Files, files_for
from mt_magic.sql.statements import quote_identifier, sql_string

CREATE, IF_NOT_EXISTS, REPLACE = "create", "if-not-exists", "replace"
SESSION_CATALOG = "spark_catalog"


@dataclass(frozen=True)
class TableAsTarget:
    """A validated destination; building one checks everything that can be checked before writing."""

    catalog: str
    database: str
    name: str
    mode: str
    format: str
    options: dict[str, str] = field(default_factory=dict)
    partition_keys: tuple[str, ...] = ()
    comment: str | None = None
    exists: bool = False

    @property
    def identifier(self) -> str:
        return f"{self.catalog}.{self.database}.{self.name}"

    def quoted(self, name: str | None = None) -> str:
        return ".".join(quote_identifier(p) for p in (self.catalog, self.database, name or self.name))

    def renamed(self, name: str | None = None) -> str:
        """RENAME TO takes database.name: the catalog stays the same."""
        return ".".join(quote_identifier(p) for p in (self.database, name or self.name))


def plan_target(spark: Any, parts: tuple[str, str, str], options: Mapping[str, str],
                mode: str, partition_keys: Sequence[str] = (), comment: str | None = None) -> TableAsTarget:
    catalog, database, name = parts
    identifier = ".".join(parts)
    if catalog != SESSION_CATALOG:
        raise ValidationError(f"Table {identifier}: CREATE TABLE AS writes into the session catalog "
                              f"'{SESSION_CATALOG}' only.")
    fmt = data_source_format(spark, options, default=spark.conf.get("spark.sql.sources.default") or "parquet")
    path = options.get("path")
    if path is not None and not files_for(spark).is_empty_dir(path):
        raise ValidationError(f"Option 'path' = '{path}' names a folder that is not empty; the new table "
                              "needs a folder of its own.")
    target = TableAsTarget(catalog, database, name, mode, fmt, dict(options), tuple(partition_keys), comment)
    lookup = lookup_table(spark, catalog, database, name)
    if lookup is TableLookup.NO_DATABASE:
        raise ValidationError(f"Database '{catalog}'.'{database}' doesn't exist.")
    if lookup is TableLookup.MISSING:
        return target
    if _is_materialized(spark, target):
        raise ValidationError(f"{identifier} is a materialized table: change it with ALTER MATERIALIZED "
                              "TABLE … AS, or drop it with DROP MATERIALIZED TABLE.")
    if mode == CREATE:
        raise ValidationError(f"Table {identifier} already exists.")
    return replace(target, exists=True)


def _is_materialized(spark: Any, target: TableAsTarget) -> bool:
    rows = command_rows(spark, f"SHOW TBLPROPERTIES {target.quoted()} ({sql_string(TABLE_PROPERTY)})")
    return any(row[1] == "true" for row in rows)


def write_table_as(spark: Any, frame: DataFrame, target: TableAsTarget) -> Result:
    if target.exists and target.mode == IF_NOT_EXISTS:
        return Result.ok(f"Table {target.identifier} already exists; nothing was written (IF NOT EXISTS).")
    files = files_for(spark)
    path = target.options.get("path")
    path_existed = path is not None and files.exists(path)
    suffix = uuid.uuid4().hex[:8]
    staging = f"_mt_staging_{target.name}_{suffix}"
    observation = Observation(f"ctas_{suffix}")
    writer = folder_writer(frame.observe(observation, F.count(F.lit(1)).alias("rows")), target.format,
                           data_source_options(target.options), target.partition_keys)
    if path is not None:
        writer = writer.option("path", files.qualify(path))
    try:
        spark_call(lambda: writer.saveAsTable(target.quoted(staging)), f"Writing {target.identifier}")
        if target.comment:
            spark.sql(f"ALTER TABLE {target.quoted(staging)} SET TBLPROPERTIES "
                      f"('comment' = {sql_string(target.comment)})")
        _swap_in(spark, target, staging, suffix)
    except BaseException:
        _remove_staging(spark, files, target, staging, path if path is not None and not path_existed else None)
        if path_existed:
            for entry in files.list(path):
                files.delete(entry.path)
        raise
    rows = int(observation.get.get("rows", 0))
    verb = "Replaced" if target.exists else "Created"
    return Result.ok(f"{verb} table {target.identifier} ({target.format}, {rows} rows).")


def _swap_in(spark: Any, target: TableAsTarget, staging: str, suffix: str) -> None:
    """One rename makes the complete table visible; REPLACE moves the old one aside first."""
    if not target.exists:
        _rename(spark, target, staging, target.name, f"Publishing {target.identifier}")
        return
    backup = f"_mt_replaced_{target.name}_{suffix}"
    _rename(spark, target, target.name, backup, f"Moving the old {target.identifier} aside")
    try:
        _rename(spark, target, staging, target.name, f"Publishing {target.identifier}")
    except BaseException:
        _rename(spark, target, backup, target.name, f"Restoring the old {target.identifier}")
        raise
    spark.sql(f"DROP TABLE {target.quoted(backup)} PURGE")


def _rename(spark: Any, target: TableAsTarget, old: str, new: str, what: str) -> None:
    """RENAME, with the partitions of a managed table pointed where its folder goes.

    Spark's in-memory catalog moves a managed table's folder on RENAME but leaves its partitions'
    locations behind: they would dangle, and a later PURGE of the old name would delete the new data.
    The partitions are repointed first (nobody reads them under `old`); a catalog that moves them
    itself (Hive) then finds nothing to move.
    """
    facts = table_facts(spark, target.quoted(old))
    if facts.kind == "MANAGED" and facts.partition_columns and facts.location:
        files = files_for(spark)   # the catalog writes file:/x and file:///x alike: compare qualified
        old_dir = files.qualify(facts.location).rstrip("/")
        new_dir = _default_location(spark, files, target, new)
        located = {spec: files.qualify(location) for spec, location in partition_locations(
            spark, target.quoted(old), facts.partition_columns).items()}
        moved = {spec: new_dir + location[len(old_dir):] for spec, location in located.items()
                 if location.startswith(old_dir + "/")}
        switch_partition_locations(spark, target.quoted(old), moved)
    spark_call(lambda: spark.sql(f"ALTER TABLE {target.quoted(old)} RENAME TO {target.renamed(new)}"), what)


def _default_location(spark: Any, files: Files, target: TableAsTarget, name: str) -> str:
    """Where the session catalog keeps a managed table of that name: its database's folder."""
    return files.qualify(database_location(spark, target.catalog, target.database)).rstrip("/") + \
        "/" + name.lower()


def _remove_staging(spark: Any, files: Files, target: TableAsTarget, staging: str,
                    owned_path: str | None) -> None:
    """Drop on failure: the staging table, its managed folder, and a 'path' folder the write made."""
    default_location = _default_location(spark, files, target, staging)
    spark.sql(f"DROP TABLE IF EXISTS {target.quoted(staging)} PURGE")
    for folder in (default_location, owned_path):
        if folder is not None and files.exists(folder):
            files.delete(folder)
