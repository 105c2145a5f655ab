"""CREATE TABLE AS / CREATE OR REPLACE TABLE AS: FLIP-218's drop-on-failure, made stronger on Spark.

The data is written by Spark's own saveAsTable under a staging name no reader asks for, and the table
appears under its own name by one catalog rename once the data is complete: a reader finds no table or
the whole table, never a partial one. A failed or cancelled write drops the staging table and deletes
what it wrote. REPLACE renames the old table away only after the new data is complete, and puts it back
if the swap fails.

Without a 'path', the data goes into a version folder under the table's folder (the table records
that folder in a property), so a REPLACE never moves or deletes files a reader of the old table is
scanning: the old version is retired and deleted by age, as materialized tables' versions are. A
managed table Spark created keeps Spark's layout: replacing it moves its folder, as Spark's RENAME does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame

from mt_magic.catalog.pending import PendingWrites
from mt_magic.errors import ValidationError
from mt_magic.storage.formats import data_source_format, data_source_options, folder_writer
from mt_magic.storage.ddl import TABLE_PROPERTY
from mt_magic.storage.versions import VERSION_PREFIX, version_folder
from mt_magic.results import Result
from mt_magic.spark.tables import (TableLookup, database_location, lookup_table, partition_locations,
                                    set_table_location, switch_partition_locations, table_facts)
from mt_magic.spark.commands import command_rows
from mt_magic.spark.errors import spark_call
from mt_magic.spark.files import Files, files_for
from mt_magic.spark.frames import counting_rows
from mt_magic.spark.jobs import uninterrupted
from mt_magic.spark.session_catalog import SESSION_CATALOG
from mt_magic.sql.statements import quote_identifier, sql_string

CREATE, IF_NOT_EXISTS, REPLACE = "create", "if-not-exists", "replace"
VERSIONS_PROPERTY = "mt_magic.table-as.versions"    # the folder holding a table's version folders


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
    replaced_managed: bool = False          # the table replaced is managed: its folder moves on RENAME
    replaced_location: str | None = None
    replaced_versions: str | None = None    # the table replaced keeps versions in this folder
    replaced_reads_as: tuple = ()           # how readers read the table replaced (table_facts)

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
    properties = table_properties(spark, target.quoted())
    if properties.get(TABLE_PROPERTY) == "true":
        raise ValidationError(f"{identifier} is a materialized table: change it with ALTER MATERIALIZED "
                              "TABLE … AS, or drop it with DROP MATERIALIZED TABLE.")
    if mode == CREATE:
        raise ValidationError(f"Table {identifier} already exists.")
    facts = table_facts(spark, target.quoted())
    return replace(target, exists=True, replaced_managed=facts.kind == "MANAGED",
                   replaced_location=facts.location, replaced_versions=properties.get(VERSIONS_PROPERTY),
                   replaced_reads_as=facts.reads_as if properties.get(VERSIONS_PROPERTY)
                   and not facts.partition_columns else ())


def table_properties(spark: Any, quoted: str) -> dict[str, str]:
    return {row[0]: row[1] for row in command_rows(spark, f"SHOW TBLPROPERTIES {quoted}")}


def write_table_as(spark: Any, frame: DataFrame, target: TableAsTarget, pending: PendingWrites) -> Result:
    """The write. `pending` notes it in the store's folder first, so that what a kill leaves behind is
    finished or undone by the store's next owner (`recover_table_as`), and takes the replaced version."""
    if target.exists and target.mode == IF_NOT_EXISTS:
        return Result.ok(f"Table {target.identifier} already exists; nothing was written (IF NOT EXISTS).")
    files = files_for(spark)
    path = target.options.get("path")
    suffix = uuid.uuid4().hex[:8]
    staging = f"_mt_staging_{target.name}_{suffix}"
    backup = f"_mt_replaced_{target.name}_{suffix}" if target.exists else None
    own_folder, *aside = _default_locations(spark, files, target, target.name, staging, *([backup] if backup else []))
    versions = None if path is not None or target.replaced_managed else target.replaced_versions or own_folder
    location = files.qualify(path) if path is not None else version_folder(versions) if versions else None
    location_existed = location is not None and files.exists(location)
    versions_existed = versions is not None and files.exists(versions)
    note_id = pending.add({
        "catalog": target.catalog, "database": target.database, "name": target.name,
        "staging": staging, "backup": backup, "path": location, "path_existed": location_existed,
        "replaced": target.replaced_location if target.replaced_versions else None,
        "folders": aside})
    counted, rows = counting_rows(frame)
    writer = folder_writer(counted, target.format,
                           data_source_options(target.options), target.partition_keys)
    if location is not None:
        writer = writer.option("path", location)
    try:
        spark_call(lambda: writer.saveAsTable(target.quoted(staging)), f"Writing {target.identifier}")
        properties = {**({"comment": target.comment} if target.comment else {}),
                      **({VERSIONS_PROPERTY: versions} if versions else {})}
        if properties:
            spark.sql(f"ALTER TABLE {target.quoted(staging)} SET TBLPROPERTIES (" + ", ".join(
                f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items()) + ")")
        with uninterrupted(spark):      # a cancel stops the write: never the swap, nor its undoing
            _swap_in(spark, target, staging, backup)
    except BaseException:
        with uninterrupted(spark):
            _remove_staging(spark, files, target, staging,
                            location if location is not None and not location_existed else None)
        if location_existed:
            for entry in files.list(location):
                files.delete(entry.path)
        if versions is not None and not versions_existed and files.exists(versions):
            files.delete(versions)
        pending.end(note_id)
        raise
    if target.replaced_versions and target.replaced_location:
        pending.retire(target.replaced_location)      # a reader of the old version finishes first
    pending.end(note_id)
    verb = "Replaced" if target.exists else "Created"
    return Result.ok(f"{verb} table {target.identifier} ({target.format}, {rows()} rows).")


def retire_versions(spark: Any, quoted: str, pending: PendingWrites) -> Callable[[], None] | None:
    """For DROP TABLE of a table that keeps versions: after Spark's DROP (which keeps an external
    table's files), its versions are retired and go by age. None for any other table."""
    versions = table_properties(spark, quoted).get(VERSIONS_PROPERTY)
    if versions is None:
        return None
    files = files_for(spark)

    def retire() -> None:
        for entry in files.list(versions):
            if entry.is_dir and entry.name.startswith(VERSION_PREFIX):
                pending.retire(entry.path)
    return retire


def _swap_in(spark: Any, target: TableAsTarget, staging: str, backup: str | None) -> None:
    """One rename makes the complete table visible; REPLACE moves the old one aside first. A table
    that keeps versions and is read the same way as before (columns, types, format, options; not
    partitioned) keeps its name: one location change publishes the new version, and no reader ever
    finds the name missing."""
    if backup is None:
        _rename(spark, target, staging, target.name, f"Publishing {target.identifier}")
        return
    staged = table_facts(spark, target.quoted(staging)) if target.replaced_reads_as else None
    if staged is not None and staged.reads_as == target.replaced_reads_as and not staged.partition_columns:
        set_table_location(spark, target.quoted(), staged.location, f"Publishing {target.identifier}")
        spark.sql(f"DROP TABLE {target.quoted(staging)}")       # external: its folder is the table's now
        spark.sql(f"ALTER TABLE {target.quoted()} SET TBLPROPERTIES ('comment' = {sql_string(target.comment)})"
                  if target.comment else f"ALTER TABLE {target.quoted()} UNSET TBLPROPERTIES IF EXISTS ('comment')")
        return
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
    return _default_locations(spark, files, target, name)[0]


def _default_locations(spark: Any, files: Files, target: TableAsTarget, *names: str) -> list[str]:
    folder = files.qualify(database_location(spark, target.catalog, target.database)).rstrip("/")
    return [f"{folder}/{name.lower()}" for name in names]


def _remove_staging(spark: Any, files: Files, target: TableAsTarget, staging: str,
                    owned_path: str | None) -> None:
    """Drop on failure: the staging table, its managed folder, and a 'path' folder the write made."""
    default_location = _default_location(spark, files, target, staging)
    spark.sql(f"DROP TABLE IF EXISTS {target.quoted(staging)} PURGE")
    for folder in (default_location, owned_path):
        if folder is not None and files.exists(folder):
            files.delete(folder)


def recover_table_as(spark: Any, note: dict[str, Any], pending: PendingWrites) -> None:
    """What a killed CREATE TABLE AS left: the new table takes the name when its data was complete
    (staging is written whole before any rename), else the old one gets it back; the staging and
    replaced tables and their folders go. Kept: whatever the table now under the name reads; a
    replaced version is retired (deleted by age)."""
    target = TableAsTarget(note["catalog"], note["database"], note["name"], REPLACE, "")
    staging, backup = note["staging"], note["backup"]

    def exists(name: str) -> bool:
        return lookup_table(spark, target.catalog, target.database, name) is TableLookup.EXISTS

    if not exists(target.name):
        if exists(staging):
            _rename(spark, target, staging, target.name, f"Publishing {target.identifier}")
        elif backup and exists(backup):
            _rename(spark, target, backup, target.name, f"Restoring the old {target.identifier}")
    for name in (staging, backup):
        if name and exists(name):
            spark.sql(f"DROP TABLE {target.quoted(name)} PURGE")
    files = files_for(spark)
    location = table_facts(spark, target.quoted()).location if exists(target.name) else None
    kept = files.qualify(location).rstrip("/") if location else None
    path, replaced = note["path"], note["replaced"]
    if path is not None and path.rstrip("/") != kept and files.exists(path):
        if note["path_existed"]:
            for entry in files.list(path):
                files.delete(entry.path)
        else:
            note["folders"].append(path)
    for folder in note["folders"]:
        if folder.rstrip("/") != kept and files.exists(folder):
            files.delete(folder)
    if replaced is not None and replaced.rstrip("/") != kept:
        pending.retire(replaced)
