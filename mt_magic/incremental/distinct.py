"""COUNT(DISTINCT x) per group: the state is the distinct (group, x) pairs; the change's pairs are added
to it, and the result counts the pairs per group (HAVING over the counts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.checks import quoted
from mt_magic.incremental.linear import added_trees, term_trees
from mt_magic.incremental.occurrences import Names, Version, identifier, own, replaced, sql, tables

STATE_KEY = "_g"
STATE_VALUE = "_d"


@dataclass(frozen=True)
class DistinctCount:
    select: exp.Select
    occurrences: tuple[str, ...]
    keys: tuple[str, ...]
    finals: tuple[str, ...]          # each output column over the pairs, grouped by the keys
    having: str | None

    @property
    def sources(self) -> tuple[str, ...]:
        return self.occurrences

    def describe(self) -> str:
        return f"incremental (add the new distinct values per {', '.join(self.keys) or 'the one group'})"

    def state(self, names: Names, version: Version = Version.NEW) -> str:
        return sql(self._pairs(replaced(self.select, lambda i: names(i, version))))

    def merged(self, old_state: str, appended: set[str], names: Names) -> str | None:
        terms = [sql(self._pairs(t, grouped=False))
                 for t in added_trees(term_trees(self.select, self.occurrences, 0, appended, names))]
        if not terms:
            return None
        columns = ", ".join(self._columns())
        union = " UNION ALL ".join([f"SELECT * FROM {old_state}"] + terms)
        return f"SELECT {columns} FROM ({union}) AS merged GROUP BY {columns}"

    def output(self, state: str, names: Sequence[str], reading: Names | None = None) -> str:
        """The result from a state, its columns named `names` (it reads no table beside its state:
        `reading` is the aggregate's, whose query above may)."""
        columns = ", ".join(f"{final} AS {quoted(name)}" for final, name in zip(self.finals, names, strict=True))
        group = f" GROUP BY {', '.join(self._columns()[:-1])}" if self.keys else ""
        having = f" HAVING {self.having}" if self.having else ""
        return f"SELECT {columns} FROM {state}{group}{having}"

    def _columns(self) -> list[str]:
        return [f"{STATE_KEY}{i}" for i in range(len(self.keys))] + [STATE_VALUE]

    def _pairs(self, tree: exp.Select, grouped: bool = True) -> exp.Select:
        """The distinct (keys, value) pairs of an input (`grouped`: made distinct here, not by the merge)."""
        keys = list(tree.args["group"].expressions) if tree.args.get("group") else []
        argument = next(c for c in self.select.find_all(exp.Count) if isinstance(c.this, exp.Distinct))
        value = argument.this.expressions[0].copy()
        pairs = tree.copy()
        pairs.set("expressions", [exp.alias_(k.copy(), f"{STATE_KEY}{i}") for i, k in enumerate(keys)]
                  + [exp.alias_(value, STATE_VALUE)])
        pairs.set("group", exp.Group(expressions=[k.copy() for k in keys] + [value.copy()]) if grouped else None)
        pairs.set("having", None)
        return pairs


def distinct_count(tree: exp.Select, keys: list[exp.Expression], over_state) -> DistinctCount:
    """`tree` counts distinct values of one expression and aggregates nothing else (`aggregate` asks;
    other DISTINCT aggregates keep their values as finer keys of an aggregate's state)."""
    def final(_call: exp.AggFunc) -> str:
        return f"COUNT({STATE_VALUE})"

    finals = [over_state(e.this if isinstance(e, exp.Alias) else e, keys, final) for e in tree.expressions]
    having = tree.args.get("having")
    return DistinctCount(tree, tuple(identifier(t) for t in tables(tree)), tuple(sql(k) for k in keys),
                         tuple(finals), over_state(having.this, keys, final) if having is not None else None)


def counts_one_distinct(tree: exp.Select) -> bool:
    """The query's aggregates are all COUNT(DISTINCT v) of one value: the distinct pairs keep it
    (`distinct`)."""
    calls = own(tree, exp.AggFunc)
    return bool(calls) and all(isinstance(c, exp.Count) and isinstance(c.this, exp.Distinct) and
                               len(c.this.expressions) == 1 for c in calls) and \
        len({sql(c.this.expressions[0]) for c in calls}) == 1 and not tree.find(exp.Anonymous)
