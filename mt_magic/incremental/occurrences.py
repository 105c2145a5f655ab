"""The source tables a query reads, each place it reads one (an occurrence), and the query with those
places read from other relations: the old files of a source, its new files, or only the appended ones."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Protocol

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

DIALECT = "spark"


class Version(Enum):
    """Which files of a source an occurrence reads."""

    OLD = "old"          # the files the published result was computed from
    NEW = "new"          # the files now: old plus appended
    DELTA = "delta"      # only the appended files


class Names(Protocol):
    """An occurrence's index and the version it reads → the name of the relation standing in for it;
    `beside`: the occurrence whose appended rows it is joined with (its term of the change), which may
    bound what it needs to read."""

    def __call__(self, index: int, version: Version, beside: int | None = None) -> str: ...


class Unparsable(Exception):
    """sqlglot cannot read the query: it is recomputed (Spark, which accepted it, stays the judge)."""


def parse(query: str) -> exp.Expression:
    """The query's tree, its WITH names (not recursive) replaced by their queries: a CTE is a relation
    like a subquery in FROM, read once per place that names it."""
    try:
        tree = sqlglot.parse_one(query, read=DIALECT)
    except SqlglotError as error:
        raise Unparsable(str(error).splitlines()[0]) from None
    with_ = tree.args.get("with_")
    if with_ is None or with_.args.get("recursive"):
        return tree
    tree.set("with_", None)
    bodies: dict[str, exp.Expression] = {}
    for cte in with_.expressions:
        bodies[cte.alias_or_name.lower()] = _inlined(cte.this, bodies)
    return _inlined(tree, bodies)


def _inlined(tree: exp.Expression, bodies: dict[str, exp.Expression]) -> exp.Expression:
    """`tree` with each unqualified name of `bodies` replaced by its query, aliased as it was named."""
    def inline(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and not node.args.get("db") and node.name.lower() in bodies:
            alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
            return exp.Subquery(this=bodies[node.name.lower()].copy(), alias=alias.copy())
        return node
    return tree.transform(inline)


def lifted(tree: exp.Select, occurrence: int, name: str, over: Callable[[str], exp.Expression]) -> exp.Expression:
    """An expression over occurrence i's columns (`over(its alias)`) as `tree` reads it: where the
    occurrence is nested in subqueries in FROM, each of them selects it too (as `name`_level). `tree`
    is changed: it must be a copy, and the occurrence `liftable`."""
    table = tables(tree)[occurrence]
    expression, select, level = over(table.alias_or_name), table.parent.parent, 0
    while select is not tree:
        column = f"{name}_{level}"
        select.set("expressions", [*select.expressions, exp.alias_(expression, column)])
        expression = exp.column(column, table=select.parent.alias_or_name)
        select, level = select.parent.parent.parent, level + 1
    return expression


def liftable(tree: exp.Select, occurrence: int) -> bool:
    """Occurrence i is read by `tree` itself, or through subqueries in FROM or JOIN (no UNION on the
    way), each named, none above the innermost selecting `*` (it would show the lifted columns)."""
    relation: exp.Expression = tables(tree)[occurrence]
    while True:
        holder = relation.parent
        select = holder.parent if holder is not None else None
        if not isinstance(holder, (exp.From, exp.Join)) or not isinstance(select, exp.Select):
            return False
        if relation is not tables(tree)[occurrence] and any(e.is_star for e in select.expressions):
            return False
        if select is tree:
            return True
        relation = select.parent
        if not isinstance(relation, exp.Subquery) or not relation.alias:
            return False
def identifier(table: exp.Table) -> str:
    """catalog.database.name as the catalog record spells sources (lower case)."""
    return ".".join(part.name for part in table.parts).lower()


def tables(tree: exp.Expression) -> list[exp.Table]:
    """The table references of a query, in reading order (the order of occurrences)."""
    return list(tree.find_all(exp.Table))


def subquery_expression(node: exp.Expression) -> bool:
    """A query used as a value or a test — a scalar subquery, IN, EXISTS, ANY or ALL —, not as a relation."""
    if isinstance(node, exp.Exists):
        return True
    if isinstance(node, exp.Subquery):
        return node.parent is not None and not isinstance(node.parent, (exp.From, exp.Join, exp.Union, exp.Lateral))
    return isinstance(node, exp.Select) and isinstance(node.parent, (exp.Any, exp.All, exp.In))


def own(tree: exp.Expression, *kinds: type[exp.Expression]) -> list[exp.Expression]:
    """The nodes of `kinds` in `tree` but not inside its subquery expressions (theirs, not its own: an
    aggregate in `WHERE a IN (SELECT MAX(b) …)` does not make the query an aggregate)."""
    return [node for node in tree.walk(prune=lambda n: n is not tree and subquery_expression(n))
            if isinstance(node, kinds) and (node is tree or not subquery_expression(node))]


def replaced(tree: exp.Expression, reading: Callable[[int], str]) -> exp.Expression:
    """A copy of `tree` where occurrence i reads the relation `reading(i)`. An occurrence without an
    alias gets its table's name as one, so that columns qualified by the table name still resolve."""
    copy = tree.copy()
    for index, table in enumerate(tables(copy)):
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
        relation = exp.to_table(reading(index), dialect=DIALECT)
        relation.set("alias", alias)
        table.replace(relation)
    return copy


def sql(tree: exp.Expression) -> str:
    return tree.sql(dialect=DIALECT)
