"""Top-N per key: ROW_NUMBER, RANK or DENSE_RANK ≤ N, in a subquery or with QUALIFY (and ORDER BY …
LIMIT over no aggregate, the top-N of the whole result: `global_top`). The state holds the ranked rows
within N; the change's rows are ranked with them (inserts only: a row that left the first N never
returns), and the result is the outer query over the state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.checks import (CLAUSES, LINEAR_ARGS, NotMaintainable, by_outputs, call_name, check_select,
                                         quoted)
from mt_magic.incremental.occurrences import Names, Version, identifier, own, replaced, sql, tables
from mt_magic.incremental.linear import added_trees, term_trees

@dataclass(frozen=True)
class TopN:
    """The first N rows per key (ROW_NUMBER, RANK or DENSE_RANK ≤ N): a state of the ranked rows within
    N, re-ranked with the change's rows (inserts only: a row that left the first N never returns), and
    the outer query over it."""

    ranked: exp.Select             # the inner query, its window's inputs as columns _w0, _w1, ...
    window: exp.Window             # over those columns
    rank: str                      # the rank column's name
    limit: int
    outer: exp.Select              # the outer query, reading the state in place of the ranked rows
    occurrences: tuple[str, ...]
    keys: tuple[str, ...]          # PARTITION BY as written

    @property
    def sources(self) -> tuple[str, ...]:
        return self.occurrences

    def describe(self) -> str:
        by = ", ".join(self.keys) or "the whole result"
        return f"incremental (re-rank the first {self.limit} per {by} with the new rows)"

    def state(self, names: Names, version: Version = Version.NEW) -> str:
        """The ranked rows within N of the whole input."""
        return self.within(sql(replaced(self.ranked, lambda i: names(i, version))))

    def merged(self, old_state: str, appended: set[str], names: Names) -> str | None:
        terms = [sql(term) for term in added_trees(term_trees(self.ranked, self.occurrences, 0, appended, names))]
        if not terms:
            return None
        columns = ", ".join(self.state_columns)
        return self.within(" UNION ALL ".join([f"SELECT {columns} FROM {old_state}"] + terms))

    def output(self, state: str, names: Sequence[str], reading: Names | None = None) -> str:
        """The result from a state, its columns named `names` (it reads no table beside its state:
        `reading` is the aggregate's, whose query above may)."""
        outer = self.outer.copy()
        outer.find(exp.Table).set("this", exp.to_identifier(state))
        outer.set("expressions", [exp.alias_(e.this if isinstance(e, exp.Alias) else e, n, quoted=True)
                                  for e, n in zip(outer.expressions, names, strict=True)])
        return sql(outer)

    @property
    def state_names(self) -> list[str]:
        """The ranked rows' columns but the rank (computed again wherever rows are merged)."""
        return [_output_name(e) for e in self.ranked.expressions]

    @property
    def state_columns(self) -> list[str]:
        return [quoted(name) for name in self.state_names]

    def within(self, candidates: str, by: str | None = None) -> str:
        """The candidates' rows within N per key (`by`: and per value of that column too), ranked."""
        window = self.window
        if by is not None:
            window = window.copy()
            window.set("partition_by", [exp.column(by), *(p.copy() for p in window.args.get("partition_by") or ())])
        return (f"SELECT * FROM (SELECT *, {sql(window)} AS {quoted(self.rank)} FROM ({candidates}) AS cand) "
                f"AS ranked WHERE {quoted(self.rank)} <= {self.limit}")


_RANKS = (exp.RowNumber, exp.Rank, exp.DenseRank)
GLOBAL_RANK = "mt_rank"        # the rank of a global top-N (ORDER BY … LIMIT)
_WINDOW_INPUT = "_w"


def top_n(tree: exp.Select) -> TopN:
    """SELECT … FROM (SELECT …, RANK() OVER (…) AS r FROM …) t WHERE r <= N, or the same with QUALIFY."""
    if tree.args.get("qualify"):
        inner = tree.copy()
        condition = inner.args["qualify"].this
        inner.set("qualify", None)
        outer = exp.select(*[exp.column(_output_name(e)) for e in inner.expressions]).from_(
            exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("ranked"))))
    else:
        _check_outer(tree)
        outer, inner, condition = tree.copy(), tree.args["from_"].this.this.copy(), tree.args["where"].this
    windows = [e for e in inner.expressions if isinstance(e, exp.Alias) and isinstance(e.this, exp.Window)]
    if len(windows) != 1 or not isinstance(windows[0].this.this, _RANKS):
        raise NotMaintainable("a window function that is not one ROW_NUMBER, RANK or DENSE_RANK")
    window, rank = windows[0].this, windows[0].alias
    if window.args.get("spec") or not window.args.get("order"):
        raise NotMaintainable(f"the window of {call_name(window.this)} (a frame, or no ORDER BY)")
    limit = _limit(condition, rank)
    named = [e for e in inner.expressions if e is not windows[0]]
    if any(isinstance(e, exp.Star) or not _output_name(e) for e in named):
        raise NotMaintainable("an unnamed output of the ranked query")
    inputs = list(window.args.get("partition_by") or ()) + [o.this for o in window.args["order"].expressions]
    ranked = inner.copy()
    ranked.set("expressions", [e.copy() for e in named] +
               [exp.alias_(e.copy(), f"{_WINDOW_INPUT}{i}") for i, e in enumerate(inputs)])
    check_select(ranked, LINEAR_ARGS)
    over = window.copy()
    at = iter(range(len(inputs)))
    over.set("partition_by", [exp.column(f"{_WINDOW_INPUT}{next(at)}") for _ in window.args.get("partition_by") or ()])
    for ordered in over.args["order"].expressions:
        ordered.set("this", exp.column(f"{_WINDOW_INPUT}{next(at)}"))
    subquery = outer.args["from_"].this
    subquery.replace(exp.Table(this=exp.to_identifier("state"), alias=subquery.args.get("alias")))
    return TopN(ranked, over, rank, limit, outer, tuple(identifier(t) for t in tables(ranked)),
                tuple(sql(e) for e in window.args.get("partition_by") or ()))


def global_top(tree: exp.Select) -> exp.Select:
    """`SELECT … ORDER BY o LIMIT n` over no aggregate as the top-N it is: ROW_NUMBER() OVER (ORDER BY o)
    <= n, in a subquery (rows tied on o are taken in any order, as LIMIT takes them)."""
    limit = tree.args["limit"]
    if tree.args.get("offset") or limit.args.get("offset"):
        raise NotMaintainable("OFFSET")
    count = limit.expression
    if not (isinstance(count, exp.Literal) and not count.is_string and count.name.isdigit()):
        raise NotMaintainable("a LIMIT that is not a number")
    items = by_outputs(tree.args["order"], tree)
    ranked = tree.copy()
    for arg in ("order", "limit"):
        ranked.set(arg, None)
    if any(not _output_name(e) or e.is_star for e in tree.expressions):
        raise NotMaintainable("an unnamed output of the ranked query")
    window = exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=items), over="OVER")
    ranked.set("expressions", [*ranked.expressions, exp.alias_(window, GLOBAL_RANK)])
    return exp.select(*[exp.column(exp.to_identifier(_output_name(e), quoted=True)) for e in tree.expressions]) \
        .from_(exp.Subquery(this=ranked, alias=exp.TableAlias(this=exp.to_identifier("ranked")))) \
        .where(exp.LTE(this=exp.column(GLOBAL_RANK), expression=count.copy()))


def _check_outer(tree: exp.Select) -> None:
    for arg, value in tree.args.items():
        if value and arg not in {"expressions", "from_", "where", "kind", "hint"}:
            raise NotMaintainable(CLAUSES.get(arg, arg.upper()))
    if tree.args.get("where") is None:
        raise NotMaintainable("a window function without a filter on its rank")
    for node in tree.expressions:
        if own(node, exp.AggFunc, exp.Window):
            raise NotMaintainable("an aggregate or window over the ranked rows")


def _limit(condition: exp.Expression, rank: str) -> int:
    """N of `rank <= N`, `rank < N` or `rank = 1` (also written the other way round)."""
    left, right = condition.this, condition.expression if isinstance(condition, exp.Binary) else None
    flipped = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.EQ: exp.EQ}
    kind = type(condition)
    if isinstance(left, exp.Literal) and type(condition) in flipped:
        left, right, kind = right, left, flipped[type(condition)]
    if not (isinstance(left, exp.Column) and left.name.lower() == rank.lower() and isinstance(right, exp.Literal)
            and not right.is_string and right.name.isdigit()):
        raise NotMaintainable(f"a filter on the rank other than {rank} <= N")
    n = int(right.name)
    if kind is exp.LTE:
        return n
    if kind is exp.LT:
        return n - 1
    if kind is exp.EQ and n == 1:
        return 1
    raise NotMaintainable(f"a filter on the rank other than {rank} <= N")


def _output_name(expression: exp.Expression) -> str:
    return expression.alias_or_name if isinstance(expression, (exp.Alias, exp.Column)) else ""
