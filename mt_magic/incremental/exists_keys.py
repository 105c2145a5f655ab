"""An EXISTS or NOT EXISTS over a large source, read as a LEFT JOIN with that source's keys counted.

`WHERE NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)` (TPC-H Q22's customers without
orders) is `LEFT JOIN (SELECT o_custkey AS mt_k0, COUNT(*) AS mt_rows FROM orders GROUP BY o_custkey)
AS mt_exists0 ON mt_exists0.mt_k0 = c_custkey WHERE mt_exists0.mt_rows IS NULL`: a key with rows exists,
one without is NULL on the padded side, and a NULL key matches no row either way. The counted keys are
an aggregate read as a subquery (`nested`): kept per partition of their source, an append adds to
them, a rewritten partition's counts are retracted (a key whose rows all left is gone), and the query
around them is computed again over them and its own tables — which hold still. So the rewrite is asked
for (`counted`) only where the source in the EXISTS is what changes and the tables around it do not
(a partitioned fact table tested against from unpartitioned ones); the other way round the outer
rows' own change is maintained instead (`checks.monotone`)."""

from __future__ import annotations

from collections.abc import Collection

from sqlglot import exp

from mt_magic.incremental.checks import conjuncts
from mt_magic.incremental.occurrences import identifier, parse, sql, tables

KEYS = "mt_exists"      # the k-th counted keys' alias: mt_exists0, mt_exists1, ...
KEY = "mt_k"            # their key columns: mt_k0, mt_k1, ...
ROWS = "mt_rows"        # each key's rows
_PLAIN = ("joins", "group", "having", "limit", "qualify", "order", "distinct", "laterals", "with_", "windows")


def exists_sources(query: str) -> set[str]:
    """The sources read only by EXISTS tests of one table each (what `keyed` could count)."""
    tree = parse(query)
    tested = [t for e in tree.find_all(exp.Exists) if _alone(e.this) for t in tables(e)]
    elsewhere = {identifier(t) for t in tables(tree) if not any(t is u for u in tested)}
    return {identifier(t) for t in tested} - elsewhere


def keyed(query: str, counted: Collection[str]) -> str:
    """`query` (its columns naming their tables) with each [NOT] EXISTS conjunct over one source of
    `counted`, correlated by equalities alone, read as its keys counted; as it is where none is."""
    tree = parse(query)
    names = [t.alias_or_name.lower() for t in tables(tree)]
    found = 0
    for select in list(tree.find_all(exp.Select)):
        where = select.args.get("where")
        if where is None or any(not (j.args.get("on") or j.args.get("using")) for j in select.args.get("joins") or []):
            continue        # (a comma join: a JOIN after it sees only its last relation)
        parts = []
        for part in conjuncts(where.this):
            rewritten = _counted_keys(part, counted, names, f"{KEYS}{found}")
            if rewritten is None:
                parts.append(part)
                continue
            join, test = rewritten
            select.set("joins", [*(select.args.get("joins") or []), join])
            parts.append(test)
            found += 1
        where.set("this", exp.and_(*parts))
    return sql(tree) if found else query


def _alone(body: exp.Expression) -> bool:
    """A SELECT of one table filtered, nothing else (no join, group, limit …)."""
    source = body.args.get("from_") if isinstance(body, exp.Select) else None
    return source is not None and isinstance(source.this, exp.Table) and not any(body.args.get(a) for a in _PLAIN)


def _counted_keys(part: exp.Expression, counted: Collection[str], names: list[str],
                  alias: str) -> tuple[exp.Join, exp.Expression] | None:
    """The LEFT JOIN of the keys an [NOT] EXISTS conjunct tests and the test of its counted rows, or None
    where it is not one over a counted source correlated by equalities alone."""
    negated = isinstance(part, exp.Not)
    node = part.this if negated else part
    if isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Exists) or not _alone(node.this):
        return None
    body, table = node.this, node.this.args["from_"].this
    inner = table.alias_or_name.lower()
    if identifier(table) not in counted or names.count(inner) > 1:
        return None         # (a name the query around it uses too: its columns cannot be told apart)
    where = body.args.get("where")
    if where is None or any(not c.table for c in where.find_all(exp.Column)):
        return None
    keys, local = [], []
    for conjunct in conjuncts(where.this):
        if conjunct.find(exp.Select) is not None:
            return None
        if all(_inner(c, inner) for c in conjunct.find_all(exp.Column)):
            local.append(conjunct.copy())
            continue
        if not isinstance(conjunct, exp.EQ):
            return None
        sides = [conjunct.this, conjunct.expression]
        own = [s for s in sides if list(s.find_all(exp.Column)) and all(_inner(c, inner) for c in s.find_all(exp.Column))]
        if len(own) != 1 or any(_inner(c, inner) for s in sides if s is not own[0] for c in s.find_all(exp.Column)):
            return None
        keys.append((own[0], next(s for s in sides if s is not own[0])))
    if not keys:
        return None
    grouped = exp.select(*(exp.alias_(k.copy(), f"{KEY}{i}") for i, (k, _) in enumerate(keys)),
                         exp.alias_(exp.Count(this=exp.Star()), ROWS)).from_(table.copy())
    if local:
        grouped = grouped.where(exp.and_(*local))
    grouped = grouped.group_by(*(k.copy() for k, _ in keys))
    on = exp.and_(*(exp.EQ(this=exp.column(f"{KEY}{i}", table=alias), expression=outer.copy())
                    for i, (_, outer) in enumerate(keys)))
    join = exp.Join(this=exp.Subquery(this=grouped, alias=exp.TableAlias(this=exp.to_identifier(alias))),
                    side="LEFT", on=on)
    test = exp.Is(this=exp.column(ROWS, table=alias), expression=exp.Null())
    return join, test if negated else exp.Not(this=test)


def _inner(column: exp.Column, inner: str) -> bool:
    return column.table.lower() == inner
