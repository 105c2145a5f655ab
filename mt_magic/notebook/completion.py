"""Tab in a %%mtsql cell (or after %mtsql on a line): an IPython matcher, so every Jupyter client gets
it through the kernel's completion request. Where the cursor stands is read by syntax alone
(`mt_magic.sql.completable`); the names come from the catalog store (materialized tables, first) and
Spark's catalog (tables, views, columns) — lookups, never a query, so no Spark job — cached until a
cell runs (a statement may have changed the catalog) or for `TTL_S` (another process may have)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from IPython.core.completer import SimpleCompletion, context_matcher

from mt_magic.sql.completable import (Place, Want, option_values, place, session_option_keys,
                                     table_option_keys)
from mt_magic.spark import names

TTL_S = 30.0
AUTOLOAD_MATCHER = "mt_magic.autoload"      # the startup file's, which loads the extension at the first Tab
_MAGIC_LINE = re.compile(r"(?<!%)%mtsql(?:\s+(?:--dry-run|--verbose|(?:-o|--out|--spark)\s+\w+))*\s+")


class Names:
    """The catalog's names, looked up once per change of the catalog."""

    def __init__(self, gateway: Callable[[], Any], spark: Callable[[], Any]) -> None:
        self._gateway = gateway
        self._spark = spark
        self._cache: dict[tuple, tuple[float, Any]] = {}

    def forget(self, *_: object) -> None:
        self._cache.clear()

    def _cached(self, key: tuple, lookup: Callable[[], Any]) -> Any:
        stamp, value = self._cache.get(key, (0.0, None))
        if value is None or time.monotonic() - stamp > TTL_S:
            value = lookup()
            self._cache[key] = (time.monotonic(), value)
        return value

    def materialized(self) -> dict[str, Any]:
        """Materialized tables by name and by identifier (from the store: no Spark at all)."""
        gateway = self._gateway()
        if gateway is None:
            return {}

        def records() -> dict[str, Any]:
            found: dict[str, Any] = {}
            for table in gateway.store.list():
                found[table.identifier.split(".", 1)[-1].lower()] = table
                found.setdefault(table.name.lower(), table)
            return found
        return self._cached(("materialized",), records)

    def tables(self, database: str | None) -> list[str]:
        spark = self._spark()
        if spark is None:
            return []
        return self._cached(("tables", (database or "").lower()), lambda: names.tables(spark, database))

    def databases(self) -> list[str]:
        spark = self._spark()
        return [] if spark is None else self._cached(("databases",), lambda: names.databases(spark))

    def columns(self, table: str) -> list[str]:
        """A materialized table's from its record; any other's from Spark's catalog."""
        known = self.materialized().get(".".join(table.replace("`", "").split(".")[-2:]).lower())
        if known is not None:
            return [c.name for c in known.columns]
        spark = self._spark()
        return [] if spark is None else self._cached(("columns", table.lower()), lambda: names.columns(spark, table))


class Completer:
    """The matcher: what the cursor may be completed with, from the place and the names."""

    def __init__(self, names_: Names, namespace: Callable[[], dict]) -> None:
        self.names = names_
        self.namespace = namespace

    def sql_before(self, context: Any) -> tuple[str, int] | None:
        """The SQL of the cell (or the line) and the cursor in it; None outside %%mtsql / %mtsql."""
        lines = context.full_text.split("\n")
        before = "\n".join(lines[:context.cursor_line] + [lines[context.cursor_line][:context.cursor_position]])
        if lines[0].lstrip().startswith("%%mtsql"):
            start = len(lines[0]) + 1
            return (context.full_text[start:], len(before) - start) if len(before) >= start else None
        line = lines[context.cursor_line]
        found = _MAGIC_LINE.search(line[:context.cursor_position])
        if found is None:
            return None
        return line[found.end():], context.cursor_position - found.end()

    def candidates(self, spot: Place) -> Iterable[tuple[str, str]]:
        """(text, type) in the order shown: materialized tables before other tables."""
        if spot.want is Want.VARIABLE:
            return ((n, "variable") for n in sorted(self.namespace()) if not n.startswith("_"))
        if spot.want is Want.TABLE_OPTION:
            return ((k, "option") for k in table_option_keys(spot.partition_columns))
        if spot.want is Want.OPTION_VALUE:
            return ((v, "value") for v in option_values(spot.option))
        if spot.want is Want.SESSION_OPTION:
            return ((k, "option") for k in session_option_keys())
        if spot.want is Want.MATERIALIZED_TABLE:
            return ((n, "materialized table") for n in sorted({t.name for t in self.names.materialized().values()}))
        if spot.want is Want.TABLE:
            return self._tables(spot.qualifier)
        if spot.want is Want.COLUMN:
            return self._columns(spot)
        return ((k, "keyword") for k in spot.keywords)

    def _tables(self, database: str) -> Iterable[tuple[str, str]]:
        prefix = f"{database}." if database else ""
        mts = sorted({t.name for t in self.names.materialized().values()
                      if not database or t.identifier.split(".")[-2].lower() == database.lower()})
        others = sorted(set(self.names.tables(database or None)) - set(mts))
        databases = [] if database else sorted(self.names.databases())
        return [(prefix + n, "materialized table") for n in mts] + [(prefix + n, "table") for n in others] + \
            [(n, "database") for n in databases]

    def _columns(self, spot: Place) -> Iterable[tuple[str, str]]:
        if spot.qualifier:
            tables = [t for alias, t in spot.scope if alias.lower() == spot.qualifier.lower()]
            return [(f"{spot.qualifier}.{c}", "column") for t in tables[:1] for c in self.names.columns(t)]
        seen = dict.fromkeys(c for _, t in dict.fromkeys(spot.scope) for c in self.names.columns(t))
        return [(c, "column") for c in seen] + [(k, "keyword") for k in spot.keywords]

    @context_matcher(identifier="mt_magic.mtsql")
    def complete(self, context: Any) -> dict:
        sql = self.sql_before(context)
        if sql is None:
            return {"completions": [], "suppress": False}
        spot = place(*sql)
        lowered = spot.fragment.lower()
        found = [SimpleCompletion(text, type=kind) for text, kind in dict.fromkeys(self.candidates(spot))
                 if text.lower().startswith(lowered)]
        return {"completions": found, "suppress": True, "matched_fragment": spot.fragment, "ordered": True}


def register(shell: Any, gateway: Callable[[], Any], spark: Callable[[], Any]) -> Completer:
    """The matcher first among the shell's, and its names forgotten whenever a cell has run."""
    completer = Completer(Names(gateway, spark), lambda: shell.user_ns)
    shell.Completer.custom_matchers[:] = [m for m in shell.Completer.custom_matchers       # the autoload's
                                          if getattr(m, "matcher_identifier", "") != AUTOLOAD_MATCHER]
    shell.Completer.custom_matchers.insert(0, completer.complete)
    shell.events.register("post_run_cell", completer.names.forget)
    return completer


def unregister(shell: Any, completer: Completer) -> None:
    if completer.complete in shell.Completer.custom_matchers:
        shell.Completer.custom_matchers.remove(completer.complete)
    shell.events.unregister("post_run_cell", completer.names.forget)
