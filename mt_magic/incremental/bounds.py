"""The inner equi-joins of a rule's query: where an appended occurrence's key meets another table's.

In the bilinear rule's term for an appended occurrence, the other tables are read whole and joined
with the appended rows. Where those rows' key lies in a narrow range — keys that grow with time, as
order numbers and dates do — a filter on their own key (true of each of them) lets Spark infer the
same range on the other side of an inner equality and skip the row groups of its files whose
statistics lie outside it. The filter drops appended rows whose key is NULL, which the equality drops
too: it is one of the conjuncts of the WHERE of the SELECT that reads both tables, or of the ON of an
inner join there (a LEFT JOIN's ON keeps its left rows whatever the key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.aggregate import Aggregate
from mt_magic.incremental.checks import conjuncts, monotone
from mt_magic.incremental.distinct import DistinctCount
from mt_magic.incremental.linear import Linear
from mt_magic.incremental.occurrences import tables
from mt_magic.incremental.rules import read_trees
from mt_magic.incremental.topn import TopN


@dataclass(frozen=True)
class KeyPair:
    """Occurrence `occurrence`'s column equals occurrence `other`'s in an inner join (each column
    spelt as its source's schema spells it). `plain`: the term of an append to `occurrence` is its
    SELECT as it is (`linear.term_trees`: not a test copied over its old rows), so there `other`'s rows
    outside the appended keys are never read."""

    occurrence: int
    column: str
    other: int
    other_column: str
    plain: bool = True


def key_pairs(rule: Linear | Aggregate | DistinctCount | TopN,
              columns: Callable[[int], Sequence[str]]) -> tuple[KeyPair, ...]:
    """Every inner equality between columns of two tables read by the same SELECT, both ways;
    `columns(i)`: the columns of the source occurrence i reads."""
    pairs: list[KeyPair] = []
    for tree, start in read_trees(rule):
        index = {id(table): start + k for k, table in enumerate(tables(tree))}
        held = {start + k for k in monotone(tree)}
        for scope in tree.find_all(exp.Select):
            direct = [t for t in tables(scope) if isinstance(t.parent, (exp.From, exp.Join)) and t.parent.parent is scope]
            if len(direct) < 2:
                continue
            for conjunct in _inner_conjuncts(scope):
                if not isinstance(conjunct, exp.EQ):
                    continue
                left = _resolved(conjunct.this, scope, direct, index, columns)
                right = _resolved(conjunct.expression, scope, direct, index, columns)
                if left is not None and right is not None and left[0] != right[0]:
                    pairs += [KeyPair(*left, *right, left[0] not in held), KeyPair(*right, *left, right[0] not in held)]
    return tuple(dict.fromkeys(pairs))


def _inner_conjuncts(scope: exp.Select) -> Iterator[exp.Expression]:
    where = scope.args.get("where")
    if where is not None:
        yield from conjuncts(where.this)
    for join in scope.args.get("joins") or []:
        on = join.args.get("on")
        if on is not None and not join.side and join.kind in ("", "INNER", "CROSS"):
            yield from conjuncts(on)


def _resolved(node: exp.Expression, scope: exp.Select, direct: list[exp.Table], index: dict[int, int],
              columns: Callable[[int], Sequence[str]]) -> tuple[int, str] | None:
    """The occurrence and schema column a column of `scope` reads: by its table's alias, or — where the
    SELECT reads only tables, with no LATERAL VIEW — the one table that has a column of its name."""
    if not isinstance(node, exp.Column) or not node.name:
        return None
    name = node.name.lower()
    if node.table:
        found = [t for t in direct if t.alias_or_name.lower() == node.table.lower()]
    else:
        relations = [scope.args["from_"].this, *(j.this for j in scope.args.get("joins") or [])] \
            if scope.args.get("from_") else []
        if scope.args.get("laterals") or not all(isinstance(r, exp.Table) for r in relations):
            return None
        found = [t for t in direct if any(c.lower() == name for c in columns(index[id(t)]))]
    if len(found) != 1:
        return None
    occurrence = index[id(found[0])]
    spelt = next((c for c in columns(occurrence) if c.lower() == name), None)
    return None if spelt is None else (occurrence, spelt)
