"""How the change's partials meet an aggregate's state. Where rows were only added, the partials are
merged by group; where some were taken away — a rewritten partition's partials retracted, or an append
that stops rows (a NOT EXISTS) or replaces padded ones (a LEFT JOIN's right side): terms of weight −1 —
they subtract, a SUM whose counted values reach zero is NULL again and a group whose rows reach zero
is gone (a rule whose partials all subtract, `Aggregate.subtracts`, its presence and counters kept:
`Aggregate.retractable`)."""

from __future__ import annotations

from collections.abc import Sequence

from mt_magic.incremental.aggregate import STATE_PARTIAL, Aggregate
from mt_magic.incremental.linear import term_trees
from mt_magic.incremental.occurrences import Names, sql

WAS = "mt_was"      # a partial as it was before the change, beside the state's own (`retracted`)


def merged(rule: Aggregate, old_state: str, appended: set[str], names: Names, within: str | None = None) -> str | None:
    """The new state: the old one and the change's partials, merged by group (None: the appended sources
    are not read). `within`: a key column of the state; only the old groups that share a value of it
    with the change's come along (a partitioned table's other partitions stay as they are)."""
    terms = term_trees(rule.select, rule.aggregated, 0, appended, names)
    if not terms:
        return None
    keys = rule.key_columns
    change = " UNION ALL ".join(sql(rule.state_select(t.tree, rows=True, sign=t.sign)) for t in terms)
    old = f"SELECT * FROM {old_state}"
    if within is not None:
        old += f" AS old WHERE EXISTS (SELECT 1 FROM ({change}) AS change WHERE change.{within} <=> old.{within})"
    if any(t.sign < 0 for t in terms):
        return retracted(rule, f"({old}) AS kept", f"({change}) AS change", None)
    columns = keys + [f"{p.merge}({STATE_PARTIAL}{j}) AS {STATE_PARTIAL}{j}" for j, p in enumerate(rule.partials)]
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join(columns)} FROM ({old} UNION ALL {change}) AS merged{group}"


def retracted(rule: Aggregate, old: str, added: str | None, removed: str | None, was: Sequence[str] = ()) -> str:
    """The new per-group state of a rule whose partials all subtract: `old` (per group) with the
    partitions' partials now (`added`, per partition and group, None where they hold no rows; or the
    signed partials of rows added and removed) in and their partials before (`removed`) out; with each
    partial of `was` as it was in `old` too (`WAS` before its name; 0 for a new group)."""
    keys, partials = rule.key_columns, rule.partial_columns
    before = [f"{a} AS {WAS}{a}" for a in was]
    none = [f"CAST(0 AS BIGINT) AS {WAS}{a}" for a in was]
    every = f"SELECT {', '.join(keys + partials + before)} FROM {old}"
    if added is not None:
        every += f" UNION ALL SELECT {', '.join(keys + partials + none)} FROM {added}"
    if removed is not None:
        every += f" UNION ALL SELECT {', '.join(keys + [f'-{a} AS {a}' for a in partials] + none)} FROM {removed}"
    columns = [f"SUM({WAS}{a}) AS {WAS}{a}" for a in was]
    for a, partial in zip(partials, rule.partials, strict=True):
        counted = f"SUM({STATE_PARTIAL}{partial.counter})" if partial.counter is not None else None
        columns.append(f"CASE WHEN {counted} = 0 THEN NULL ELSE SUM({a}) END AS {a}" if counted else f"SUM({a}) AS {a}")
    group = f" GROUP BY {', '.join(keys)} HAVING SUM({STATE_PARTIAL}{rule.presence}) > 0" if keys else ""
    return f"SELECT {', '.join(keys + columns[len(was):] + columns[:len(was)])} FROM ({every}) AS every{group}"
