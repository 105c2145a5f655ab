"""The query above an aggregate whose every row is one key's of the aggregate — computed for the keys a
change brings alone, and added to the rows it had.

TPC-H Q18 reads its aggregate through `o_orderkey IN (SELECT mt_in0.mt_k0 FROM mt_aggregated AS mt_in0)`
and joins `lineitem` on `o_orderkey = l_orderkey`, grouped by the order: each row of its result is one
order's, and exists only where the aggregate has that order's group. An append that brings only new
groups (`refresh.stacked_state`: keys past every one the state holds) and no row of another table that an
old group meets leaves every row the query above had as it was; its new rows are those of the new keys —
the query above computed over the new groups alone, each table beside read only within the new keys'
range (Parquet skips the row groups outside it). Under an `ORDER BY … LIMIT`, the first rows of the old
ones and the new ones are the first rows of all: rows are only added.

The rule holds where the aggregate is read once, by an IN of a WHERE conjunct or an inner join on its
first key, the query above joins only by inner or cross joins, reads no other subquery, window or
DISTINCT, and groups by a column its equalities make equal to that key (or does not aggregate)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.aggregate import ABOVE, BESIDE, Aggregate
from mt_magic.incremental.checks import conjuncts
from mt_magic.incremental.occurrences import own, parse, sql

_NOT_KEYED = ("distinct", "laterals", "with_", "windows", "qualify", "offset", "pivots", "prewhere")


@dataclass(frozen=True)
class KeyedAbove:
    """The query above, keyed by its aggregate's first key."""

    columns: tuple[tuple[int, str], ...]    # (k, column): the k-th table beside's column equal to the key
    order: tuple[tuple[int, bool, bool | None], ...] = ()   # (output index, descending, NULLs first)
    limit: str | None = None

    def bounded(self, rule: Aggregate, low: str, high: str) -> str:
        """The query above without its ORDER BY and LIMIT, each table beside read only where the key's
        column lies between `low` and `high` (SQL literals)."""
        tree = parse(rule.above)
        tree.set("order", None)
        tree.set("limit", None)
        for table in _beside(tree):
            column = dict(self.columns).get(int(table.name[len(BESIDE):]))
            if column is not None:
                tree.where(f"{exp.column(column, table=table.alias_or_name, quoted=True).sql(dialect='spark')} "
                           f"BETWEEN {low} AND {high}", dialect="spark", copy=False)
        return sql(tree)


def keyed_above(rule: Aggregate) -> KeyedAbove | None:
    """The rule's query above as keyed by its aggregate's first key; None where it is not."""
    if rule.above is None or not rule.key_columns:
        return None
    key = next((name for name, final in zip(rule.own_names, rule.finals) if final == rule.key_columns[0]), None)
    tree = parse(rule.above)
    if key is None or not isinstance(tree, exp.Select) or any(tree.args.get(arg) for arg in _NOT_KEYED) \
            or any(tree.find_all(exp.Window, exp.Exists)):
        return None
    joins = tree.args.get("joins") or []
    if any(join.side or (join.kind or "").upper() not in ("", "CROSS", "INNER") for join in joins):
        return None
    read = [t for t in tree.find_all(exp.Table) if t.name == ABOVE]
    equal = _Classes()
    for part in [*_parts(tree.args.get("where")), *(p for j in joins for p in _parts(j.args.get("on")))]:
        if isinstance(part, exp.EQ) and isinstance(part.this, exp.Column) and isinstance(part.expression, exp.Column):
            equal.union(_named(part.this), _named(part.expression))
    seed = _seed(tree, read[0], key) if len(read) == 1 else None
    listing = read[0].find_ancestor(exp.Subquery) if seed is not None else None
    if seed is None or any(s is not listing for s in tree.find_all(exp.Subquery)):    # (a value of all rows)
        return None
    members = equal.members(seed)
    columns = tuple((int(t.name[len(BESIDE):]), column) for t in _beside(tree)
                    for column in [next((c for a, c in members if a == t.alias_or_name.lower()), None)]
                    if column is not None)
    group = tree.args.get("group")
    if group is not None and not any(isinstance(g, exp.Column) and _named(g) in members for g in group.expressions) \
            or group is None and own(tree, exp.AggFunc):
        return None
    return _ordered(tree, KeyedAbove(columns))


def _beside(tree: exp.Expression) -> list[exp.Table]:
    """The tables the query above reads beside its aggregate."""
    return [t for t in tree.find_all(exp.Table) if t.name.startswith(BESIDE)]


def _parts(condition: exp.Expression | None) -> list[exp.Expression]:
    if isinstance(condition, exp.Where):
        condition = condition.this
    return conjuncts(condition) if condition is not None else []


def _named(column: exp.Column) -> tuple[str, str]:
    return column.table.lower(), column.name.lower()


def _seed(tree: exp.Select, read: exp.Table, key: str) -> tuple[str, str] | None:
    """The column of the query above equal to the aggregate's key on every row it keeps: an IN
    conjunct of WHERE listing the key alone, or the key of the aggregate joined (inner) as a table."""
    alias = read.alias_or_name.lower()
    body = read.find_ancestor(exp.Select)
    if body is tree:        # joined: its key, equal to the others' columns by the equalities
        return alias, key.lower()
    listed = body.parent if isinstance(body.parent, exp.Subquery) else None
    test = listed.parent if listed is not None else None
    plain = body is not None and len(body.expressions) == 1 and isinstance(body.expressions[0], exp.Column) and \
        _named(body.expressions[0]) == (alias, key.lower()) and \
        not any(v for arg, v in body.args.items() if arg not in ("expressions", "from_"))
    if not plain or not isinstance(test, exp.In) or not isinstance(test.this, exp.Column) or \
            not any(part is test for part in _parts(tree.args.get("where"))):
        return None
    return _named(test.this)


def _ordered(tree: exp.Select, keyed: KeyedAbove) -> KeyedAbove | None:
    """With the ORDER BY … LIMIT over its outputs' names (the first rows of all taken again); an ORDER
    BY alone orders nothing a table keeps."""
    limit = tree.args.get("limit")
    if limit is None:
        return keyed
    order = tree.args.get("order")
    if order is None or not isinstance(limit.expression, exp.Literal):
        return None
    taken = []
    for ordered in order.expressions:
        place = _output(tree, ordered.this)
        if place is None:
            return None
        taken.append((place, bool(ordered.args.get("desc")), ordered.args.get("nulls_first")))
    return KeyedAbove(keyed.columns, tuple(taken), limit.expression.name)


def _output(tree: exp.Select, column: exp.Expression) -> int | None:
    """The output an ORDER BY names: by its name, or as the column it selects."""
    if not isinstance(column, exp.Column):
        return None
    for place, output in enumerate(tree.expressions):
        selected = output.this if isinstance(output, exp.Alias) else output
        if not column.table and output.alias_or_name.lower() == column.name.lower() or \
                column.table and isinstance(selected, exp.Column) and _named(selected) == _named(column):
            return place
    return None


class _Classes:
    """Columns made equal by the conjuncts' equalities (a union-find)."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(self, column: tuple[str, str]) -> tuple[str, str]:
        while self.parent.get(column, column) != column:
            column = self.parent[column]
        return column

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.parent.setdefault(a, a)
        self.parent.setdefault(b, b)
        self.parent[self.find(a)] = self.find(b)

    def members(self, column: tuple[str, str]) -> set[tuple[str, str]]:
        root = self.find(column)
        return {c for c in self.parent if self.find(c) == root} | {column}
