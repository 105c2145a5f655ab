"""Names in Spark's catalog for Tab completion: databases, tables and views, columns. Commands that
Spark answers on the driver and analysis only — the `spark.catalog.list*` calls start Spark jobs
(measured: two each on PySpark 4.3), `SHOW` commands and a table's schema start none. A lookup that
fails answers with nothing: completion never puts an error under the cursor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mt_magic.spark.commands import command_rows
from mt_magic.sql.statements import quote_identifier

T = TypeVar("T")


def _quietly(lookup: Callable[[], T], nothing: T) -> T:
    try:
        return lookup()
    except Exception:
        return nothing


def _quoted(name: str) -> str:
    return ".".join(quote_identifier(part) for part in name.split("."))


def databases(spark: Any) -> list[str]:
    return _quietly(lambda: [r[0] for r in command_rows(spark, "SHOW NAMESPACES")], [])


def tables(spark: Any, database: str | None = None) -> list[str]:
    """The tables and views of `database` (the current one, with temporary views, when None)."""
    where = f" IN {_quoted(database)}" if database else ""
    return _quietly(lambda: [r[1] for r in command_rows(spark, f"SHOW TABLES{where}")], [])


def columns(spark: Any, table: str) -> list[str]:
    return _quietly(lambda: spark.table(_quoted(table)).schema.fieldNames(), [])
