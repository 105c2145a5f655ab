"""Names in Spark's catalog for Tab completion: databases, tables and views, columns. Catalog
lookups only (no query, so no Spark job); a lookup that fails answers with nothing — completion
never puts an error under the cursor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _quietly(lookup: Callable[[], T], nothing: T) -> T:
    try:
        return lookup()
    except Exception:
        return nothing


def current_database(spark: Any) -> str:
    return _quietly(spark.catalog.currentDatabase, "default")


def databases(spark: Any) -> list[str]:
    return _quietly(lambda: [d.name for d in spark.catalog.listDatabases()], [])


def tables(spark: Any, database: str | None = None) -> list[str]:
    """The tables and views of `database` (the current one, with temporary views, when None)."""
    return _quietly(lambda: [t.name for t in spark.catalog.listTables(database)], [])


def columns(spark: Any, table: str) -> list[str]:
    return _quietly(lambda: [c.name for c in spark.catalog.listColumns(table)], [])
