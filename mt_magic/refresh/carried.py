"""An aggregate's state written in the data's own files: one write makes both.

Where the data has a row per group (no HAVING) in a format read by column name (Parquet), the state's
columns ride in the data's files under hidden names (`__mt_state…`) that the table's schema does not
read. A state column the result already holds as it is — a group key, a COUNT, a SUM or a MAX shown
unchanged, in a column whose type keeps every value the state needs — is not written twice: the
state's schema names the data column it is read from (the field's metadata `column`).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import types as T

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.rules import Aggregate
from mt_magic.refresh.choice import Stateful
from mt_magic.spark.files import Files, is_local
from mt_magic.spark.frames import in_one_task
from mt_magic.storage.manifests import CARRIED, Manifest

CARRYING_FORMATS = ("parquet",)      # formats whose readers pick columns by name
# Types a state value keeps its exactness in when the result's column widens it (Flink's implicit
# casts only widen): whole numbers, and doubles within the relative error sums have anyway.
_HOLDING_TYPES = {"long", "integer", "short", "byte", "double", "string", "boolean", "date", "timestamp",
                  "timestamp_ntz"}


def carries_state(table: MaterializedTable, rule: Stateful) -> bool:
    """The state's columns can ride in the data's files: a row per group (`shown_as_kept`), read by
    column name, and no column of the table's that could be mistaken for them."""
    return isinstance(rule, Aggregate) and rule.shown_as_kept and \
        table.storage.format.lower() in CARRYING_FORMATS and \
        not any(c.name.lower().startswith(CARRIED) for c in table.columns)


def in_data(table: MaterializedTable, rule: Aggregate) -> dict[str, str]:
    """State column → the data column that holds it as it is (not a partition column: those are in
    folder names, not files)."""
    columns = {c.name.lower(): c for c in table.columns}
    partitions = {k.lower() for k in table.partition_keys}
    found: dict[str, str] = {}
    for final, name in zip(rule.finals, table.query_columns, strict=True):
        column = columns.get(name.lower())
        if final in rule.state_columns and final not in found and column is not None and \
                column.computed is None and column.name.lower() not in partitions and \
                column.type_json in _HOLDING_TYPES:
            found[final] = column.name
    return found


def hidden(rule: Aggregate, held: dict[str, str]) -> dict[str, str]:
    """State column → its hidden name, for the state columns the data does not hold."""
    return {c: f"{CARRIED}{c}" for c in rule.state_columns if c not in held}


def state_schema(rule: Aggregate, held: dict[str, str], table: MaterializedTable, written: T.StructType) -> str:
    """The state's schema (JSON): each column under its hidden name, with the data column it is read
    from where the data holds it."""
    types = {c.name: c.type_json for c in table.columns}
    by_name = {f.name: f for f in written.fields}
    fields = [T.StructField(f"{CARRIED}{c}", _type(types[held[c]]), True, {"column": held[c]})
              if c in held else by_name[f"{CARRIED}{c}"] for c in rule.state_columns]
    return T.StructType(fields).json()


def _type(type_json: Any) -> T.DataType:
    return T.StructType.fromJson({"type": "struct", "fields": [
        {"name": "x", "type": type_json, "nullable": True, "metadata": {}}]}).fields[0].dataType


def read_state(spark: Any, table: MaterializedTable, manifest: Manifest, files: Files) -> Any:
    """The published state, its columns by the names the rule's SQL gives them; on a local disk and
    small, in one task (`in_one_task`; a remote file system is not asked its size)."""
    schema = T.StructType.fromJson(json.loads(manifest.state_schema))
    read = T.StructType([T.StructField(f.metadata.get("column", f.name), f.dataType, f.nullable)
                         for f in schema.fields])
    paths = manifest.state_paths(table.storage)
    size = sum(size for path in paths for size, _ in files.listing(path).values()) if all(map(is_local, paths)) else None
    frame = in_one_task(spark.read.format(manifest.state_format).schema(read).load(paths), size)
    if not manifest.carried:
        return frame
    return frame.selectExpr(*[f"`{r.name}` AS `{f.name[len(CARRIED):]}`" for f, r in zip(schema.fields, read.fields)])


def partitioning_key(table: MaterializedTable, rule: Stateful, manifest: Manifest) -> str | None:
    """The state's key column that a table's one partition column is, where a refresh may rewrite only
    the partitions its change touches: the state is in the data's files, and the column is the group
    key as it is, stored with the key's own type (no two key values share a partition)."""
    if len(table.partition_keys) != 1 or not isinstance(rule, Aggregate) or not manifest.carried or \
            not carries_state(table, rule):
        return None
    partition = table.partition_keys[0].lower()
    names = [name.lower() for name in table.query_columns]
    declared = next((c for c in table.columns if c.name.lower() == partition), None)
    column = rule.key_column(names.index(partition)) if partition in names else None
    if column is None or declared is None or declared.computed is not None:
        return None
    stored = {f["name"]: f["type"] for f in json.loads(manifest.state_schema)["fields"]}
    return column if stored.get(f"{CARRIED}{column}") == declared.type_json else None
