"""An aggregate read as a subquery (or a CTE) by a query above it: an aggregate of an aggregate, a
filter, a window or a top-N over one, the aggregate read twice and joined with another table (TPC-H
Q15 joins `supplier` with the groups equal to the MAX over the same CTE). The aggregate is maintained
as any (its state merged with the change, a rewritten partition's partials retracted), and the query
above it is computed again over its groups and the other tables — a pass over the state and those
tables, not over the aggregate's sources. The other tables are read whole each time, so a change of
one needs nothing more (`rules.above_only`)."""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from mt_magic.incremental.aggregate import ABOVE, BESIDE, Aggregate, aggregate
from mt_magic.incremental.as_aggregate import grouped
from mt_magic.incremental.checks import NotMaintainable
from mt_magic.incremental.occurrences import identifier, own, sql, tables


def nested(tree: exp.Expression) -> Aggregate | None:
    """The rule of a query above one aggregate in a subquery; None where no subquery in FROM or JOIN
    aggregates — its own or one of its subquery expressions' (an IN's list may join the values of a
    scalar subquery per key: `keyed_subqueries`)."""
    found = [s for s in tree.find_all(exp.Subquery) if isinstance(s.parent, (exp.From, exp.Join))
             and _aggregates(s.this)]
    outermost = [s for s in found if not any(o is not s and _inside(s, o) for o in found)]
    if not outermost:
        return None
    if len({sql(s.this) for s in outermost}) > 1:
        raise NotMaintainable("two aggregates in subqueries")
    body = outermost[0].this
    if not isinstance(body, exp.Select):
        raise NotMaintainable("an aggregate in a subquery")
    names = tuple(_name(e) for e in body.expressions)
    above = tree.copy()
    for subquery in [s for s in above.find_all(exp.Subquery) if s.parent is not None and _aggregates(s.this)
                     and sql(s.this) == sql(body)]:
        subquery.replace(exp.Table(this=exp.to_identifier(ABOVE), alias=subquery.args.get("alias")))
    beside = [t for t in tables(above) if t.name != ABOVE]
    for k, table in enumerate(beside):
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
        table.replace(exp.Table(this=exp.to_identifier(f"{BESIDE}{k}"), alias=alias.copy()))
    inner = aggregate(grouped(body.copy()))
    if not isinstance(inner, Aggregate):
        raise NotMaintainable("COUNT(DISTINCT …) in a subquery")
    return dataclasses.replace(inner, above=sql(above), own_names=names, beside=len(beside),
                               occurrences=inner.occurrences + tuple(identifier(t) for t in beside))


def _aggregates(body: exp.Expression) -> bool:
    """A SELECT that aggregates (a window function's call is not an aggregate of the SELECT)."""
    return isinstance(body, exp.Select) and bool(
        body.args.get("group") or body.args.get("distinct")
        or any(not isinstance(call.parent, exp.Window) and call.find_ancestor(exp.Select) is body
               for call in own(body, exp.AggFunc)))     # (not those of a subquery in its FROM)


def _inside(node: exp.Expression, ancestor: exp.Expression) -> bool:
    while node.parent is not None:
        node = node.parent
        if node is ancestor:
            return True
    return False


def _name(output: exp.Expression) -> str:
    """An output's name, as the query above reads it."""
    if isinstance(output, exp.Alias):
        return output.alias
    if isinstance(output, exp.Column) and not output.is_star:
        return output.name
    raise NotMaintainable("an unnamed output of an aggregate in a subquery")
