"""An aggregate's partials kept below its joins (eager aggregation), where they read the kept source alone.

`SELECT d.region, SUM(f.amount) FROM f JOIN d ON f.k = d.k GROUP BY d.region`: the partials of `f`'s rows
per source partition and per value of the columns of `f` the rest of the query reads (`f.k`: its
interface) are what every group's partials add up from, whatever `d` holds — a SUM, a COUNT, a MIN or
a MAX of joined rows is the merge of the kept partials joined (a row of `d` matching twice counts its
partial twice, as it counts the rows). A change of `d` (a dimension corrected, rewritten whole) then
joins the kept partials with `d` again: `f`'s rows are not read. Filters over `f` alone are applied below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp, parse_one
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify_columns import qualify_columns
from sqlglot.schema import MappingSchema

from mt_magic.incremental.aggregate import ONE, STATE_KEY, STATE_PARTIAL, Aggregate
from mt_magic.incremental.checks import HELD_LEFT, IN_SUBQUERY, conjuncts, held_still, parse_expression, quoted
from mt_magic.incremental.occurrences import DIALECT, replaced, sql, subquery_expression, tables
from mt_magic.incremental.provenance import PARTITION
from mt_magic.incremental.rules import Rule


@dataclass(frozen=True)
class Below:
    """Where the partials are kept below the joins: the occurrence, its alias, its interface columns and
    the conjuncts over it alone (of WHERE; of its LEFT JOIN's ON where it is `padded`)."""

    occurrence: int
    alias: str
    interface: tuple[str, ...]
    pushed: tuple[str, ...]
    padded: bool = False


def below(rule: Aggregate, occurrence: int) -> Below | None:
    """The kept layout of `rule` over a join whose partials read only `occurrence`'s columns (each
    qualified by its alias); None where they do not, or where a column's table is not named."""
    if not isinstance(rule, Aggregate):     # a top-N's rows are kept as they are
        return None
    found = tables(rule.select)
    held = held_still(rule.select)
    if len(found) < 2 or rule.select.args.get("laterals") or found[occurrence].parent.parent is not rule.select \
            or any(where in IN_SUBQUERY for where in held.values()):
        return None         # (an occurrence in a subquery: its partials are not the query's own)
    padded = held.get(occurrence) == HELD_LEFT
    if occurrence in held and not padded:
        return None
    alias = found[occurrence].alias_or_name
    for partial in rule.partials:
        if any(c.table.lower() != alias.lower() for c in parse_expression(partial.row).find_all(exp.Column)):
            return None
        if padded and partial.row != ONE and not isinstance(parse_expression(partial.expression).this, exp.Column):
            return None     # (a padded row's value is known of a column: NULL)
    where = rule.select.args.get("where")
    parts = conjuncts(where.this) if where is not None else []
    pushed = [c for c in parts if _over(c, alias)]
    outside = rule.select.copy()
    if padded:
        if pushed:
            return None     # (a WHERE over the padded side stops its padded rows)
        pushed = _pushed_on(outside, occurrence, alias)
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
    return Below(occurrence, alias, tuple(interface), tuple(sql(c) for c in pushed), padded)


def unnamed_padding(rule: Rule) -> bool:
    """An aggregate over a LEFT JOIN whose columns do not all name their table: `below` keeps the
    padded side's partials only where they do (`qualified` names them)."""
    return isinstance(rule, Aggregate) and HELD_LEFT in held_still(rule.select).values() and \
        any(not c.table for c in rule.select.find_all(exp.Column) if not c.is_star)


def qualified(query: str, columns: Mapping[str, Sequence[str]]) -> str:
    """`query` with each column naming its table, by the columns of its sources (`columns`, by their
    catalog.database.table names); as it is where they do not tell. A table a subquery expression reads
    under a name the query around it reads too is named apart first (`_named_apart`)."""
    tables: dict = {}
    for source, names in columns.items():
        parts = source.split(".", 2)
        if len(parts) != 3:
            return query
        tables.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = dict.fromkeys(names, "STRING")
    try:      # (the names suffice: the types are not read)
        return sql(qualify_columns(_named_apart(parse_one(query, read=DIALECT)),
                                   schema=MappingSchema(tables, dialect=DIALECT), expand_stars=False))
    except SqlglotError:
        return query


def _named_apart(tree: exp.Expression) -> exp.Expression:
    """Each table a subquery expression reads in its own FROM under a name the query around it reads
    too, and that no column in it names, given a name of its own (`mt_<name>_<n>`): its columns are then
    named by it, as Spark finds them (the innermost table holding the column) — TPC-H Q17's `lineitem`
    inside and out."""
    renamed = 0
    for node in [n for n in tree.find_all(exp.Subquery) if subquery_expression(n) and isinstance(n.this, exp.Select)]:
        inside = tables(node)
        around = {t.alias_or_name.lower() for t in tables(tree) if not any(t is u for u in inside)}
        named = {c.table.lower() for c in node.find_all(exp.Column)}
        relations = [node.this.args.get("from_"), *(node.this.args.get("joins") or [])]
        for table in [r.this for r in relations if r is not None and isinstance(r.this, exp.Table)]:
            name = table.alias_or_name.lower()
            if name in around and name not in named:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(f"mt_{name}_{renamed}")))
                renamed += 1
    return tree


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
    if kept.padded:
        _pushed_on(tree, kept.occurrence, kept.alias)
    elif where is not None:
        left = [c for c in conjuncts(where.this) if not _over(c, kept.alias)]
        tree.set("where", exp.Where(this=exp.and_(*left)) if left else None)
    group = tree.args.get("group")
    keys = [exp.alias_(k.copy(), f"{STATE_KEY}{i}") for i, k in enumerate(group.expressions)] if group else []
    merges = []
    for j, p in enumerate(rule.partials):
        column = f"{quoted(kept.alias)}.{STATE_PARTIAL}{j}"
        if kept.padded and p.counting:      # a padded row: one row (COUNT(*)), no values
            column = f"COALESCE({column}, {1 if p.row == ONE else 0})"
        merged = column if rows else f"{p.merge}({column})"
        merges.append(exp.alias_(parse_expression(f"COALESCE({merged}, 0)" if p.counting and not group and not rows
                                                  else merged), f"{STATE_PARTIAL}{j}"))
    tree.set("expressions", keys + merges)
    tree.set("having", None)
    if rows:
        tree.set("group", None)
    return sql(tree)


def _pushed_on(tree: exp.Select, occurrence: int, alias: str) -> list[exp.Expression]:
    """The ON conjuncts over the padded occurrence alone, taken out of its join in `tree` (they are
    applied below it; TRUE is left where nothing else is)."""
    join = tables(tree)[occurrence].parent
    on = join.args.get("on")
    parts = conjuncts(on) if on is not None else []
    pushed = [c for c in parts if _over(c, alias)]
    rest = [c for c in parts if not _over(c, alias)]
    join.set("on", exp.and_(*rest) if rest else exp.true())
    return pushed


def _over(conjunct: exp.Expression, alias: str) -> bool:
    """A WHERE conjunct over the kept occurrence alone (no aggregate, no subquery)."""
    columns = list(conjunct.find_all(exp.Column))
    return bool(columns) and all(c.table.lower() == alias.lower() for c in columns) and \
        conjunct.find(exp.AggFunc, exp.Select) is None
