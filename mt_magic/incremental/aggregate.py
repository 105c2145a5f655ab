"""GROUP BY (or a global aggregate, or grouping sets) with COUNT, SUM, AVG, MIN, MAX (FILTER rewritten
by `as_aggregate`) and HAVING, over a table, joins or linear subqueries, and an ORDER BY … LIMIT over
it (a global top-N). A hidden state keeps, per group, each aggregate's partial (AVG as a sum and a
count); the change's rows are merged into it by group, and the result is the state's final projection
with HAVING applied — the top-N's rule composed over it: its first rows taken again from every group
the state holds, so that a group leaving them is replaced (grouping sets, DISTINCT aggregates: `grouping_sets`)."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from sqlglot import exp

from mt_magic.incremental.as_aggregate import unfiltered
from mt_magic.incremental.checks import (AGGREGATE_ARGS, NotMaintainable, by_outputs, call_name, check_select,
                                         parse_expression, quoted)
from mt_magic.incremental.occurrences import DIALECT, Names, Version, identifier, own, parse, replaced, sql, tables
from mt_magic.incremental.distinct import DistinctCount, counts_one_distinct, distinct_count
from mt_magic.incremental.grouping_sets import distinct_values, finest_keys, merged_again, over_state, per_row

ABOVE = "mt_aggregated"       # the aggregate's result, as the query above it reads it
BESIDE = "mt_beside_"         # another table the query above reads, by its place among them
# Aggregates with a merge: the partial computed per group, and how partials combine.
_MERGES = {exp.Count: "SUM", exp.Sum: "SUM", exp.Min: "MIN", exp.Max: "MAX"}
STATE_KEY = "_g"          # the state's group key columns: _g0, _g1, ...
STATE_PARTIAL = "_a"      # its partials: _a0, _a1, ...
ONE = "CAST(1 AS BIGINT)"   # what one row adds to COUNT(*)


@dataclass(frozen=True)
class Partial:
    expression: str          # over the aggregate's input
    merge: str               # SUM, MIN or MAX of the partials
    row: str                 # one input row's partial: the change's rows merge without a grouping of their own
    counter: int | None = None   # a SUM's: the partial counting its non-NULL values (NULL again at zero)
    counting: bool = False       # a count (zero, not NULL, over no rows)


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY with mergeable aggregates: a state per group, merged with the change's state."""

    select: exp.Select
    occurrences: tuple[str, ...]
    keys: tuple[str, ...]               # the group keys as written
    partials: tuple[Partial, ...]
    finals: tuple[str, ...]             # each output column over the state
    having: str | None                  # over the state
    averaged: tuple[int, ...]           # the partials that are sums of an AVG (a DECIMAL one is refused)
    presence: int | None                # the partial counting a group's rows, where one is kept
    retracts: bool = False              # its state can take rows away (`retractable`)
    order: str | None = None            # an ORDER BY over the state, with `limit` (a global top-N)
    limit: str | None = None
    written: exp.Select | None = None   # the query as written, ORDER BY and LIMIT included
    grouping: str | None = None         # GROUPING SETS, ROLLUP or CUBE over the state's (finest) keys
    # A query above this aggregate, which it reads as a subquery (`nested`): its text reading the
    # aggregate's result as `ABOVE` and the k-th other table it reads as `BESIDE`k (the last `beside`
    # occurrences), and the names of the aggregate's result's columns.
    above: str | None = None
    own_names: tuple[str, ...] = ()
    beside: int = 0
    values: int = 0     # the last `values` keys are DISTINCT aggregates' values, merged again per group
    per_group: ClassVar[bool] = True    # a state row per output row (before HAVING, LIMIT, grouping sets)

    @property
    def shown_as_kept(self) -> bool:
        """The result is the state's rows, one per group: no HAVING drops one, no LIMIT, no grouping
        sets adding others, no query above."""
        return self.per_group and self.having is None and self.limit is None and not self.regroups and \
            self.above is None

    @property
    def regroups(self) -> bool:
        """The result merges the state's groups again (grouping sets, or DISTINCT aggregates' values)."""
        return self.grouping is not None or self.values > 0

    @property
    def subtracts(self) -> bool:
        """Every partial is a count or a sum, which rows taken away are subtracted from (a MIN or MAX
        they may have been is merged again from the rows left)."""
        return all(p.merge == "SUM" for p in self.partials)

    @property
    def written_keys(self) -> tuple[str, ...]:
        return self.keys[:len(self.keys) - self.values]     # (without the DISTINCT aggregates' values)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.occurrences

    @property
    def aggregated(self) -> tuple[str, ...]:
        """The occurrences the aggregate reads (not those only the query above it reads: `beside`)."""
        return self.occurrences[:len(self.occurrences) - self.beside]

    @functools.cached_property
    def retractable(self) -> Aggregate:
        """The rule whose state can take rows away: a count of each group's rows (a group goes when it
        reaches zero) and of each SUM's non-NULL values (the SUM is NULL again at zero). Only a table
        that retracts keeps them, so that the others' state costs no more than it must."""
        if self.retracts:
            return self
        kept = aggregate(self.written or self.select, retractable=True)
        return dataclasses.replace(kept, above=self.above, own_names=self.own_names,  # type: ignore[type-var]
                                   occurrences=self.occurrences, beside=self.beside)

    def describe(self) -> str:
        by = ", ".join(self.written_keys) or "the one group"
        sets = ", each grouping set's groups merged again from them" if self.grouping else \
            ", each group's distinct values counted again from them" if self.values else ""
        top = f", then the first {self.limit} rows taken again from every group" if self.limit else ""
        above = ", then the query above it computed again over the groups" if self.above else ""
        return f"incremental (merge by {by}{sets}{top}{above})"

    def state(self, names: Names, version: Version = Version.NEW) -> str:
        """The state of the whole input: partials per group."""
        return sql(self.state_select(replaced(self.select, lambda i: names(i, version))))

    def output(self, state: str, names: Sequence[str], carry: Mapping[str, str] | None = None,
               regrouped: bool = True, reading: Names | None = None) -> str:
        """The result from a state, its columns named `names` (the table's query columns). `carry`: state
        columns that follow, each under the name it maps to (one row per group: no HAVING). Grouping
        sets merge the state's partials again per set (not `regrouped`: each state row's outputs, as
        Spark judges what they compute). A query above the aggregate reads its result, and the tables
        beside it as `reading` names their occurrences (else by their names)."""
        if self.above is None:
            return self.own_output(state, names, carry, regrouped)
        first = len(self.occurrences) - self.beside
        beside = [reading(first + k, Version.NEW) if reading is not None else
                  ".".join(quoted(p) for p in self.occurrences[first + k].split(".", 2)) for k in range(self.beside)]
        return above_output(self.above, self.own_output(state, self.own_names, regrouped=regrouped), names, beside)

    def own_output(self, state: str, names: Sequence[str], carry: Mapping[str, str] | None = None,
                   regrouped: bool = True) -> str:
        """The aggregate's own result from a state (under a query above it, what that query reads)."""
        finals, having, order = self.finals, self.having, self.order
        grouped = regrouped and self.regroups
        if grouped:
            pattern = re.compile(rf"{STATE_PARTIAL}(\d+)")    # (a global count over no state rows is zero)
            merges = [f"COALESCE({p.merge}({{}}), 0)" if p.counting and not self.written_keys and self.grouping is None
                      else f"{p.merge}({{}})" for p in self.partials]
            finals = [merged_again(f, pattern, merges) for f in finals]
            having = merged_again(having, pattern, merges) if having else None
            order = merged_again(order, pattern, merges, ordering=True) if order else None
        elif self.values:
            values = self.key_columns[len(self.written_keys):]
            finals, having = [per_row(f, values) for f in finals], per_row(having, values) if having else None
            order = per_row(order, values, ordering=True) if order else None
        columns = [f"{final} AS {quoted(name)}" for final, name in zip(finals, names, strict=True)]
        columns += [f"{c} AS {quoted(name)}" for c, name in (carry or {}).items()]
        by = self.grouping or ", ".join(self.key_columns[:len(self.written_keys)])
        where = (f" GROUP BY {by}" if grouped and by else "") + \
            (f" {'HAVING' if grouped else 'WHERE'} {having}" if having else "")
        top = f" ORDER BY {order} LIMIT {self.limit}" if self.limit else ""
        return f"SELECT {', '.join(columns)} FROM {state}{where}{top}"

    def key_column(self, index: int) -> str | None:
        """The state's key column that output column `index` is, as it is; None when it is not one."""
        final = self.finals[index]
        return final if re.fullmatch(rf"{STATE_KEY}\d+", final) else None

    @property
    def key_columns(self) -> list[str]:
        return [f"{STATE_KEY}{i}" for i in range(len(self.keys))]

    @property
    def partial_columns(self) -> list[str]:
        return [f"{STATE_PARTIAL}{j}" for j in range(len(self.partials))]

    @property
    def state_columns(self) -> list[str]:
        return self.key_columns + self.partial_columns

    def state_select(self, tree: exp.Select, rows: bool = False, sign: int = 1) -> exp.Select:
        """Partials per group; `rows`: per input row, ungrouped (the merge groups them with the old
        state in one aggregation, where Spark pre-aggregates them before the shuffle anyway); `sign`
        −1: rows taken away, their partials negated (a rule that `subtracts`)."""
        keys = [exp.alias_(k.copy(), f"{STATE_KEY}{i}") for i, k in enumerate(tree.args["group"].expressions)] \
            if tree.args.get("group") else []
        partials = [exp.alias_(_signed(parse_expression(p.row if rows else p.expression), sign), f"{STATE_PARTIAL}{j}")
                    for j, p in enumerate(self.partials)]
        state = tree.copy()
        state.set("expressions", keys + partials)
        state.set("having", None)
        if rows:
            state.set("group", None)
        return state


def aggregate(tree: exp.Select, retractable: bool = False) -> Aggregate | DistinctCount:
    written = tree
    tree, ordering, limit = _top(unfiltered(tree))
    check_select(tree, AGGREGATE_ARGS)
    group = tree.args.get("group")
    finest, sets = finest_keys(group) if group is not None else ([], None)
    keys = [ordinal(k, tree) for k in finest]
    if group is not None:
        tree = tree.copy()
        tree.set("group", exp.Group(expressions=[k.copy() for k in keys]))
    for key in keys:
        if own(key, exp.AggFunc):
            raise NotMaintainable("an aggregate in GROUP BY")
    if limit is None and sets is None and counts_one_distinct(tree):
        return distinct_count(tree, keys, _over_state)
    values = distinct_values(tree)
    if values:      # kept as keys beside the written ones (`grouping_sets`)
        tree = tree.copy()
        tree.set("group", exp.Group(expressions=[k.copy() for k in keys] + [v.copy() for v in values.values()]))
    partials: list[Partial] = []
    averaged: list[int] = []
    calls: dict[str, str] = {}          # an aggregate's text → its final over the state

    def final(call: exp.AggFunc) -> str:
        text = sql(call)
        if text in calls:
            return calls[text]
        if isinstance(call.parent, exp.Filter):
            raise NotMaintainable(f"{call_name(call)} with FILTER")
        j = len(partials)
        if isinstance(call.this, exp.Distinct):
            columns = ", ".join(f"{STATE_KEY}{len(keys) + list(values).index(sql(v))}" for v in call.this.expressions)
            distinct = "DISTINCT " if len(values) > 1 else ""   # (one value's state rows are distinct already)
            calls[text] = f"{type(call).__name__.upper()}({distinct}{columns})"
        elif isinstance(call, exp.Avg):
            argument = sql(call.this)
            partials.append(Partial(f"SUM({argument})", "SUM", argument, counter=j + 1 if retractable else None))
            partials.append(Partial(f"COUNT({argument})", "SUM", _counted(argument), counting=True))
            averaged.append(j)
            calls[text] = f"(CAST({STATE_PARTIAL}{j} AS DOUBLE) / {STATE_PARTIAL}{j + 1})"
        elif type(call) in _MERGES:
            if call.expressions:
                raise NotMaintainable(f"{call_name(call)} of several columns")
            argument = sql(call.this)
            row = (_counted(argument) if not isinstance(call.this, exp.Star) else ONE) \
                if isinstance(call, exp.Count) else argument
            summed = retractable and isinstance(call, exp.Sum)
            partials.append(Partial(text, _MERGES[type(call)], row, counter=j + 1 if summed else None,
                                    counting=isinstance(call, exp.Count)))
            if summed:
                partials.append(Partial(f"COUNT({argument})", "SUM", _counted(argument), counting=True))
            calls[text] = f"{STATE_PARTIAL}{j}"
        else:
            raise NotMaintainable(f"the aggregate {call_name(call)}")
        return calls[text]

    finals = [_over_state(e.this if isinstance(e, exp.Alias) else e, keys, final) for e in tree.expressions]
    having = tree.args.get("having")
    having_sql = _over_state(having.this, keys, final) if having is not None else None
    order = _order_over_state(ordering, tree, keys, final) if ordering is not None else None
    presence = next((j for j, p in enumerate(partials) if p.row == ONE), None)
    if presence is None and retractable:
        presence = len(partials)
        partials.append(Partial("COUNT(*)", "SUM", ONE, counting=True))
    return Aggregate(tree, tuple(identifier(t) for t in tables(tree)), tuple(sql(k) for k in [*keys, *values.values()]),
                     tuple(partials), tuple(finals), having_sql, tuple(averaged), presence, retractable,
                     order, sql(limit.expression) if limit is not None else None, written,
                     over_state(sets, keys, lambda i: f"{STATE_KEY}{i}") if sets is not None else None,
                     values=len(values))


def _top(tree: exp.Select) -> tuple[exp.Select, exp.Order | None, exp.Limit | None]:
    """The query without its ORDER BY … LIMIT (a global top-N over the aggregate), and the two; a
    query with only one of them, or an OFFSET, keeps them (and is refused naming them)."""
    order, limit = tree.args.get("order"), tree.args.get("limit")
    if order is None or limit is None or tree.args.get("offset") or limit.args.get("offset"):
        return tree, None, None
    tree = tree.copy()
    tree.set("order", None)
    tree.set("limit", None)
    return tree, order, limit


def _order_over_state(order: exp.Order, tree: exp.Select, keys: list[exp.Expression],
                      final: Callable[[exp.AggFunc], str]) -> str:
    """The ORDER BY over the state: each item (an output it names by position or alias) rewritten as the
    outputs are."""
    items = by_outputs(order, tree)
    for item in items:
        item.set("this", parse_expression(_over_state(item.this, keys, final)))
    return ", ".join(sql(item) for item in items)


def _signed(partial: exp.Expression, sign: int) -> exp.Expression:
    return partial if sign > 0 else exp.Neg(this=exp.paren(partial))


def _counted(argument: str) -> str:
    """What one row adds to COUNT(argument)."""
    return f"CASE WHEN ({argument}) IS NULL THEN CAST(0 AS BIGINT) ELSE CAST(1 AS BIGINT) END"


def ordinal(key: exp.Expression, tree: exp.Select) -> exp.Expression:
    """GROUP BY 2 is the second output expression (Spark's default)."""
    if isinstance(key, exp.Literal) and not key.is_string:
        position = int(key.name)
        if not 1 <= position <= len(tree.expressions):
            raise NotMaintainable(f"GROUP BY {position}")
        chosen = tree.expressions[position - 1]
        return (chosen.this if isinstance(chosen, exp.Alias) else chosen).copy()
    return key


def _over_state(expression: exp.Expression, keys: list[exp.Expression],
                final: Callable[[exp.AggFunc], str]) -> str:
    """An output expression rewritten over the state: aggregates by their finals, key expressions by
    their key columns. A column left over is neither: Spark's analysis of the result refuses it."""
    by_text = {_key_text(k): f"{STATE_KEY}{i}" for i, k in enumerate(keys)}
    by_name = {}
    for i, k in enumerate(keys):
        if isinstance(k, exp.Column):
            by_name.setdefault(k.name.lower(), []).append(f"{STATE_KEY}{i}")

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.AggFunc):
            return parse_expression(final(node))
        found = by_text.get(_key_text(node))
        if found is None and isinstance(node, exp.Column) and len(by_name.get(node.name.lower(), ())) == 1:
            found = by_name[node.name.lower()][0]
        return exp.column(found) if found else node

    return sql(expression.copy().transform(swap))


def _key_text(node: exp.Expression) -> str:
    return sql(node).lower()


def above_output(above: str, result: str, names: Sequence[str], beside: Sequence[str]) -> str:
    """The query above an aggregate, reading its `result` where it reads `ABOVE` and the relation
    `beside[k]` where it reads `BESIDE`k, its columns named `names`."""
    tree = parse(above)
    for table in tables(tree):
        if table.name == ABOVE:
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(ABOVE))
            table.replace(exp.Subquery(this=parse(result), alias=alias))
        elif table.name.startswith(BESIDE):
            relation = exp.to_table(beside[int(table.name[len(BESIDE):])], dialect=DIALECT)
            relation.set("alias", table.args.get("alias"))
            table.replace(relation)
    columns = ", ".join(quoted(name) for name in names)
    return f"SELECT * FROM ({sql(tree)}) AS mt_above({columns})"

