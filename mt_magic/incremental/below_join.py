"""An aggregate's partials kept below its joins (eager aggregation), where they read the kept source alone.

`SELECT d.region, SUM(f.amount) FROM f JOIN d ON f.k = d.k GROUP BY d.region`: the partials of `f`'s rows
per source partition and per value of the columns of `f` the rest of the query reads (`f.k`: its
interface) are what every group's partials add up from, whatever `d` holds — a SUM, a COUNT, a MIN or
a MAX of joined rows is the merge of the kept partials joined (a row of `d` matching twice counts its
partial twice, as it counts the rows). A change of `d` (a dimension corrected, rewritten whole) then
joins the kept partials with `d` again: `f`'s rows are not read. Filters over `f` alone are applied below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.aggregate import STATE_KEY, STATE_PARTIAL, Aggregate
from mt_magic.incremental.checks import IN_SUBQUERY, conjuncts, held_still, parse_expression, quoted
from mt_magic.incremental.occurrences import replaced, sql, tables
from mt_magic.incremental.provenance import PARTITION


@dataclass(frozen=True)
class Below:
    """Where the partials are kept below the joins: the occurrence, its alias, its interface columns and
    the WHERE conjuncts over it alone."""

    occurrence: int
    alias: str
    interface: tuple[str, ...]
    pushed: tuple[str, ...]


def below(rule: Aggregate, occurrence: int) -> Below | None:
    """The kept layout of `rule` over a join whose partials read only `occurrence`'s columns (each
    qualified by its alias); None where they do not, or where a column's table is not named."""
    if not isinstance(rule, Aggregate):     # a top-N's rows are kept as they are
        return None
    found = tables(rule.select)
    if len(found) < 2 or rule.select.args.get("laterals") or found[occurrence].parent.parent is not rule.select \
            or any(where in IN_SUBQUERY for where in held_still(rule.select).values()):
        return None         # (an occurrence in a subquery: its partials are not the query's own)
    alias = found[occurrence].alias_or_name
    for partial in rule.partials:
        if any(c.table.lower() != alias.lower() for c in parse_expression(partial.row).find_all(exp.Column)):
            return None
    where = rule.select.args.get("where")
    parts = conjuncts(where.this) if where is not None else []
    pushed = [c for c in parts if _over(c, alias)]
    outside = rule.select.copy()
    outside.set("having", None)
    outside.set("where", None)
    interface: dict[str, None] = {}
    for node in [outside, *(c for c in parts if not _over(c, alias))]:
        for column in node.find_all(exp.Column):
            if column.find_ancestor(exp.AggFunc) is not None:
                continue
            if not column.table:
                return None
            if column.table.lower() == alias.lower():
                interface[column.name.lower()] = None
    if any(name == PARTITION or name.startswith((STATE_KEY, STATE_PARTIAL)) for name in interface):
        return None
    return Below(occurrence, alias, tuple(interface), tuple(sql(c) for c in pushed))


def kept_columns(rule: Aggregate, occurrence: int) -> list[str]:
    """The kept partials' columns but the partition: below the joins, the interface's then the partials;
    else the rule's state's."""
    kept = below(rule, occurrence)
    return rule.state_columns if kept is None else [*kept.interface, *rule.partial_columns]


def below_partials(rule: Aggregate, kept: Below, partition: str, relation: str, merging: str | None = None) -> str:
    """The partials per source partition and interface value of the rows `relation` holds (the kept
    occurrence's rows); `merging`: kept partials (with their partition) merged into them."""
    alias = quoted(kept.alias)
    keys = [PARTITION, *(quoted(c) for c in kept.interface)]
    rows = [f"CAST({alias}.{quoted(partition)} AS STRING) AS {PARTITION}",
            *(f"{alias}.{quoted(c)} AS {quoted(c)}" for c in kept.interface),
            *(f"{p.row} AS {STATE_PARTIAL}{j}" for j, p in enumerate(rule.partials))]
    where = f" WHERE {' AND '.join(f'({c})' for c in kept.pushed)}" if kept.pushed else ""
    union = f"SELECT {', '.join(rows)} FROM {relation} AS {alias}{where}"
    if merging is not None:
        union += f" UNION ALL SELECT {', '.join(keys + rule.partial_columns)} FROM {merging}"
    merges = [f"{p.merge}({STATE_PARTIAL}{j}) AS {STATE_PARTIAL}{j}" for j, p in enumerate(rule.partials)]
    return f"SELECT {', '.join(keys + merges)} FROM ({union}) AS rows GROUP BY {', '.join(keys)}"


def joined_partials(rule: Aggregate, kept: Below, partials: str, reading: Callable[[int], str],
                    rows: bool = False) -> str:
    """The state per group: the kept partials (`partials`, standing for the kept occurrence) joined with
    the other occurrences (`reading(i)`) and merged by group. `rows`: per joined row, its group and
    partials, unmerged (a merge that follows groups them: one shuffle fewer)."""
    tree = replaced(rule.select, lambda i: partials if i == kept.occurrence else reading(i))
    where = tree.args.get("where")
    if where is not None:
        left = [c for c in conjuncts(where.this) if not _over(c, kept.alias)]
        tree.set("where", exp.Where(this=exp.and_(*left)) if left else None)
    group = tree.args.get("group")
    keys = [exp.alias_(k.copy(), f"{STATE_KEY}{i}") for i, k in enumerate(group.expressions)] if group else []
    merges = []
    for j, p in enumerate(rule.partials):
        column = f"{quoted(kept.alias)}.{STATE_PARTIAL}{j}"
        merged = column if rows else f"{p.merge}({column})"
        merges.append(exp.alias_(parse_expression(f"COALESCE({merged}, 0)" if p.counting and not group and not rows
                                                  else merged), f"{STATE_PARTIAL}{j}"))
    tree.set("expressions", keys + merges)
    tree.set("having", None)
    if rows:
        tree.set("group", None)
    return sql(tree)


def _over(conjunct: exp.Expression, alias: str) -> bool:
    """A WHERE conjunct over the kept occurrence alone (no aggregate, no subquery)."""
    columns = list(conjunct.find_all(exp.Column))
    return bool(columns) and all(c.table.lower() == alias.lower() for c in columns) and \
        conjunct.find(exp.AggFunc, exp.Select) is None
