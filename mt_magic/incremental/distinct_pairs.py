"""COUNT(DISTINCT x) per group, kept so that rows can be taken away: the (group, x) pairs with the rows
that hold each (a count, which subtracts), as an aggregate's partials are kept.

`SELECT ds, COUNT(DISTINCT k) FROM t GROUP BY ds` is maintained as the aggregate `SELECT ds, k, COUNT(*)
FROM t GROUP BY ds, k`, whose result counts each group's pairs: a pair whose rows all leave (its count
reaches zero) is gone, and the group counts one value less. Kept per source partition, a rewritten
partition's pairs are subtracted and its pairs now added, as for any aggregate that keeps its partials;
the result reads the pairs, not the source."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from sqlglot import exp

from mt_magic.incremental.aggregate import STATE_KEY, Aggregate, aggregate
from mt_magic.incremental.distinct import STATE_VALUE, DistinctCount
from mt_magic.incremental.occurrences import Names


@dataclass(frozen=True)
class DistinctPairs(Aggregate):
    """The pairs' aggregate; its result is the COUNT(DISTINCT …) query's, over the pairs."""

    per_group: ClassVar[bool] = False       # a row per pair, not per output row: no state rides in the data
    distinct: DistinctCount | None = None

    def describe(self) -> str:
        return self.distinct.describe()

    def output(self, state: str, names: Sequence[str], carry: Mapping[str, str] | None = None,
               regrouped: bool = True, reading: Names | None = None) -> str:
        """The COUNT(DISTINCT …) query's result over the pairs (no state rides in it: `carry`; nor is it
        regrouped or read beside a table: `regrouped`, `reading`)."""
        keys = [f"{STATE_KEY}{i}" for i in range(len(self.distinct.keys))]
        pairs = f"(SELECT {', '.join([*keys, f'{STATE_KEY}{len(keys)} AS {STATE_VALUE}'])} FROM {state}) AS pairs"
        return self.distinct.output(pairs, names)


def retractable(rule: Aggregate | DistinctCount) -> Aggregate:
    """The rule whose state can take rows away: an aggregate's with counts beside its sums, a
    COUNT(DISTINCT …)'s as its counted pairs."""
    if isinstance(rule, Aggregate):
        return rule.retractable
    tree = rule.select.copy()
    group = tree.args.get("group")
    keys = [k.copy() for k in group.expressions] if group is not None else []
    argument = next(c for c in tree.find_all(exp.Count) if isinstance(c.this, exp.Distinct))
    value = argument.this.expressions[0].copy()
    tree.set("expressions", [*(k.copy() for k in keys), value.copy()])
    tree.set("group", exp.Group(expressions=[*keys, value]))
    tree.set("having", None)
    pairs = aggregate(tree, retractable=True)
    return DistinctPairs(*(getattr(pairs, f.name) for f in dataclasses.fields(Aggregate)), distinct=rule)
