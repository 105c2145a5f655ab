"""A UNION ALL of aggregates, written as the one aggregate it is: each branch's rows tagged with the
branch, its group keys and the columns its aggregates read each in a column of its own (NULL in the
other branches' rows), the branches' inputs a UNION ALL, and the groups keyed by the branch first —
so a group holds one branch's rows, and each output is its branch's expression over them
(`CASE mt_branch WHEN b …`). A global aggregate's branch adds a row of its own, NULL in every column,
so that its group is there over no rows (its aggregates read its input's rows alone, `real`). One
aggregate's state then maintains every branch, retractions included, and a UNION (DISTINCT) of
aggregates is an aggregate of that aggregate (`nested`)."""

from __future__ import annotations

import re

from sqlglot import exp

from mt_magic.incremental.aggregate import ordinal
from mt_magic.incremental.as_aggregate import grouped, unfiltered
from mt_magic.incremental.checks import NotMaintainable
from mt_magic.incremental.occurrences import own, sql

BRANCH = "mt_branch"
INPUTS = "mt_branches"


def branched(tree: exp.Expression) -> exp.Expression:
    """`tree` with each UNION ALL whose branches all aggregate written as one aggregate."""
    return tree.transform(lambda node: _combined(node, whole=node.parent is None) if _aggregates_only(node)
                          else node)


def _aggregates_only(node: exp.Expression) -> bool:
    branches = _branches(node)
    return branches is not None and all(_aggregating(b) for b in branches)


def _branches(node: exp.Expression) -> list[exp.Expression] | None:
    """The branches of a UNION ALL (nested ones flattened, parentheses taken off); None: not one."""
    if type(node) is not exp.Union or node.args.get("distinct"):
        return None
    found: list[exp.Expression] = []
    for side in (node.this, node.expression):
        while isinstance(side, exp.Subquery) and not side.alias and not side.args.get("order") and \
                not side.args.get("limit"):
            side = side.this
        inner = _branches(side) if not (side.args.get("order") or side.args.get("limit")) else None
        found.extend(inner if inner is not None else [unfiltered(grouped(side)) if isinstance(side, exp.Select)
                                                      else side])   # (a SELECT DISTINCT: its GROUP BY)
    return found


def _aggregating(branch: exp.Expression) -> bool:
    return isinstance(branch, exp.Select) and bool(branch.args.get("group") or any(
        not isinstance(call.parent, exp.Window) for call in own(branch, exp.AggFunc)))   # (a window's is not)


def _combined(union: exp.Union, whole: bool) -> exp.Select:
    """`whole`: the union is the query, whose outputs the table names by position (its query columns):
    an output the first branch leaves unnamed (`SUM(v)`, which Spark names itself) needs no name here."""
    branches = [_Branch(b, k) for k, b in enumerate(_branches(union) or [])]
    names = [_name(e, k if whole else None) for k, e in enumerate(branches[0].select.expressions)]
    if any(len(b.outputs) != len(names) for b in branches):
        raise NotMaintainable("a UNION ALL of aggregates with different numbers of columns")
    slots = [name for b in branches for name, _ in b.slots]
    inputs: exp.Expression | None = None
    for b in branches:
        own_slots = dict(b.slots)
        values = [exp.alias_(exp.Literal.number(b.index), BRANCH)] + [
            exp.alias_(own_slots[s].copy() if s in own_slots else exp.Null(), s) for s in slots]
        select = b.select.copy()
        for arg in ("group", "having", "distinct"):
            select.set(arg, None)
        select.set("expressions", values)
        inputs = select if inputs is None else exp.union(inputs, select, distinct=False)
        if b.whole:     # its one group's row, whatever its input: no aggregate reads it
            row = exp.select(*[exp.alias_(exp.Literal.number(b.index), BRANCH)] +
                             [exp.alias_(exp.Null(), s) for s in slots])
            inputs = exp.union(inputs, row, distinct=False)
    branch = exp.column(BRANCH)
    outputs = [exp.alias_(exp.Case(ifs=[exp.If(this=exp.EQ(this=branch.copy(), expression=exp.Literal.number(b.index)),
                                                true=b.outputs[i].copy()) for b in branches]),
                          exp.to_identifier(name, quoted=True)) for i, name in enumerate(names)]
    combined = exp.select(*outputs).from_(exp.Subquery(this=inputs, alias=exp.TableAlias(this=exp.to_identifier(INPUTS))))
    combined.set("group", exp.Group(expressions=[branch.copy()] + [exp.column(k) for b in branches for k in b.keys.values()]))
    if any(b.having is not None for b in branches):
        combined.set("having", exp.Having(this=exp.or_(*(
            exp.and_(exp.EQ(this=branch.copy(), expression=exp.Literal.number(b.index)),
                     *([b.having] if b.having is not None else [])) for b in branches))))
    for arg in ("order", "limit"):
        combined.set(arg, union.args.get(arg))
    return combined


class _Branch:
    """One branch: its outputs and HAVING over its slots (`mt_k<b>_…` its group keys, `mt_c<b>_…` the
    columns its aggregates read), and what each slot holds."""

    def __init__(self, select: exp.Select, index: int) -> None:
        self.select, self.index = select, index
        group = select.args.get("group") or exp.Group(expressions=[])
        self.whole = not group.expressions       # a global aggregate: one group, rows or none
        if any(group.args.get(a) for a in ("grouping_sets", "rollup", "cube")):
            raise NotMaintainable("GROUPING SETS, ROLLUP or CUBE under UNION ALL")
        if select.args.get("distinct") or select.args.get("qualify"):
            raise NotMaintainable("SELECT DISTINCT over an aggregate")
        having = select.args.get("having")
        if select.find(exp.Window) or any(e.find(exp.Subquery, exp.Exists) for e in [*select.expressions, having] if e):
            raise NotMaintainable("a window or a subquery in an aggregate under UNION ALL")
        self.slots: list[tuple[str, exp.Expression]] = []     # (its name, what it holds)
        by_text: dict[str, str] = {}
        for key in (ordinal(k, select) for k in group.expressions):
            if sql(key).lower() not in by_text:
                by_text[sql(key).lower()] = self._slot("k", key)
        self.keys = by_text
        self.columns: dict[str, str] = {}
        self.real = self._slot("c", exp.Literal.number(1)) if self.whole else None   # NULL in its group's own row
        self.outputs = [self._over_slots(e.this if isinstance(e, exp.Alias) else e) for e in select.expressions]
        self.having = self._over_slots(having.this) if having is not None else None

    def _over_slots(self, expression: exp.Expression) -> exp.Expression:
        def swap(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.AggFunc):
                return self._real(node.copy().transform(self._column_slot))
            found = self.keys.get(sql(node).lower())
            if found is not None:
                return exp.column(found)
            if isinstance(node, exp.Column):
                raise NotMaintainable(f"the column {sql(node)}, neither grouped nor aggregated, under UNION ALL")
            return node
        return expression.copy().transform(swap)

    def _real(self, call: exp.AggFunc) -> exp.AggFunc:
        """A global aggregate's call over its input's rows alone, not its group's own row: its argument
        NULL there (COUNT(*) a count of `real`)."""
        if self.real is None:
            return call
        real = exp.column(self.real)
        argument = call.this
        if isinstance(argument, exp.Star):
            call.set("this", real)
        elif isinstance(argument, exp.Distinct):
            argument.set("expressions", [_when(real, e) for e in argument.expressions])
        elif argument is not None:
            call.set("this", _when(real, argument))
        return call

    def _column_slot(self, node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or node.is_star:
            return node
        text = sql(node).lower()
        if text not in self.columns:
            self.columns[text] = self._slot("c", node)
        return exp.column(self.columns[text])

    def _slot(self, kind: str, holds: exp.Expression) -> str:
        """A new slot's name: its branch, kind (k: a key, c: a column read) and what it holds, as EXPLAIN
        shows the state's keys."""
        name = f"mt_{kind}{self.index}_{re.sub(r'[^0-9a-z]+', '_', sql(holds).lower()).strip('_')[:40]}"
        while name in dict(self.slots):
            name += "_"
        self.slots.append((name, holds.copy()))
        return name


def _when(real: exp.Column, value: exp.Expression) -> exp.Expression:
    return exp.Case(ifs=[exp.If(this=exp.Is(this=real.copy(), expression=exp.Not(this=exp.Null())), true=value)])


def _name(output: exp.Expression, position: int | None) -> str:
    """An output's name; unnamed, `mt_output<position>` where a position names it, else no rule."""
    if isinstance(output, exp.Alias) or (isinstance(output, exp.Column) and not output.is_star):
        return output.alias_or_name
    if position is not None and not isinstance(output, exp.Star):
        return f"mt_output{position}"
    raise NotMaintainable("a UNION whose columns are not all named")
