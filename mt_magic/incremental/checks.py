"""What a maintainable SELECT may hold: the clauses and joins the rules know, named when they do not."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sqlglot import exp

from mt_magic.incremental.occurrences import DIALECT, own, subquery_expression, tables

# What a SELECT may carry and stay maintainable; any other clause names itself in the reason.
LINEAR_ARGS = {"expressions", "from_", "joins", "where", "laterals", "kind", "hint"}
AGGREGATE_ARGS = LINEAR_ARGS | {"group", "having"}
CLAUSES = {"distinct": "SELECT DISTINCT", "limit": "LIMIT", "offset": "OFFSET", "order": "ORDER BY",
           "qualify": "QUALIFY", "windows": "WINDOW", "with_": "WITH", "with": "WITH", "sort": "SORT BY",
           "cluster": "CLUSTER BY", "distribute": "DISTRIBUTE BY", "pivots": "PIVOT", "prewhere": "PREWHERE",
           "connect": "CONNECT BY", "match": "MATCH_RECOGNIZE", "into": "INTO", "locks": "FOR UPDATE",
           "sample": "TABLESAMPLE", "settings": "SETTINGS", "format": "FORMAT", "options": "OPTIONS"}


class NotMaintainable(Exception):
    """The construct that makes a query a full recompute."""


def check_select(tree: exp.Select, allowed: set[str]) -> None:
    """Refuses what `tree` holds beyond `allowed` clauses, inner and left joins and linear relations: a
    subquery (a CTE, inlined) in FROM or JOIN is a relation when it is itself linear — project, filter,
    inner joins, UNION ALL —, for then the query stays linear in each table it reads, however nested. A
    LEFT JOIN (outer, semi or anti) is linear in its left side while its right side holds still
    (`held_still`), a RIGHT JOIN in its right side while its left holds still, a FULL JOIN while both
    hold still (an append to either maintained: `monotone`); so is a WHERE in the
    tables it filters while the tables its subqueries read (EXISTS, IN, a scalar subquery: semi- and
    anti-joins; aggregating or not) hold still — each row then passes or not as it did —, and a linear
    SELECT's scalar subqueries likewise: each row's value is what it was."""
    for arg, value in tree.args.items():
        if value and arg not in allowed:
            raise NotMaintainable(CLAUSES.get(arg, arg.upper()))
    for join in tree.args.get("joins") or ():
        if join_words(join) not in _JOINS:
            raise NotMaintainable(f"{join_words(join)} JOIN")
    from_ = tree.args.get("from_")
    if from_ is None:
        if isinstance(tree.parent, exp.Union) and all(isinstance(e.unalias(), (exp.Literal, exp.Null))
                                                      for e in tree.expressions):
            return      # a UNION ALL's side of constants: rows no change moves
        raise NotMaintainable("a query without FROM")
    relations = [from_.this, *(join.this for join in tree.args.get("joins") or ())]
    for relation in relations:
        _check_relation(relation)
    nested = {id(r) for r in relations if isinstance(r, exp.Subquery)}
    where = tree.args.get("where")
    scopes = [where] if where is not None else []
    if "group" not in allowed:      # a linear SELECT's values (an aggregate's are rewritten over its state)
        scopes.extend(tree.expressions)
    valued = {id(q) for scope in scopes for q in _subqueries(scope)}
    for node in tree.walk(prune=lambda n: id(n) in nested or id(n) in valued):
        if id(node) in nested or id(node) in valued:
            continue
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.Select) and node is not tree):
            raise NotMaintainable("a subquery")
        if isinstance(node, exp.Window):
            raise NotMaintainable(f"the window function {call_name(node.this)}")
        if isinstance(node, exp.Table) and node.args.get("sample"):
            raise NotMaintainable("TABLESAMPLE")
    if not tables(tree):
        raise NotMaintainable("a query that reads no table")


def _check_relation(relation: exp.Expression) -> None:
    if isinstance(relation, exp.Subquery):
        linear_branches(relation.this, "an aggregate in a subquery")
    elif not isinstance(relation, exp.Table):
        raise NotMaintainable(f"{type(relation).__name__.upper()} in FROM")


def linear_branches(body: exp.Expression, aggregated: str) -> list[exp.Select]:
    """The linear SELECTs a query is made of (a UNION ALL of them, or one), each checked; `aggregated`:
    the reason an aggregate among them is given."""
    if isinstance(body, exp.Subquery):
        return linear_branches(body.this, aggregated)
    if isinstance(body, exp.Union) and not isinstance(body, (exp.Except, exp.Intersect)):
        if body.args.get("distinct"):
            raise NotMaintainable("UNION (without ALL)")
        for arg in ("order", "limit", "offset"):
            if body.args.get(arg):
                raise NotMaintainable(CLAUSES[arg])
        return linear_branches(body.this, aggregated) + linear_branches(body.expression, aggregated)
    if isinstance(body, exp.Select):
        if body.args.get("group") or own(body, exp.AggFunc):
            raise NotMaintainable(aggregated)
        check_select(body, LINEAR_ARGS)
        return [body]
    raise NotMaintainable(f"{type(body).__name__.upper()} in FROM")


def _subqueries(scope: exp.Expression) -> list[exp.Expression]:
    """The outermost subquery expressions of a WHERE or an output (EXISTS, IN, scalar)."""
    return [node for node in scope.walk(prune=subquery_expression) if subquery_expression(node)]


HELD_LEFT = "on the right of a LEFT JOIN"
HELD_FILTER = "in a subquery of WHERE"
HELD_VALUE = "in a subquery of SELECT"
IN_SUBQUERY = (HELD_FILTER, HELD_VALUE)
# The joins the rules know, by Spark's words: inner ones, and those linear in one side (`held_still`).
_JOINS = {"", "INNER", "CROSS", "LEFT", "LEFT OUTER", "LEFT SEMI", "LEFT ANTI", "SEMI", "ANTI", "RIGHT",
          "RIGHT OUTER", "FULL", "FULL OUTER"}
_PADDING = {"LEFT": ("LEFT", "LEFT OUTER", "FULL", "FULL OUTER"),      # the joins that pad a side's rows
            "RIGHT": ("RIGHT", "RIGHT OUTER", "FULL", "FULL OUTER")}
_SEMI = ("LEFT SEMI", "SEMI", "LEFT ANTI", "ANTI")        # an EXISTS (NOT EXISTS) of its right side


def join_words(join: exp.Join) -> str:
    """A join's kind as Spark spells it ('LEFT SEMI', 'RIGHT OUTER', '' for an inner join)."""
    return " ".join(w for w in ((join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()) if w)


def held_still(tree: exp.Expression) -> dict[int, str]:
    """The occurrences whose change is not the query over their change, and where they are read: on the
    right of a LEFT JOIN (a change can turn rows padded with NULLs into matched ones; of a semi- or
    anti-join, let old rows pass or stop them), on the left of a RIGHT JOIN (the same, mirrored), or in
    a subquery of WHERE (a change can let old rows pass, or stop them) or of SELECT (a change can change
    old rows' values). A rewrite of one recomputes; an append to one is maintained where it moves each
    row one way (`monotone`): by rows added, or taken away where the rule's state subtracts."""
    held = _joined(tree)
    found = {}
    for i, table in enumerate(tables(tree)):
        where = _valued(table, tree) or held.get(id(table))
        if where is not None:
            found[i] = where
    return found


def _joined(tree: exp.Expression, but: exp.Join | None = None) -> dict[int, str]:
    """The tables (by id) read where a join (`but` one) holds them still, and where (`held_still`)."""
    held: dict[int, str] = {}
    for join in tree.find_all(exp.Join):
        if join is but:
            continue
        words = join_words(join)
        if words.startswith(("LEFT", "SEMI", "ANTI")):
            where = HELD_LEFT if words in ("LEFT", "LEFT OUTER") else \
                f"on the right of a LEFT {words.split()[-1]} JOIN"     # Spark's SEMI JOIN is a LEFT SEMI one
            held.update({id(t): where for t in join.this.find_all(exp.Table)})
        elif words.startswith(("RIGHT", "FULL")):
            scope = join.parent
            joins = scope.args.get("joins") or []
            left = [scope.args["from_"].this, *(j.this for j in joins[:joins.index(join)])]
            where = "on the left of a RIGHT JOIN" if words.startswith("RIGHT") else "in a FULL OUTER JOIN"
            sides = left if words.startswith("RIGHT") else [*left, join.this]
            held.update({id(t): where for side in sides for t in side.find_all(exp.Table)})
    return held


class Appended(Enum):
    """How an append to an occurrence held still changes the result: the terms `linear.term_trees`
    writes for it."""

    PASSES = "passes"       # read in an EXISTS or IN conjunct: the old rows it lets pass are added
    STOPS = "stops"         # in a NOT EXISTS or NOT IN conjunct: the old rows it stops are taken away
    MATCHES = "matches"     # a side of an outer join the other side's rows are padded for: the rows it
    # matches are added, the other side's rows padded with NULLs they replace taken away


@dataclass(frozen=True)
class Monotone:
    """A held occurrence an append to which is maintained, and the node that reads it."""

    appended: Appended
    node: exp.Expression    # the EXISTS or IN, the NOT over one, or the outer join


def monotone(tree: exp.Expression) -> dict[int, Monotone]:
    """The held occurrences an append to which changes the result in one direction per row: the one table
    of a subquery that is an EXISTS or IN conjunct of a WHERE (of `tree`, or of a query it reads as a
    relation), the subquery filtering and projecting that table alone — a row appended to it can let an
    old row pass and stops none (an IN's NULL is not TRUE, as its FALSE) —, under NOT the reverse (so of a
    LEFT SEMI or ANTI JOIN of one table, its SELECT's last join), and the one table on the right of a
    LEFT or FULL JOIN that is the last join of its SELECT, or on the left
    of a RIGHT or FULL JOIN that is its only one (an appended row turns the other side's padded rows it
    matches into matched ones). A rewrite, which can do both, recomputes."""
    index = {id(t): i for i, t in enumerate(tables(tree))}
    joined = _joined(tree)
    found: dict[int, Monotone] = {}
    for where in own(tree, exp.Where):
        for conjunct in conjuncts(where.this):
            negated = isinstance(conjunct, exp.Not)
            test = conjunct.this.unnest() if negated else conjunct
            body = test.this if isinstance(test, exp.Exists) else test.args.get("query") \
                if isinstance(test, exp.In) else None
            body = body.this if isinstance(body, exp.Subquery) else body
            if _one_table(body) and not (isinstance(test, exp.In) and len(body.expressions) != 1):
                table = tables(body)[0]
                if id(table) not in joined:
                    found[index[id(table)]] = Monotone(Appended.STOPS if negated else Appended.PASSES, conjunct)
    for scope in own(tree, exp.Select):
        joins = scope.args.get("joins") or []
        if not joins or joins[-1].args.get("on") is None:
            continue
        last, first = joins[-1], scope.args["from_"].this
        if join_words(last) in _SEMI and isinstance(last.this, exp.Table) and id(last.this) not in _joined(tree, last):
            anti = "ANTI" in join_words(last)
            found[index[id(last.this)]] = Monotone(Appended.STOPS if anti else Appended.PASSES, last)
            continue
        sides = [(last.this, "LEFT")] + ([(first, "RIGHT")] if len(joins) == 1 else [])
        for side, padded in sides:      # (the side whose rows are padded for it)
            if join_words(last) in _PADDING[padded] and isinstance(side, exp.Table) and \
                    id(side) not in _joined(tree, but=last):
                found[index[id(side)]] = Monotone(Appended.MATCHES, last)
    return found


def conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    """The parts of a condition joined by AND (itself, when it is not an AND)."""
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _one_table(body: exp.Expression | None) -> bool:
    """A SELECT that filters and projects one table, with nothing else in it (a row of it passes or not
    whatever the table's other rows)."""
    if not isinstance(body, exp.Select) or any(v and arg not in _FILTERING for arg, v in body.args.items()):
        return False
    relation = body.args["from_"].this if body.args.get("from_") else None
    return isinstance(relation, exp.Table) and not relation.args.get("sample") and not any(
        node is not body and isinstance(node, (exp.Select, exp.Subquery, exp.Exists, exp.AggFunc, exp.Window))
        for node in body.walk())


_FILTERING = {"expressions", "from_", "where", "kind", "hint"}


def _valued(table: exp.Table, tree: exp.Expression) -> str | None:
    """Where a table read in a subquery expression of `tree` is read: in a subquery of WHERE or of
    SELECT (the outermost one's place); None for a table read as a relation."""
    outermost, node = None, table
    while node is not tree and node.parent is not None:
        if subquery_expression(node):
            outermost = node
        node = node.parent
    if outermost is None:
        return None
    return HELD_FILTER if isinstance(outermost.find_ancestor(exp.Where, exp.Select), exp.Where) else HELD_VALUE


def by_outputs(order: exp.Order, tree: exp.Select) -> list[exp.Ordered]:
    """ORDER BY's items with a position or an output's alias (as Spark resolves them first) replaced by
    the output expression they name (copies)."""
    outputs = [e.this if isinstance(e, exp.Alias) else e for e in tree.expressions]
    aliases = {e.alias.lower(): e.this for e in tree.expressions if isinstance(e, exp.Alias)}
    items = []
    for ordered in order.expressions:
        node = ordered.this
        if isinstance(node, exp.Literal) and not node.is_string:
            if not 1 <= int(node.name) <= len(outputs):
                raise NotMaintainable(f"ORDER BY {node.name}")
            node = outputs[int(node.name) - 1]
        elif isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            node = aliases[node.name.lower()]
        item = ordered.copy()
        item.set("this", node.copy())
        items.append(item)
    return items


def call_name(node: exp.Expression) -> str:
    return node.sql(dialect="spark").split("(")[0].upper() + "(…)"


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def parse_expression(text: str) -> exp.Expression:
    """An expression this module wrote, read back (it always parses)."""
    return exp.maybe_parse(text, dialect=DIALECT)
