"""Which rule maintains a query, and the SQL each rule writes.

- `Linear`: filter, project, computed columns, inner joins, LATERAL VIEW, UNION ALL of those. The
  change of the result is the query over the change (a join's by the bilinear rule: for each appended
  occurrence i, the occurrences before i read their new files, i its appended ones, those after their
  old files), and it is merged by adding files.
- `Aggregate`: one SELECT with GROUP BY (or a global aggregate) over a table or inner joins, with
  COUNT, SUM, AVG, MIN, MAX and HAVING. A hidden state keeps, per group, each aggregate's partial
  (AVG as a sum and a count); the change's partials are merged into it by group, and the result is
  the state's final projection with HAVING applied.
- `Recompute`: anything else, with the construct that stops it named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.relations import (DIALECT, Names, Unparsable, Version, identifier, parse, replaced, sql,
                                            tables)

# What a SELECT may carry and stay maintainable; any other clause names itself in the reason.
_LINEAR_ARGS = {"expressions", "from_", "joins", "where", "laterals", "kind", "hint"}
_AGGREGATE_ARGS = _LINEAR_ARGS | {"group", "having"}
_CLAUSES = {"distinct": "SELECT DISTINCT", "limit": "LIMIT", "offset": "OFFSET", "order": "ORDER BY",
            "qualify": "QUALIFY", "windows": "WINDOW", "with_": "WITH", "with": "WITH", "sort": "SORT BY",
            "cluster": "CLUSTER BY", "distribute": "DISTRIBUTE BY", "pivots": "PIVOT", "prewhere": "PREWHERE",
            "connect": "CONNECT BY", "match": "MATCH_RECOGNIZE", "into": "INTO", "locks": "FOR UPDATE",
            "sample": "TABLESAMPLE", "settings": "SETTINGS", "format": "FORMAT", "options": "OPTIONS"}
# Aggregates with a merge: the partial computed per group, and how partials combine.
_MERGES = {exp.Count: "SUM", exp.Sum: "SUM", exp.Min: "MIN", exp.Max: "MAX"}
STATE_KEY = "_g"          # the state's group key columns: _g0, _g1, ...
STATE_PARTIAL = "_a"      # its partials: _a0, _a1, ...


class NotMaintainable(Exception):
    """The construct that makes a query a full recompute."""


@dataclass(frozen=True)
class Recompute:
    reason: str

    def describe(self) -> str:
        return f"full: {self.reason}"


@dataclass(frozen=True)
class Linear:
    """The result only grows with the sources: its change is the query over their change."""

    branches: tuple[exp.Select, ...]           # UNION ALL branches (one for a plain SELECT)
    occurrences: tuple[tuple[str, ...], ...]   # per branch, the source each of its tables reads

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(s for branch in self.occurrences for s in branch)

    def describe(self) -> str:
        return "incremental (append the query over the new rows)"

    def full(self, names: Names) -> str:
        """The query with every occurrence reading its new files."""
        return " UNION ALL ".join(sql(replaced(branch, lambda j, start=start: names(start + j, Version.NEW)))
                                  for branch, start in self._starts())

    def delta(self, appended: set[str], names: Names) -> str | None:
        """The rows the result gains from the appended sources; None when none of them is read."""
        return _union(_terms(branch, occurrences, start, appended, names)
                      for (branch, start), occurrences in zip(self._starts(), self.occurrences, strict=True))

    def _starts(self) -> list[tuple[exp.Select, int]]:
        starts, at = [], 0
        for branch, occurrences in zip(self.branches, self.occurrences, strict=True):
            starts.append((branch, at))
            at += len(occurrences)
        return starts


@dataclass(frozen=True)
class Partial:
    expression: str          # over the aggregate's input
    merge: str               # SUM, MIN or MAX of the partials
    row: str                 # one input row's partial: the change's rows merge without a grouping of their own


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY with mergeable aggregates: a state per group, merged with the change's state."""

    select: exp.Select
    occurrences: tuple[str, ...]
    keys: tuple[str, ...]               # the group keys as written
    partials: tuple[Partial, ...]
    finals: tuple[str, ...]             # each output column over the state
    having: str | None                  # over the state
    averaged: tuple[int, ...]           # the partials that are sums of an AVG (a DECIMAL one is refused)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.occurrences

    def describe(self) -> str:
        by = ", ".join(self.keys) if self.keys else "the one group"
        return f"incremental (merge by {by})"

    def state(self, names: Names, version: Version = Version.NEW) -> str:
        """The state of the whole input: partials per group."""
        return sql(self._state_select(replaced(self.select, lambda i: names(i, version))))

    def merged(self, old_state: str, appended: set[str], names: Names) -> str | None:
        """The new state: the old one and the change's partials, merged by group."""
        terms = [self._state_select(term, rows=True)
                 for term in _term_trees(self.select, self.occurrences, 0, appended, names)]
        if not terms:
            return None
        keys = [f"{STATE_KEY}{i}" for i in range(len(self.keys))]
        columns = keys + [f"{p.merge}({STATE_PARTIAL}{j}) AS {STATE_PARTIAL}{j}" for j, p in enumerate(self.partials)]
        union = " UNION ALL ".join([f"SELECT * FROM {old_state}"] + [sql(t) for t in terms])
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        return f"SELECT {', '.join(columns)} FROM ({union}) AS merged{group}"

    def output(self, state: str, names: Sequence[str]) -> str:
        """The result from a state, its columns named `names` (the table's query columns)."""
        columns = ", ".join(f"{final} AS {_quoted(name)}" for final, name in zip(self.finals, names, strict=True))
        where = f" WHERE {self.having}" if self.having else ""
        return f"SELECT {columns} FROM {state}{where}"

    def _state_select(self, tree: exp.Select, rows: bool = False) -> exp.Select:
        """Partials per group; `rows`: per input row, ungrouped (the merge groups them with the old
        state in one aggregation, where Spark pre-aggregates them before the shuffle anyway)."""
        keys = [exp.alias_(k.copy(), f"{STATE_KEY}{i}") for i, k in enumerate(tree.args["group"].expressions)] \
            if tree.args.get("group") else []
        partials = [exp.alias_(parse_expression(p.row if rows else p.expression), f"{STATE_PARTIAL}{j}")
                    for j, p in enumerate(self.partials)]
        state = tree.copy()
        state.set("expressions", keys + partials)
        state.set("having", None)
        if rows:
            state.set("group", None)
        return state


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
        return self._ranked(sql(replaced(self.ranked, lambda i: names(i, version))))

    def merged(self, old_state: str, appended: set[str], names: Names) -> str | None:
        terms = [sql(term) for term in _term_trees(self.ranked, self.occurrences, 0, appended, names)]
        if not terms:
            return None
        columns = ", ".join(self._inputs())
        return self._ranked(" UNION ALL ".join([f"SELECT {columns} FROM {old_state}"] + terms))

    def output(self, state: str, names: Sequence[str]) -> str:
        outer = self.outer.copy()
        outer.find(exp.Table).set("this", exp.to_identifier(state))
        outer.set("expressions", [exp.alias_(e.this if isinstance(e, exp.Alias) else e, n, quoted=True)
                                  for e, n in zip(outer.expressions, names, strict=True)])
        return sql(outer)

    def _inputs(self) -> list[str]:
        return [_quoted(_output_name(e)) for e in self.ranked.expressions]

    def _ranked(self, candidates: str) -> str:
        return (f"SELECT * FROM (SELECT *, {sql(self.window)} AS {_quoted(self.rank)} FROM ({candidates}) AS cand) "
                f"AS ranked WHERE {_quoted(self.rank)} <= {self.limit}")


Rule = Linear | Aggregate | TopN | Recompute


def maintenance(query: str) -> Rule:
    """The rule that maintains `query` (its table names fully qualified), or why none does."""
    try:
        tree = parse(query)
        if isinstance(tree, exp.Union):
            return _linear_union(tree)
        if not isinstance(tree, exp.Select):
            raise NotMaintainable(f"a {type(tree).__name__.upper()} query")
        if tree.args.get("qualify") or (isinstance(tree.args.get("from_") and tree.args["from_"].this, exp.Subquery)
                                        and tree.find(exp.Window)):
            return _top_n(tree)
        if tree.args.get("group") or tree.find(exp.AggFunc):
            return _aggregate(tree)
        _check_select(tree, _LINEAR_ARGS)
        return Linear((tree,), (tuple(identifier(t) for t in tables(tree)),))
    except (Unparsable, NotMaintainable) as reason:
        return Recompute(str(reason))


# ----------------------------------------------------------------------- linear
def _linear_union(tree: exp.Union) -> Linear:
    branches: list[exp.Select] = []

    def collect(node: exp.Expression) -> None:
        if isinstance(node, exp.Union) and not isinstance(node, (exp.Except, exp.Intersect)):
            if node.args.get("distinct"):
                raise NotMaintainable("UNION (without ALL)")
            for arg in ("order", "limit", "offset"):
                if node.args.get(arg):
                    raise NotMaintainable(_CLAUSES[arg])
            collect(node.this)
            collect(node.expression)
        elif isinstance(node, exp.Select):
            if node.args.get("group") or node.find(exp.AggFunc):
                raise NotMaintainable("an aggregate under UNION ALL")
            _check_select(node, _LINEAR_ARGS)
            branches.append(node)
        else:
            raise NotMaintainable(type(node).__name__.upper())

    collect(tree)
    return Linear(tuple(branches), tuple(tuple(identifier(t) for t in tables(b)) for b in branches))


def _terms(branch: exp.Select, occurrences: tuple[str, ...], start: int, appended: set[str],
           names: Names) -> list[str]:
    return [sql(t) for t in _term_trees(branch, occurrences, start, appended, names)]


def _term_trees(branch: exp.Select, occurrences: tuple[str, ...], start: int, appended: set[str],
                names: Names) -> list[exp.Select]:
    """The bilinear rule: one term per appended occurrence."""
    terms = []
    for i, source in enumerate(occurrences):
        if source not in appended:
            continue
        terms.append(replaced(branch, lambda j, i=i: names(
            start + j, Version.NEW if j < i else Version.DELTA if j == i else Version.OLD)))
    return terms


def _union(parts) -> str | None:
    flat = [part for group in parts for part in group]
    return " UNION ALL ".join(flat) if flat else None


# ------------------------------------------------------------------------ top-N
_RANKS = (exp.RowNumber, exp.Rank, exp.DenseRank)
_WINDOW_INPUT = "_w"


def _top_n(tree: exp.Select) -> TopN:
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
        raise NotMaintainable(f"the window of {_call(window.this)} (a frame, or no ORDER BY)")
    limit = _limit(condition, rank)
    named = [e for e in inner.expressions if e is not windows[0]]
    if any(isinstance(e, exp.Star) or not _output_name(e) for e in named):
        raise NotMaintainable("an unnamed output of the ranked query")
    inputs = list(window.args.get("partition_by") or ()) + [o.this for o in window.args["order"].expressions]
    ranked = inner.copy()
    ranked.set("expressions", [e.copy() for e in named] +
               [exp.alias_(e.copy(), f"{_WINDOW_INPUT}{i}") for i, e in enumerate(inputs)])
    _check_select(ranked, _LINEAR_ARGS)
    over = window.copy()
    at = iter(range(len(inputs)))
    over.set("partition_by", [exp.column(f"{_WINDOW_INPUT}{next(at)}") for _ in window.args.get("partition_by") or ()])
    for ordered in over.args["order"].expressions:
        ordered.set("this", exp.column(f"{_WINDOW_INPUT}{next(at)}"))
    outer.args["from_"].this.replace(exp.Table(this=exp.to_identifier("state"), alias=outer.args["from_"].this.args.get("alias")))
    return TopN(ranked, over, rank, limit, outer, tuple(identifier(t) for t in tables(ranked)),
                tuple(sql(e) for e in window.args.get("partition_by") or ()))


def _check_outer(tree: exp.Select) -> None:
    for arg, value in tree.args.items():
        if value and arg not in {"expressions", "from_", "where", "kind", "hint"}:
            raise NotMaintainable(_CLAUSES.get(arg, arg.upper()))
    if tree.args.get("where") is None:
        raise NotMaintainable("a window function without a filter on its rank")
    for node in tree.expressions:
        if node.find(exp.AggFunc) or node.find(exp.Window):
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


# ---------------------------------------------------------------------- checks
def _check_select(tree: exp.Select, allowed: set[str]) -> None:
    for arg, value in tree.args.items():
        if value and arg not in allowed:
            raise NotMaintainable(_CLAUSES.get(arg, arg.upper()))
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
            raise NotMaintainable(f"the window function {_call(node.this)}")
        if isinstance(node, exp.Table) and node.args.get("sample"):
            raise NotMaintainable("TABLESAMPLE")
    if not tables(tree):
        raise NotMaintainable("a query that reads no table")


def _call(node: exp.Expression) -> str:
    return node.sql(dialect="spark").split("(")[0].upper() + "(…)"


# ------------------------------------------------------------------- aggregate
def _aggregate(tree: exp.Select) -> Aggregate:
    _check_select(tree, _AGGREGATE_ARGS)
    group = tree.args.get("group")
    if group is not None and (any(group.args.get(a) for a in set(group.args) - {"expressions"}) or
                              any(isinstance(k, (exp.Rollup, exp.Cube, exp.GroupingSets)) for k in group.expressions)):
        raise NotMaintainable("GROUPING SETS, ROLLUP or CUBE")
    keys = [_ordinal(k, tree) for k in group.expressions] if group is not None else []
    if group is not None:
        tree = tree.copy()
        tree.args["group"].set("expressions", [k.copy() for k in keys])
    for key in keys:
        if key.find(exp.AggFunc):
            raise NotMaintainable("an aggregate in GROUP BY")
    partials: list[Partial] = []
    averaged: list[int] = []
    calls: dict[str, str] = {}          # an aggregate's text → its final over the state

    def final(call: exp.AggFunc) -> str:
        text = sql(call)
        if text in calls:
            return calls[text]
        if isinstance(call, exp.Count) and isinstance(call.this, exp.Distinct):
            raise NotMaintainable("COUNT(DISTINCT …)")
        if call.find(exp.Distinct):
            raise NotMaintainable(f"{_call(call)} over DISTINCT values")
        if isinstance(call.parent, exp.Filter):
            raise NotMaintainable("an aggregate with FILTER")
        j = len(partials)
        if isinstance(call, exp.Avg):
            argument = sql(call.this)
            partials.append(Partial(f"SUM({argument})", "SUM", argument))
            partials.append(Partial(f"COUNT({argument})", "SUM", _counted(argument)))
            averaged.append(j)
            calls[text] = f"(CAST({STATE_PARTIAL}{j} AS DOUBLE) / {STATE_PARTIAL}{j + 1})"
        elif type(call) in _MERGES:
            if call.expressions:
                raise NotMaintainable(f"{_call(call)} of several columns")
            argument = sql(call.this)
            row = (_counted(argument) if not isinstance(call.this, exp.Star) else "CAST(1 AS BIGINT)") \
                if isinstance(call, exp.Count) else argument
            partials.append(Partial(text, _MERGES[type(call)], row))
            calls[text] = f"{STATE_PARTIAL}{j}"
        else:
            raise NotMaintainable(f"the aggregate {_call(call)}")
        return calls[text]

    finals = [_over_state(e.this if isinstance(e, exp.Alias) else e, keys, final) for e in tree.expressions]
    having = tree.args.get("having")
    having_sql = _over_state(having.this, keys, final) if having is not None else None
    return Aggregate(tree, tuple(identifier(t) for t in tables(tree)), tuple(sql(k) for k in keys),
                     tuple(partials), tuple(finals), having_sql, tuple(averaged))


def _counted(argument: str) -> str:
    """What one row adds to COUNT(argument)."""
    return f"CASE WHEN ({argument}) IS NULL THEN CAST(0 AS BIGINT) ELSE CAST(1 AS BIGINT) END"


def _ordinal(key: exp.Expression, tree: exp.Select) -> exp.Expression:
    """GROUP BY 2 is the second output expression (Spark's default)."""
    if isinstance(key, exp.Literal) and not key.is_string:
        position = int(key.name)
        if not 1 <= position <= len(tree.expressions):
            raise NotMaintainable(f"GROUP BY {position}")
        chosen = tree.expressions[position - 1]
        return (chosen.this if isinstance(chosen, exp.Alias) else chosen).copy()
    return key


def _over_state(expression: exp.Expression, keys: list[exp.Expression],
                final: Callable[[exp.AggFunc], str]) -> str:
    """An output expression rewritten over the state: aggregates by their finals, key expressions by
    their key columns. A column left over is neither: Spark's analysis of the result refuses it."""
    by_text = {_key_text(k): f"{STATE_KEY}{i}" for i, k in enumerate(keys)}
    by_name = {}
    for i, k in enumerate(keys):
        if isinstance(k, exp.Column):
            by_name.setdefault(k.name.lower(), []).append(f"{STATE_KEY}{i}")

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.AggFunc):
            return parse_expression(final(node))
        found = by_text.get(_key_text(node))
        if found is None and isinstance(node, exp.Column) and len(by_name.get(node.name.lower(), ())) == 1:
            found = by_name[node.name.lower()][0]
        return exp.column(found) if found else node

    return sql(expression.copy().transform(swap))


def _key_text(node: exp.Expression) -> str:
    return sql(node).lower()


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def parse_expression(text: str) -> exp.Expression:
    """An expression this module wrote, read back (it always parses)."""
    return exp.maybe_parse(text, dialect=DIALECT)
