"""GROUPING SETS, ROLLUP and CUBE, and DISTINCT aggregates, over the aggregate rule's state.

The state keeps partials per group of every key the grouping sets name (the finest grouping); each
set's groups are those partials merged again — a SUM of sums and counts, a MIN of minimums — in the
result's own GROUP BY over the state (Spark computes the sets from it). So a change is merged into
the finest groups only, and retractions subtract there as for any GROUP BY. A DISTINCT aggregate's
values are finer keys of the state the same way: `COUNT(DISTINCT v)` per group counts the value column
over the group's state rows, one per value present (a value whose rows all leave is gone with its row);
DISTINCT again only where the values of several DISTINCT columns multiply those rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

from sqlglot import exp

from mt_magic.incremental.checks import NotMaintainable, call_name, parse_expression
from mt_magic.incremental.occurrences import own, sql

_CONSTRUCTS = (exp.Rollup, exp.Cube, exp.GroupingSets)


def finest_keys(group: exp.Group) -> tuple[list[exp.Expression], exp.Group | None]:
    """The keys of the finest grouping, each once, and the GROUP BY as written where it names grouping
    sets (None for a plain GROUP BY)."""
    if any(group.args.get(a) for a in set(group.args) - {"expressions", "rollup", "cube"}):
        raise NotMaintainable("GROUP BY " + ", ".join(a.upper() for a in group.args if a != "expressions"))
    sets = bool(group.args.get("rollup") or group.args.get("cube")) or \
        any(isinstance(k, _CONSTRUCTS) for k in group.expressions)
    keys: dict[str, exp.Expression] = {}
    for key in group.expressions:
        for member in _members(key) if isinstance(key, _CONSTRUCTS) else [key]:
            if sets and isinstance(member, exp.Literal) and not member.is_string:
                raise NotMaintainable("a position in GROUPING SETS, ROLLUP or CUBE")
            keys.setdefault(sql(member).lower(), member)
    return list(keys.values()), group if sets else None


def over_state(group: exp.Group, keys: Sequence[exp.Expression], key_column: Callable[[int], str]) -> str:
    """The grouping sets' GROUP BY with each key as the state's key column."""
    columns = {sql(k).lower(): key_column(i) for i, k in enumerate(keys)}

    def swap(node: exp.Expression) -> exp.Expression:
        found = columns.get(sql(node).lower()) if not isinstance(node, (*_CONSTRUCTS, exp.Tuple)) else None
        return exp.column(found) if found else node

    text = sql(group.copy().transform(swap))
    return text[len("GROUP BY "):] if text.upper().startswith("GROUP BY ") else text


def merged_again(text: str, partial: re.Pattern, merges: Sequence[str], ordering: bool = False) -> str:
    """An expression over the state (`text`; `ordering`: an ORDER BY's items) with each partial column
    merged over the finest groups a set's group holds (its merge, a template: `SUM({})`, `MIN({})`)."""
    def merge(node: exp.Expression) -> exp.Expression:
        found = partial.fullmatch(node.name) if isinstance(node, exp.Column) and not node.table else None
        return parse_expression(merges[int(found.group(1))].format(node.name)) if found else node
    return _transformed(text, merge, ordering)


def per_row(text: str, values: Collection[str], ordering: bool = False) -> str:
    """An expression over the state as one state row computes it: an aggregate of a value key (one of
    `values`) as that value (what Spark judges of each row's outputs; their merge is the rule's own
    aggregate)."""
    def value(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.AggFunc):
            return node
        argument = node.this.expressions[0] if isinstance(node.this, exp.Distinct) else node.this
        return argument.copy() if isinstance(argument, exp.Column) and argument.name in values else node
    return _transformed(text, value, ordering)


def _transformed(text: str, change, ordering: bool) -> str:
    if not ordering:
        return sql(parse_expression(text).transform(change))
    order = parse_expression(f"SELECT * FROM state ORDER BY {text}").args["order"]
    return ", ".join(sql(item.transform(change)) for item in order.expressions)


def _members(construct: exp.Expression) -> list[exp.Expression]:
    members = []
    for item in construct.expressions:
        if isinstance(item, exp.Tuple):
            members.extend(item.expressions)
        elif isinstance(item, exp.Paren):
            members.extend(item.this.expressions if isinstance(item.this, exp.Tuple) else [item.this])
        else:
            members.append(item)
    return members


def distinct_values(tree: exp.Select) -> dict[str, exp.Expression]:
    """The values DISTINCT aggregates (COUNT, SUM, AVG, MIN, MAX) take, each once, by their text."""
    values: dict[str, exp.Expression] = {}
    for call in own(tree, exp.AggFunc):
        if not isinstance(call.this, exp.Distinct):
            continue
        if not isinstance(call, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)):
            raise NotMaintainable(f"{call_name(call)} over DISTINCT values")
        if len(call.this.expressions) != 1 and not isinstance(call, exp.Count):
            raise NotMaintainable(f"{call_name(call)} of several columns")
        for value in call.this.expressions:     # (COUNT(DISTINCT a, b): each a value key)
            values.setdefault(sql(value), value)
    return values
