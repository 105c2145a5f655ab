"""SELECT DISTINCT, UNION and an aggregate's FILTER, written as the aggregate rule's queries they are:
DISTINCT is a GROUP BY of its columns, a UNION a DISTINCT over the UNION ALL of its branches, and
`AGG(x) FILTER (WHERE p)` is `AGG(CASE WHEN p THEN x END)` (an aggregate skips NULLs). The same rows
by another spelling, so one rule and its state maintain them — retractions included (a group whose
rows reach zero disappears, as a distinct row whose copies all left)."""

from __future__ import annotations

from sqlglot import exp

from mt_magic.incremental.checks import NotMaintainable
from mt_magic.incremental.occurrences import own

UNION_ALIAS = "mt_union"
_FILTERABLE = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)


def grouped(tree: exp.Expression) -> exp.Expression:
    """`tree` with a top SELECT DISTINCT or UNION written as a GROUP BY; any other query as it is."""
    if isinstance(tree, exp.Union) and not isinstance(tree, (exp.Except, exp.Intersect)) and \
            tree.args.get("distinct"):
        return _union(tree)
    if isinstance(tree, exp.Select) and tree.args.get("distinct") is not None and not tree.args.get("qualify"):
        return _distinct(tree)
    return tree


def unfiltered(tree: exp.Select) -> exp.Select:
    """Each `AGG(x) FILTER (WHERE p)` of a COUNT, SUM, MIN, MAX or AVG as `AGG(CASE WHEN p THEN x END)`."""
    def rewrite(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Filter) or not isinstance(node.this, _FILTERABLE):
            return node
        call, condition = node.this.copy(), node.expression.this.copy()
        argument = call.this
        distinct = isinstance(argument, exp.Distinct)
        if distinct:
            if len(argument.expressions) != 1:
                return node
            argument = argument.expressions[0]
        value = exp.Literal.number(1) if isinstance(argument, exp.Star) else argument.copy()
        case = exp.Case(ifs=[exp.If(this=condition, true=value)])
        call.set("this", exp.Distinct(expressions=[case]) if distinct else case)
        return call
    return tree.transform(rewrite) if tree.find(exp.Filter) else tree


def _distinct(tree: exp.Select) -> exp.Select:
    if tree.args["distinct"].args.get("on"):
        raise NotMaintainable("DISTINCT ON")
    if tree.args.get("group") or own(tree, exp.AggFunc):
        raise NotMaintainable("SELECT DISTINCT over an aggregate")
    if any(e.is_star for e in tree.expressions):
        raise NotMaintainable("SELECT DISTINCT *")
    select = tree.copy()
    select.set("distinct", None)
    select.set("group", exp.Group(expressions=[(e.this if isinstance(e, exp.Alias) else e).copy()
                                               for e in select.expressions]))
    return select


def _union(tree: exp.Union) -> exp.Select:
    """SELECT its columns FROM (the UNION ALL) GROUP BY them, its ORDER BY and LIMIT over that."""
    names = _names(tree)
    body = tree.copy()
    order, limit = body.args.get("order"), body.args.get("limit")
    for arg in ("order", "limit"):
        body.set(arg, None)
    _every_all(body)
    columns = [exp.column(exp.to_identifier(name, quoted=True)) for name in names]
    select = exp.select(*columns).from_(exp.Subquery(this=body, alias=exp.TableAlias(
        this=exp.to_identifier(UNION_ALIAS))))
    select.set("group", exp.Group(expressions=[c.copy() for c in columns]))
    select.set("order", order)
    select.set("limit", limit)
    return select


def _names(tree: exp.Union) -> list[str]:
    """The UNION's column names: its first branch's, each a column or named by an alias."""
    first: exp.Expression = tree
    while isinstance(first, (exp.Union, exp.Subquery)):
        first = first.this
    if not isinstance(first, exp.Select) or \
            not all(isinstance(e, (exp.Alias, exp.Column)) and not e.is_star for e in first.expressions):
        raise NotMaintainable("a UNION whose columns are not all named")
    names = [e.alias_or_name for e in first.expressions]
    if len({n.lower() for n in names}) < len(names):
        raise NotMaintainable("a UNION whose columns are not all named")
    return names


def _every_all(union: exp.Expression) -> None:
    """Under a UNION's DISTINCT, each union it is made of is the same as UNION ALL (one without ORDER BY
    or LIMIT: the rule refuses those)."""
    while isinstance(union, exp.Subquery) and not union.alias:
        union = union.this
    if isinstance(union, exp.Union) and not isinstance(union, (exp.Except, exp.Intersect)) and \
            not union.args.get("order") and not union.args.get("limit"):
        union.set("distinct", False)
        _every_all(union.this)
        _every_all(union.expression)
