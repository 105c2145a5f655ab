"""What a maintainable SELECT may hold: the clauses and joins the rules know, named when they do not."""

from __future__ import annotations

from sqlglot import exp

from mt_magic.incremental.occurrences import DIALECT, tables

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
    for arg, value in tree.args.items():
        if value and arg not in allowed:
            raise NotMaintainable(CLAUSES.get(arg, arg.upper()))
    for join in tree.args.get("joins") or ():
        side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        if side or kind not in ("", "INNER", "CROSS"):
            raise NotMaintainable(f"{' '.join(w for w in (side, kind) if w)} JOIN")
        if not isinstance(join.this, exp.Table):
            raise NotMaintainable("a subquery in FROM")
    from_ = tree.args.get("from_")
    if from_ is None:
        raise NotMaintainable("a query without FROM")
    if not isinstance(from_.this, exp.Table):
        raise NotMaintainable("a subquery in FROM" if isinstance(from_.this, exp.Subquery) else
                              f"{type(from_.this).__name__.upper()} in FROM")
    for node in tree.walk():
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.Select) and node is not tree):
            raise NotMaintainable("a subquery")
        if isinstance(node, exp.Window):
            raise NotMaintainable(f"the window function {call_name(node.this)}")
        if isinstance(node, exp.Table) and node.args.get("sample"):
            raise NotMaintainable("TABLESAMPLE")
    if not tables(tree):
        raise NotMaintainable("a query that reads no table")


def call_name(node: exp.Expression) -> str:
    return node.sql(dialect="spark").split("(")[0].upper() + "(…)"


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def parse_expression(text: str) -> exp.Expression:
    """An expression this module wrote, read back (it always parses)."""
    return exp.maybe_parse(text, dialect=DIALECT)
