"""The rows of a query above an aggregate whose state an append stacked (`incremental.keyed_above`):
the rows the table had and those of the new keys, each table beside read only within their range. The
new rows are written alone, the published files linked beside them (the history shows the rows it
inserted, none deleted) — but under an ORDER BY … LIMIT, or where the table's folder holds
SMALL_FILES_KEPT small files already, every row is written again.

Exact where no row of the table had a new key (each needs its group, and the state held none of
them) and no row a table beside gained meets an old group: a table beside is unchanged, or appended
to with its key's column outside the published state's range (its files' footers say so) — a table
beside not joined by the key must be unchanged. Anything else computes the query above again whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.keyed_above import keyed_above
from mt_magic.incremental.rules import Aggregate
from mt_magic.refresh.changes import SourceChange
from mt_magic.refresh.full import shaped_sql
from mt_magic.refresh.relations import Relations
from mt_magic.refresh.stacked_state import Stacked
from mt_magic.spark.files import Listing
from mt_magic.spark.footers import footer_summary
from mt_magic.sql.literals import sql_literal
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.compaction import files_to_compact


@dataclass(frozen=True)
class KeyedRows:
    sql: str                    # the rows to write
    carried: tuple[str, ...]    # the published files the new version links (the rows it had)
    limit: str | None = None    # the most rows there are (the query above's LIMIT)


def keyed_rows(table: MaterializedTable, rule: Aggregate, stacked: Stacked | None, groups: str,
               relations: Relations, published: Listing, read: Callable[[Listing], Any]) -> KeyedRows | None:
    """The table's rows after the change, from `groups` (the change's, a relation) and `published` (the
    table's files now, and how to `read` them); None where the query above must be computed again whole."""
    keyed = keyed_above(rule) if stacked is not None and not table.partition_keys else None
    if keyed is None or not _apart(rule, keyed.columns, stacked, relations):
        return None
    bounded = dataclasses.replace(rule, above=keyed.bounded(rule, sql_literal(stacked.low), sql_literal(stacked.high)))
    new = shaped_sql(bounded.output(groups, table.query_columns, reading=relations.names.name),
                     table.columns, table.identifier)
    if keyed.limit is None and not files_to_compact(published):
        return KeyedRows(new, tuple(sorted(published)))
    both = f"SELECT * FROM {relations.add('keyed_published', read(published))} UNION ALL SELECT * FROM ({new}) AS mt_new"
    if keyed.limit is None:
        return KeyedRows(both, ())
    order = ", ".join(f"{quote_identifier(table.query_columns[i])} {'DESC' if desc else 'ASC'} NULLS "
                      f"{'FIRST' if (not desc if first is None else first) else 'LAST'}" for i, desc, first in keyed.order)
    return KeyedRows(f"SELECT * FROM ({both}) AS mt_keyed ORDER BY {order} LIMIT {keyed.limit}", (), keyed.limit)


def _apart(rule: Aggregate, columns: tuple[tuple[int, str], ...], stacked: Stacked, relations: Relations) -> bool:
    """No row a table beside gained meets a group the state held (and each key's column is of the key's
    type: its range is the key's)."""
    first, by_key = len(rule.occurrences) - rule.beside, dict(columns)
    for k in range(rule.beside):
        source = rule.occurrences[first + k]
        change, reading = relations.changes[source], relations.readings[source]
        field = next((f for f in reading.schema.fields if f.name.lower() == by_key[k]), None) if k in by_key else None
        if k in by_key and (field is None or field.dataType != stacked.key.dataType):
            return False
        if change.change is SourceChange.UNCHANGED:
            continue
        if change.change is not SourceChange.APPENDED or field is None:
            return False
        summary = footer_summary(reading.format, change.added)
        found = summary[1].get(field.name) if summary is not None else None
        if found is not None and found[0] is None:     # (NULLs alone: they meet no group)
            continue
        if found is None or not (found[1] < stacked.held[0] or found[0] > stacked.held[1]):
            return False
    return True
