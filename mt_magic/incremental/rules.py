"""Which rule maintains a query, and the SQL each rule writes.

Each rule lives in its module (`linear`, `aggregate`, `topn`); this one picks it.

- `Linear`: filter, project, computed columns, inner joins, LEFT JOINs whose right side holds still,
  LATERAL VIEW, UNION ALL of those, however nested in subqueries in FROM and CTEs. The change of the
  result is the query over the change (a join's by the bilinear rule: for each appended occurrence i,
  the occurrences before i read their new files, i its appended ones, those after their old files),
  and it is merged by adding files; the rows an append takes away (stopped by a NOT EXISTS or NOT IN,
  padded rows an outer join now matches) by writing the files they are in again without them.
- `Aggregate`: one SELECT with GROUP BY (or a global aggregate, or grouping sets) over such a query,
  with COUNT, SUM, AVG, MIN, MAX (FILTER and DISTINCT too) and HAVING, and an ORDER BY … LIMIT over it; SELECT
  DISTINCT and UNION as the GROUP BY they are (`as_aggregate`). A hidden state keeps, per group, each
  aggregate's partial (AVG as a sum and a count); the change's partials are merged into it by group,
  and the result is the state's final projection with HAVING applied. Read as a subquery by a query
  that reads nothing else (`nested`), the query above is computed again over that projection.
- `DistinctCount`: COUNT(DISTINCT x) per group, alone: the distinct (group, x) pairs, added to.
- `TopN`: ROW_NUMBER / RANK / DENSE_RANK ≤ N per key, and ORDER BY … LIMIT N over no aggregate: the
  ranked rows within N, re-ranked with the change's rows.
- `Recompute`: anything else, with the construct that stops it named.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.aggregate import Aggregate, aggregate
from mt_magic.incremental.as_aggregate import grouped
from mt_magic.incremental.distinct import DistinctCount
from mt_magic.incremental.checks import (LINEAR_ARGS, Appended, NotMaintainable, check_select, held_still,
                                         monotone)
from mt_magic.incremental.linear import Linear, linear_union, unread
from mt_magic.incremental.nested import nested
from mt_magic.incremental.occurrences import Unparsable, identifier, own, parse, tables
from mt_magic.incremental.topn import TopN, global_top, top_n
from mt_magic.incremental.union_aggregates import branched

__all__ = ["Aggregate", "DistinctCount", "Linear", "Recompute", "Rule", "TopN", "appendable_held", "maintenance"]


@dataclass(frozen=True)
class Recompute:
    reason: str

    def describe(self) -> str:
        return f"full: {self.reason}"


Rule = Linear | Aggregate | DistinctCount | TopN | Recompute


def read_trees(rule: Linear | Aggregate | DistinctCount | TopN) -> list[tuple[exp.Select, int]]:
    """The SELECTs through which the rule reads its sources (a UNION ALL's branches, a top-N's ranked
    rows, else the query), each with the index of its first occurrence among the rule's."""
    if isinstance(rule, Linear):
        return rule.starts()
    return [(rule.ranked if isinstance(rule, TopN) else rule.select, 0)]


def held_sources(rule: Rule) -> dict[str, str]:
    """The sources read on the right of a LEFT JOIN or in a subquery of WHERE (`held_still`), and where:
    a change of one recomputes."""
    if isinstance(rule, Recompute):
        return {}
    return {rule.sources[start + i]: where for tree, start in read_trees(rule) for i, where in held_still(tree).items()}


def above_only(rule: Rule) -> frozenset[str]:
    """The sources only the query above an aggregate read as a subquery reads (`nested`): read whole by
    each refresh, which computes that query again, so any change of theirs needs nothing more."""
    if not isinstance(rule, Aggregate) or not rule.beside:
        return frozenset()
    return frozenset(rule.sources[len(rule.aggregated):]) - set(rule.aggregated)


def monotone_occurrences(rule: Rule) -> dict[int, Appended]:
    """The held occurrences an append to which moves each row one way (`monotone`): read in an EXISTS or
    IN conjunct of WHERE, under NOT, or on the right of a LEFT JOIN."""
    if isinstance(rule, Recompute):
        return {}
    return {start + i: how.appended for tree, start in read_trees(rule) for i, how in monotone(tree).items()}


def apart_occurrences(rule: Rule) -> dict[int, set[int]]:
    """Per occurrence, those the change of an append to it reads none of: the other sides of each UNION
    ALL it is read under (`linear.unread`)."""
    if isinstance(rule, Recompute):
        return {}
    found = {start + i: {start + j for j in unread(tree, i)} for tree, start in read_trees(rule)
             for i in range(len(tables(tree)))}
    return {i: others for i, others in found.items() if others}


def takes_away(rule: Rule) -> bool:
    """The rule can take away the rows an append stops or unpads (terms of weight −1): a linear query
    (its table's rows are written again without them) or an aggregate whose partials all subtract,
    with its rows and SUMs' values counted."""
    return isinstance(rule, Linear) or isinstance(rule, Aggregate) and rule.subtracts and rule.retracts


def takes_rows_away(rule: Rule, appended: set[str]) -> bool:
    """An append to these sources takes rows away (terms of weight −1): a linear table's, or an
    aggregate's groups — a partition of the table may be emptied."""
    return takes_away(rule) and any(rule.sources[i] in appended for i, how in monotone_occurrences(rule).items()
                                    if how is not Appended.PASSES)


def appendable_held(rule: Rule) -> set[str]:
    """The held sources (`held_sources`) an append to which is maintained: every place they are held
    is one they only grow the result from, or (a rule that `takes_away`) move each row one way."""
    if isinstance(rule, Recompute):
        return set()
    moving = {i for i, how in monotone_occurrences(rule).items() if how is Appended.PASSES or takes_away(rule)}
    stopping = {rule.sources[start + i] for tree, start in read_trees(rule) for i in held_still(tree)
                if start + i not in moving}
    return set(held_sources(rule)) - stopping


def maintenance(query: str) -> Rule:
    """The rule that maintains `query` (its table names fully qualified), or why none does. An aggregate
    an append can take rows from counts its rows and SUMs' values (`Aggregate.retractable`) where its
    partials subtract, so that it takes them away."""
    rule = _rule(query)
    if isinstance(rule, Aggregate) and rule.subtracts and \
            {Appended.STOPS, Appended.MATCHES} & set(monotone_occurrences(rule).values()):
        return rule.retractable
    return rule


def _rule(query: str) -> Rule:
    try:
        tree = branched(grouped(parse(query)))
        above = nested(tree)
        if above is not None:
            return above
        if isinstance(tree, exp.Union):
            return linear_union(tree)
        if not isinstance(tree, exp.Select):
            raise NotMaintainable(f"a {type(tree).__name__.upper()} query")
        if tree.args.get("qualify") or (isinstance(tree.args.get("from_") and tree.args["from_"].this, exp.Subquery)
                                        and own(tree, exp.Window)):
            return top_n(tree)
        if tree.args.get("group") or own(tree, exp.AggFunc):
            return aggregate(tree)
        if tree.args.get("order") and tree.args.get("limit"):
            return top_n(global_top(tree))
        check_select(tree, LINEAR_ARGS)
        return Linear((tree,), (tuple(identifier(t) for t in tables(tree)),))
    except (Unparsable, NotMaintainable) as reason:
        return Recompute(str(reason))
