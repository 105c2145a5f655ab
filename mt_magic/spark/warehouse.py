"""The managed tables a previous run left in a local session's warehouse, registered again.

Spark's in-memory catalog forgets its tables when the process ends, while the warehouse folder keeps
their data: after a kernel restart, `saveAsTable` or CREATE TABLE of a source the notebook made
before fails with LOCATION_ALREADY_EXISTS. A local session therefore registers each such folder
again as the managed table it was (self-describing formats only: Parquet and ORC), so that
Restart & Run All behaves as with a persistent catalog: the table is there, and overwriting it works.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.spark.files import Entry, HadoopFiles
from mt_magic.sql.statements import quote_identifier, sql_string

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_]+$")          # what Spark's session catalog names may hold
_FORMATS = {".parquet": "parquet", ".orc": "orc"}
_OURS = ("v-", "_empty")                        # mt_magic's versioned folders: restored from its store


def adopt_leftover_tables(spark: Any) -> list[str]:
    """Register the warehouse's unregistered table folders as managed tables; their names."""
    files = HadoopFiles(spark)
    warehouse = spark.conf.get("spark.sql.warehouse.dir")
    adopted = []
    for entry in files.list(warehouse):
        if not entry.is_dir or entry.name.startswith((".", "_")):
            continue
        if entry.name.endswith(".db") and _NAME.match(entry.name[:-3]):
            database = entry.name[:-3]
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
            adopted += [_adopt(spark, files, database, table) for table in files.list(entry.path)]
        else:
            adopted.append(_adopt(spark, files, "default", entry))
    return [name for name in adopted if name]


def _adopt(spark: Any, files: HadoopFiles, database: str, folder: Entry) -> str | None:
    if not folder.is_dir or not _NAME.match(folder.name) or spark.catalog.tableExists(f"{database}.{folder.name}"):
        return None
    fmt = _data_format(files, folder.path)
    if fmt is None:
        return None
    quoted = f"{quote_identifier(database)}.{quote_identifier(folder.name)}"
    try:
        spark.sql(f"CREATE TABLE {quoted} USING {fmt} LOCATION {sql_string(folder.path)}")
        if spark.sql(f"DESCRIBE TABLE {quoted}").where("col_name = '# Partition Information'").count():
            spark.sql(f"ALTER TABLE {quoted} RECOVER PARTITIONS")
        _make_managed(spark, database, folder.name)
    except SPARK_ERRORS as error:
        log.warning("The table folder %s is not registered again: %s", folder.path, spark_message(error))
        spark.sql(f"DROP TABLE IF EXISTS {quoted}")     # external so far: its files stay
        return None
    return f"{database}.{folder.name}"


def _data_format(files: HadoopFiles, path: str, depth: int = 4) -> str | None:
    """The format of the first data file under a table folder (partition folders included), or None
    for anything else (mt_magic's own versions, a folder of other files)."""
    entries = files.list(path)
    if any(e.name.startswith(_OURS) for e in entries):
        return None
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue
        if not entry.is_dir:
            return next((fmt for ext, fmt in _FORMATS.items() if entry.name.endswith(ext)), None)
        if depth > 0 and "=" in entry.name:
            found = _data_format(files, entry.path, depth - 1)
            if found is not None:
                return found
    return None


def _make_managed(spark: Any, database: str, name: str) -> None:
    """The catalog entry becomes MANAGED, as it was: DROP and an overwriting `saveAsTable` then delete
    and rewrite its folder, instead of finding it in the way."""
    jvm = spark._jvm
    catalog = spark._jsparkSession.sessionState().catalog()
    ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier(name, jvm.scala.Some(database))
    table = catalog.getTableMetadata(ident)
    fields = [table.productElement(i) for i in range(table.productArity())]
    fields[1] = jvm.org.apache.spark.sql.catalyst.catalog.CatalogTableType.MANAGED()
    catalog.alterTable(jvm.org.apache.spark.sql.catalyst.catalog.CatalogTable(*fields))
