"""An EXISTS, NOT EXISTS, IN or scalar subquery over a large source, read as a LEFT JOIN with that source
aggregated by the keys that correlate it (or that it lists).

`WHERE NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)` (TPC-H Q22's customers without
orders) is `LEFT JOIN (SELECT o_custkey AS mt_k0, COUNT(*) AS mt_rows FROM orders GROUP BY o_custkey) AS
mt_exists0 ON mt_exists0.mt_k0 = c_custkey WHERE COALESCE(mt_exists0.mt_rows, 0) = 0`: a key with rows
exists, one without is NULL on the padded side, and a NULL key matches no row either way; correlated by
one comparison besides (Q21's `l2.l_suppkey <> l1.l_suppkey`), each key's MIN and MAX of its side are
compared instead. Several over one table by the same keys (Q21's EXISTS and NOT EXISTS) are one aggregate,
each subquery's rows counted by a FILTER of its own (so a key's count may be 0). A scalar subquery
(`ps_availqty > (SELECT 0.5 * SUM(l_quantity) FROM lineitem WHERE l_partkey = ps_partkey AND …)`, Q20) is
its value per key the same way (`… AS mt_value … GROUP BY l_partkey, l_suppkey) AS mt_scalar0`), where
that value is NULL over no rows as the subquery's is: arithmetic over SUM, AVG, MIN and MAX alone (a COUNT
is 0 there, a COALESCE anything). An IN over the one column a subquery groups by (`o_orderkey IN (SELECT
l_orderkey FROM lineitem GROUP BY l_orderkey HAVING SUM(l_quantity) > 300)`, Q18) stays an IN, of those
keys read from the subquery named `mt_in0` (`o_orderkey IN (SELECT mt_in0.mt_k0 FROM (SELECT l_orderkey AS
mt_k0 …) AS mt_in0)`): a semi-join, which Spark runs before the query's other joins (a LEFT JOIN tested for
NULL it ran after them — Q18's orders joined with every line item first: 3.7 s against 0.9 at scale 1);
a plain IN lists its values so, grouped. Each LEFT JOIN matches an outer row once at most, so any place
in WHERE may read it.
The grouped source is an aggregate read as a subquery (`nested`): kept per partition of its source, an
append adds to it, a rewritten partition's partials are retracted (a key whose rows all left is gone), and
the query around it is computed again over it and its own tables, read whole (a change of those only it
reads needs nothing more: `rules.above_only`; the subquery's table may be one of them, TPC-H Q17's). So
the rewrite is asked for (`keyed`) where the source in the subquery is partitioned — what changes — and
the tables around it are not, or the query aggregates (`Chooser._counted`); a linear query over a changing
outer table keeps the rule that maintains the outer rows' own change (`checks.monotone`)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import NamedTuple

from sqlglot import exp

from mt_magic.incremental.checks import conjuncts
from mt_magic.incremental.occurrences import identifier, parse, sql, subquery_expression, tables

KEYS = "mt_exists"      # the k-th counted keys' alias: mt_exists0, mt_exists1, ...
LISTED = "mt_in"        # the k-th IN list's grouped keys: mt_in0, ...
VALUES = "mt_scalar"    # the k-th scalar subquery's values per key: mt_scalar0, ...
KEY = "mt_k"            # their key columns: mt_k0, mt_k1, ...
PENDING = "mt_pending"  # a test's table until its subquery is joined
ROWS = "mt_rows"        # each key's rows
VALUE = "mt_value"      # each key's value of a scalar subquery
LOWEST, HIGHEST = "mt_lo", "mt_hi"      # each key's least and greatest value compared by an EXISTS
_PLAIN = ("joins", "group", "having", "limit", "qualify", "order", "distinct", "laterals", "with_", "windows")
_NULL_OVER_NOTHING = (exp.Sum, exp.Avg, exp.Min, exp.Max)
_PROPAGATING = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Paren, exp.Cast, exp.Literal)
_FLIPPED = {exp.NEQ: exp.NEQ, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE}


def keyed_sources(query: str, aggregates: bool = False) -> set[str]:
    """The sources EXISTS tests, IN lists of grouped keys and scalar subqueries of one table each read
    (what `keyed` could read by their keys) — but, unless the query `aggregates` (TPC-H Q21's `lineitem`,
    its rows counted where others of their order exist), a table an EXISTS tests that the query reads
    elsewhere too (the monotone rule maintains the rows it lets pass: `checks.monotone`)."""
    tree = parse(query)
    keyable = [node for node in tree.walk() if _keyable(node)]
    tested = [t for node in keyable for t in tables(node)]
    elsewhere = {identifier(t) for t in tables(tree) if not any(t is u for u in tested)}
    exists = {identifier(t) for node in keyable if isinstance(node, exp.Exists) for t in tables(node)}
    return {identifier(t) for t in tested} - (set() if aggregates else elsewhere & exists)


def keyed(query: str, counted: Collection[str]) -> str:
    """`query` (its columns naming their tables) with each [NOT] EXISTS conjunct, each IN conjunct over
    grouped keys and each scalar subquery of WHERE over one source of `counted`, correlated by
    equalities alone, read as that source aggregated by its keys; as it is where none is. (A comma join
    is written back as the CROSS JOIN it is: a JOIN after it sees every relation before.)"""
    tree = parse(query)
    names = [t.alias_or_name.lower() for t in tables(tree)]
    found = 0
    for select in list(tree.find_all(exp.Select)):
        where = select.args.get("where")
        if where is None:
            continue
        parts, pending, before = [], [], found
        for part in conjuncts(where.this):
            counted_keys = _counted_keys(part, counted, names, f"{PENDING}{len(pending)}")
            listed = None if counted_keys else _listed_keys(part, counted, names, f"{LISTED}{found}")
            if counted_keys is not None:
                pending.append(counted_keys)
                part = counted_keys.read
            elif listed is not None:
                part = listed
                found += 1
            for subquery in list(_scalars(part)):
                valued = _valued_keys(subquery, counted, names, f"{PENDING}{len(pending)}")
                if valued is None:
                    continue
                pending.append(valued)
                part = valued.read if subquery is part else part
                subquery.replace(valued.read)
            parts.append(part)
        for members in _alike(pending):
            join = _grouped_join(members, f"{members[0].kind}{found}")
            select.set("joins", [*(select.args.get("joins") or []), join])
            found += 1
        if found > before:      # (the SELECTs inside it left as they are, to be rewritten in turn)
            where.set("this", exp.and_(*parts, copy=False))
    return sql(tree) if found else query


def _keyable(node: exp.Expression) -> bool:
    if isinstance(node, exp.Exists):
        return _alone(node.this)
    if isinstance(node, exp.In):
        return isinstance(node.args.get("query"), exp.Subquery) and _listing(node.args["query"].this)
    return _scalar(node) and _valued(node.this)


def _scalar(node: exp.Expression) -> bool:
    """A subquery used as a value (not a relation, nor an IN, ANY or ALL's list)."""
    return isinstance(node, exp.Subquery) and subquery_expression(node) and \
        not isinstance(node.parent, (exp.In, exp.Any, exp.All, exp.Exists))


def _scalars(part: exp.Expression) -> Iterator[exp.Subquery]:
    """The scalar subqueries of a conjunct, not those inside them."""
    return (n for n in part.walk(prune=lambda n: n is not part and subquery_expression(n)) if _scalar(n))


def _alone(body: exp.Expression) -> bool:
    """A SELECT of one table filtered, nothing else (no join, group, limit …)."""
    source = body.args.get("from_") if isinstance(body, exp.Select) else None
    return source is not None and isinstance(source.this, exp.Table) and not any(body.args.get(a) for a in _PLAIN)


def _grouped(body: exp.Expression) -> bool:
    """A SELECT of one table filtered, of the one column it groups by (each value once), its groups
    filtered by HAVING or not — nothing else."""
    source = body.args.get("from_") if isinstance(body, exp.Select) else None
    group = body.args.get("group") if source is not None else None
    if group is None or not isinstance(source.this, exp.Table) or \
            any(body.args.get(a) for a in _PLAIN if a not in ("group", "having")) or \
            any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup", "totals")):
        return False
    keys, selected = group.expressions, body.expressions
    return len(keys) == 1 and len(selected) == 1 and selected[0].unalias() == keys[0]


def _listing(body: exp.Expression) -> bool:
    """An IN's list whose values can be grouped: `_grouped`, or a SELECT `_alone` (or DISTINCT) of one
    value of its columns, no aggregate (a plain semi-join: the set it lists is its values grouped)."""
    if _grouped(body):
        return True
    if not isinstance(body, exp.Select) or len(body.expressions) != 1 or body.expressions[0].find(exp.Column) is None \
            or body.expressions[0].find(exp.AggFunc, exp.Window, exp.Select, exp.Star) is not None:
        return False
    plain = body.copy()
    plain.set("distinct", None)
    return _alone(plain)


def _valued(body: exp.Expression) -> bool:
    """A SELECT `_alone` of one value NULL over no rows: arithmetic over SUM, AVG, MIN or MAX calls."""
    if not _alone(body) or len(body.expressions) != 1:
        return False
    nodes = list(body.expressions[0].unalias().walk(prune=lambda n: isinstance(n, exp.AggFunc)))
    calls = [n for n in nodes if isinstance(n, exp.AggFunc)]
    outside = [n for n in nodes if not isinstance(n, (exp.AggFunc, exp.DataType, *_PROPAGATING))
               and n.find_ancestor(exp.DataType) is None]
    return bool(calls) and not outside and all(isinstance(c, _NULL_OVER_NOTHING) and not c.find(exp.Distinct)
                                               for c in calls)


def _counted_keys(part: exp.Expression, counted: Collection[str], names: list[str], pending: str) -> _Keyed | None:
    """The keys an [NOT] EXISTS conjunct tests, counted, and the test of their rows, or None where it is
    not one over a counted source correlated by equalities — and at most one comparison (`l2.s <>
    l1.s`, TPC-H Q21's): then a key's MIN and MAX of its side are what the test compares (some row's
    value differs from x exactly where the least or the greatest does; a NULL is none)."""
    negated = isinstance(part, exp.Not)
    node = part.this if negated else part
    if isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Exists) or not _alone(node.this):
        return None
    correlation = _correlation(node.this, counted, names, compared=True)
    if correlation is None:
        return None
    if correlation.compared is None:        # (a key without rows, or none matching a FILTER: no row)
        rows = exp.column(ROWS, table=pending)
        test = exp.EQ(this=exp.func("COALESCE", rows, exp.Literal.number(0)), expression=exp.Literal.number(0)) \
            if negated else exp.GT(this=rows.copy(), expression=exp.Literal.number(0))
        return _Keyed(correlation, [exp.alias_(exp.Count(this=exp.Star()), ROWS)], test, KEYS, pending)
    own, comparison, outer = correlation.compared
    bounds = [(LOWEST, exp.Min)] * (comparison in (exp.NEQ, exp.LT, exp.LTE)) + \
        [(HIGHEST, exp.Max)] * (comparison in (exp.NEQ, exp.GT, exp.GTE))
    tests = [comparison(this=exp.column(name, table=pending), expression=outer.copy()) for name, _ in bounds]
    test = exp.func("COALESCE", exp.or_(*tests), exp.false())
    return _Keyed(correlation, [exp.alias_(bound(this=own.copy()), name) for name, bound in bounds],
                  exp.Not(this=test) if negated else test, KEYS, pending)


def _listed_keys(part: exp.Expression, counted: Collection[str], names: list[str], alias: str) -> exp.In | None:
    """The IN conjunct over the grouped keys it lists (`_grouped`, or its values grouped), read from the
    subquery `alias`; None where the list is not one over a counted source, or is correlated. (A
    conjunct of WHERE: a NULL on either side makes it not TRUE, as the IN written.)"""
    if not isinstance(part, exp.In) or not _keyable(part):
        return None
    body = part.args["query"].this
    table = body.args["from_"].this
    inner = table.alias_or_name.lower()
    if identifier(table) not in counted or names.count(inner) > 1 or \
            any(not _inner(c, inner) for c in body.find_all(exp.Column)):
        return None
    grouped, value = body.copy(), body.expressions[0].unalias()
    grouped.set("expressions", [exp.alias_(value.copy(), f"{KEY}0")])
    if not _grouped(body):      # (a plain list: its values grouped, each once)
        grouped.set("distinct", None)
        grouped = grouped.group_by(value.copy())
    keys = exp.select(exp.column(f"{KEY}0", table=alias)).from_(
        exp.Subquery(this=grouped, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return exp.In(this=part.this.copy(), query=exp.Subquery(this=keys))


def _valued_keys(subquery: exp.Subquery, counted: Collection[str], names: list[str], pending: str) -> _Keyed | None:
    """A scalar subquery's value per key and the column reading it, or None."""
    correlation = _correlation(subquery.this, counted, names) if _valued(subquery.this) else None
    if correlation is None:
        return None
    return _Keyed(correlation, [exp.alias_(subquery.this.expressions[0].unalias().copy(), VALUE)],
                  exp.column(VALUE, table=pending), VALUES, pending)


class _Correlation(NamedTuple):
    """A subquery's table, the (own, outer) sides of the equalities correlating it, its own conditions,
    and the one comparison correlating it besides, own side first."""

    table: exp.Table
    keys: list[tuple[exp.Expression, exp.Expression]]
    local: list[exp.Expression]
    compared: tuple[exp.Expression, type[exp.Binary], exp.Expression] | None


def _correlation(body: exp.Select, counted: Collection[str], names: list[str],
                 compared: bool = False) -> _Correlation | None:
    """How `body` is correlated: None where its table is not counted, or more than equalities (and, if
    `compared`, one comparison) correlate it."""
    table = body.args["from_"].this
    inner = table.alias_or_name.lower()
    if identifier(table) not in counted or names.count(inner) > 1:
        return None         # (a name the query around it uses too: its columns cannot be told apart)
    where = body.args.get("where")
    if where is None or any(not c.table for c in body.find_all(exp.Column)):
        return None
    keys, local, comparisons = [], [], []
    for conjunct in conjuncts(where.this):
        if conjunct.find(exp.Select) is not None:
            return None
        if all(_inner(c, inner) for c in conjunct.find_all(exp.Column)):
            local.append(conjunct.copy())
            continue
        kind = type(conjunct)
        if kind is not exp.EQ and not (compared and kind in _FLIPPED):
            return None
        sides = [conjunct.this, conjunct.expression]
        own = [s for s in sides if list(s.find_all(exp.Column)) and all(_inner(c, inner) for c in s.find_all(exp.Column))]
        if len(own) != 1 or any(_inner(c, inner) for s in sides if s is not own[0] for c in s.find_all(exp.Column)):
            return None
        outer = next(s for s in sides if s is not own[0])
        if kind is exp.EQ:
            keys.append((own[0], outer))
        else:
            comparisons.append((own[0], kind if own[0] is sides[0] else _FLIPPED[kind], outer))
    if not keys or len(comparisons) > 1 or \
            any(not _inner(c, inner) for e in body.expressions for c in e.find_all(exp.Column)):
        return None
    return _Correlation(table, keys, local, comparisons[0] if comparisons else None)


class _Keyed(NamedTuple):
    """A subquery read by its keys, before it is joined: what it computes per key, named, and the test or
    value read in its place (its columns of the table `pending`, named once joined)."""

    correlation: _Correlation
    outputs: list[exp.Expression]
    read: exp.Expression
    kind: str
    pending: str


def _alike(pending: list[_Keyed]) -> list[list[_Keyed]]:
    """The subqueries of one SELECT by what they group: the same table by the same keys, correlated with
    the same outer values (TPC-H Q21's EXISTS and NOT EXISTS over `lineitem` by order), computed by one
    aggregate — an aggregate read as a subquery is maintained, two are not."""
    alike: dict[tuple[str, frozenset[tuple[str, str]]], list[_Keyed]] = {}
    for keyed_ in pending:
        correlation = keyed_.correlation
        keys = frozenset((_renamed(own, correlation, KEY).sql(), outer.sql()) for own, outer in correlation.keys)
        alike.setdefault((identifier(correlation.table), keys), []).append(keyed_)
    return list(alike.values())


def _grouped_join(members: list[_Keyed], alias: str) -> exp.Join:
    """The correlated table grouped by its keys, each member's outputs per key (each over its own rows,
    a FILTER, where several share the group), LEFT JOINed on the equalities; each member's test or value
    reads its outputs there."""
    first = members[0].correlation
    inner = first.table.alias_or_name
    outputs, wheres = [], []
    for number, member in enumerate(members):
        local = [_renamed(c, member.correlation, inner) for c in member.correlation.local]
        wheres.append(exp.and_(*local) if local else None)
        for output in member.outputs:
            name = f"{output.alias}{number or ''}"
            value = _renamed(output.this, member.correlation, inner)
            if len(members) > 1 and local:
                value = value.transform(lambda n: exp.Filter(this=n.copy(), expression=exp.Where(this=exp.and_(
                    *(c.copy() for c in local)))) if isinstance(n, exp.AggFunc) else n)
            outputs.append(exp.alias_(value, name))
            for column in member.read.find_all(exp.Column):
                if column.table == member.pending and column.name == output.alias:
                    column.set("table", exp.to_identifier(alias))
                    column.set("this", exp.to_identifier(name))
    grouped = exp.select(*(exp.alias_(k.copy(), f"{KEY}{i}") for i, (k, _) in enumerate(first.keys)), *outputs) \
        .from_(first.table.copy())
    if all(wheres):
        grouped = grouped.where(exp.or_(*wheres) if len(wheres) > 1 else wheres[0])
    grouped = grouped.group_by(*(k.copy() for k, _ in first.keys))
    on = exp.and_(*(exp.EQ(this=exp.column(f"{KEY}{i}", table=alias), expression=outer.copy())
                    for i, (_, outer) in enumerate(first.keys)))
    return exp.Join(this=exp.Subquery(this=grouped, alias=exp.TableAlias(this=exp.to_identifier(alias))),
                    side="LEFT", on=on)


def _renamed(node: exp.Expression, correlation: _Correlation, inner: str) -> exp.Expression:
    """`node` (of a correlated subquery) with its own table's columns naming `inner` instead."""
    own = correlation.table.alias_or_name.lower()
    return node.copy().transform(lambda n: exp.Column(this=n.this.copy(), table=exp.to_identifier(inner))
                                 if isinstance(n, exp.Column) and _inner(n, own) else n)


def _inner(column: exp.Column, inner: str) -> bool:
    return column.table.lower() == inner
