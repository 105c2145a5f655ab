"""The DDL text of a materialized table's Spark entry: one writer, used when a table is created and
when many are put back into a fresh catalog at once (storage/registry.py)."""

from __future__ import annotations

from mt_magic.catalog.model import MaterializedTable, Storage
from mt_magic.spark.tables import partition_clause
from mt_magic.spark.types import type_from_json, type_sql
from mt_magic.sql.statements import quote_identifier, sql_string
from mt_magic.storage.formats import data_source_options

TABLE_PROPERTY = "mt_magic.materialized-table"


def create_table_sql(table: MaterializedTable, storage: Storage, if_not_exists: bool = False) -> str:
    """CREATE TABLE of the record's columns, options and partitioning, external at `storage`."""
    columns = ", ".join(
        f"{quote_identifier(c.name)} {type_sql(type_from_json(c.type_json))}"
        + (f" COMMENT {sql_string(c.comment)}" if c.comment else "") for c in table.columns)
    options = data_source_options(table.options)
    if not table.partition_keys:   # continuous appends commit a micro-batch as a sub-folder
        options["recursiveFileLookup"] = "true"
    ddl = [f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{table.quoted} ({columns}) USING {quote_identifier(storage.format)}"]
    if options:
        ddl.append("OPTIONS (" + ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in options.items()) + ")")
    if table.partition_keys:
        ddl.append("PARTITIONED BY (" + ", ".join(map(quote_identifier, table.partition_keys)) + ")")
    if table.comment:
        ddl.append(f"COMMENT {sql_string(table.comment)}")
    ddl.append(f"LOCATION {sql_string(storage.location)}")
    ddl.append(f"TBLPROPERTIES ({sql_string(TABLE_PROPERTY)} = 'true')")
    return "\n".join(ddl)


def add_partitions_sql(table: MaterializedTable, partitions: dict[tuple, str]) -> str | None:
    """ALTER TABLE … ADD of these partitions (spec → location), or None when there are none."""
    if not partitions:
        return None
    clauses = " ".join(f"{partition_clause(dict(spec))} LOCATION {sql_string(location)}"
                       for spec, location in partitions.items())
    return f"ALTER TABLE {table.quoted} ADD IF NOT EXISTS {clauses}"


def partitions_apart(table: MaterializedTable, storage: Storage) -> bool:
    """Whether the table's DDL must run with Spark's partition management off: a partitioned table
    whose partitions Spark discovers under its location (one location change switches them all)."""
    return bool(table.partition_keys) and not storage.catalog_partitions
