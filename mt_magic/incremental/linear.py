"""Linear queries: filter, project, computed columns, inner joins, LATERAL VIEW, UNION ALL of those. The
change of the result is the query over the change (a join's by the bilinear rule: for each appended
occurrence i, the occurrences before i read their new files, i its appended ones, those after their
old files), merged by adding files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.checks import Appended, join_words, linear_branches, monotone
from mt_magic.incremental.occurrences import (DIALECT, Names, Version, identifier, own, replaced, sql,
                                              subquery_expression, tables)


@dataclass(frozen=True)
class Linear:
    """The result only grows with the sources: its change is the query over their change."""

    branches: tuple[exp.Select, ...]           # UNION ALL branches (one for a plain SELECT)
    occurrences: tuple[tuple[str, ...], ...]   # per branch, the source each of its tables reads

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(s for branch in self.occurrences for s in branch)

    @property
    def joins(self) -> bool:
        """A branch reads several tables: its change is computed by joins."""
        return any(len(branch) > 1 for branch in self.occurrences)

    def describe(self) -> str:
        return "incremental (append the query over the new rows)"

    def full(self, names: Names) -> str:
        """The query with every occurrence reading its new files."""
        return " UNION ALL ".join(sql(replaced(branch, lambda j, start=start: names(start + j, Version.NEW)))
                                  for branch, start in self.starts())

    def delta(self, appended: set[str], names: Names) -> tuple[str | None, str | None]:
        """The rows the result gains from the appended sources, and those it loses (stopped by a NOT
        EXISTS or NOT IN, padded rows an outer join now matches); None where there are none."""
        return signed(self.terms(appended, names))

    def terms(self, appended: set[str], names: Names) -> list[tuple[Term, int]]:
        """The bilinear rule's terms of every branch, each with its branch's first occurrence."""
        return [(term, start) for (branch, start), occurrences in zip(self.starts(), self.occurrences, strict=True)
                for term in term_trees(branch, occurrences, start, appended, names)]

    def starts(self) -> list[tuple[exp.Select, int]]:
        """Each branch, and the index of its first occurrence among the query's."""
        starts, at = [], 0
        for branch, occurrences in zip(self.branches, self.occurrences, strict=True):
            starts.append((branch, at))
            at += len(occurrences)
        return starts


def linear_union(tree: exp.Union) -> Linear:
    branches = linear_branches(tree, "an aggregate under UNION ALL")
    return Linear(tuple(branches), tuple(tuple(identifier(t) for t in tables(b)) for b in branches))


@dataclass(frozen=True)
class Term:
    """One term of the change: rows gained, or (`sign` −1) rows lost — stopped by a NOT EXISTS or NOT IN,
    padded rows an outer join now matches —, which a rule whose state subtracts takes away."""

    tree: exp.Select
    sign: int = 1


def term_trees(branch: exp.Select, occurrences: tuple[str, ...], start: int, appended: set[str],
               names: Names) -> list[Term]:
    """The bilinear rule: one term per appended occurrence. One held still but moving each row one way
    (`monotone`) is not linear: its term keeps the rows its appended rows make pass and its old rows did
    not (a semi-join's change: EXISTS over the appended rows AND NOT over the old ones); under NOT, the
    rows they stop, taken away; on a side of an outer join the other side is padded for, the rows they
    match, and taken away the other side's rows padded with NULLs those replace. In the term of a plain
    append, the others are named as read beside it (`Names`: an inner equality with its rows may bound
    them, `bounds.KeyPair.plain`)."""
    held = monotone(branch)
    terms = []
    for i, source in enumerate(occurrences):
        if source not in appended:
            continue
        how = held.get(i)
        beside = start + i if how is None else None    # (a test over the old rows copies the others: whole)
        term = replaced(_own_side(branch, i), lambda j, i=i, beside=beside: names(start + i, Version.DELTA) if j == i
                        else names(start + j, Version.NEW if j < i else Version.OLD, beside))
        old, table = names(start + i, Version.OLD), tables(term)[i]
        if how is None:
            terms.append(Term(term))
        elif how.appended is Appended.MATCHES:
            terms.extend(_matched(term, i, old))
        else:
            if isinstance(how.node, exp.Join):
                _as_exists(table, how.appended is Appended.STOPS)
            terms.append(_passing(term, table, old, how.appended is Appended.STOPS))
    return terms


def _own_side(branch: exp.Select, occurrence: int) -> exp.Select:
    """`branch` with the other sides of each UNION ALL the occurrence is read under as a relation made
    empty: a union's change is its sides' changes, not a product of them — the other sides' rows do
    not change with it (their names and types stay; Spark reads none of them)."""
    own = branch.copy()
    for side in _other_sides(own, occurrence):
        _emptied(side)
    return own


def unread(branch: exp.Select, occurrence: int) -> set[int]:
    """The occurrences the term of an append to `occurrence` reads none of (`_own_side`)."""
    apart = {id(table) for side in _other_sides(branch, occurrence) for table in tables(side)}
    return {j for j, table in enumerate(tables(branch)) if id(table) in apart}


def _other_sides(tree: exp.Select, occurrence: int) -> list[exp.Expression]:
    """The other sides of each UNION ALL the occurrence is read under as a relation: in the FROM of the
    query or of its subqueries there, above any subquery expression it is read in (a union inside an
    EXISTS or IN is the test's, whose other sides' rows still answer it)."""
    node: exp.Expression = tables(tree)[occurrence]
    sides: list[exp.Expression] = []
    while node.parent is not None:
        if subquery_expression(node):
            sides = []
        parent = node.parent
        if isinstance(parent, exp.Union):
            sides.append(parent.expression if node is parent.this else parent.this)
        node = parent
    return sides


def _emptied(side: exp.Expression) -> None:
    """Each SELECT a UNION's side is made of made to select no row (its tables kept in their places)."""
    if isinstance(side, (exp.Union, exp.Subquery)):
        for inner in (side.this, side.args.get("expression")):
            if inner is not None:
                _emptied(inner)
    elif isinstance(side, exp.Select):
        if side.args.get("group") or own(side, exp.AggFunc):
            having = side.args.get("having")
            side.set("having", exp.Having(this=exp.and_(*([having.this] if having else []), exp.false())))
        else:
            _conjoined(side, exp.false())


def added_trees(terms: list[Term]) -> list[exp.Select]:
    """The terms of a rule that only adds rows (the decision refreshes it in full where one would take
    rows away: `rules.appendable_held`)."""
    if any(term.sign < 0 for term in terms):
        raise ValueError("a change that takes rows away, for a rule that only adds them")
    return [term.tree for term in terms]


def _as_exists(table: exp.Table, negated: bool) -> None:
    """A LEFT SEMI (ANTI) JOIN of `table`, its SELECT's last join, as the EXISTS (NOT EXISTS) conjunct of
    its WHERE that it is; `table` itself moved into it."""
    join = table.parent
    scope, on = join.parent, join.args["on"]
    join.pop()
    test = exp.Exists(this=exp.select("1").from_(table, copy=False).where(on, copy=False))
    _conjoined(scope, exp.Not(this=test) if negated else test)


def _passing(term: exp.Select, appended: exp.Table, old: str, negated: bool) -> Term:
    """The EXISTS or IN reading the `appended` rows in `term` made to keep the rows they let pass and its
    old rows did not; `negated` (under NOT): the rows its old rows let pass and they stop, taken away
    (`_stopped`)."""
    predicate = appended.find_ancestor(exp.Exists, exp.In)
    before = predicate.copy()
    relation = _old_rows(appended, old)
    # (an IN's value may read a table too)
    position = next(k for k, table in enumerate(tables(predicate)) if table is appended)
    tables(before)[position].replace(relation)
    if negated:
        negation = predicate
        while not isinstance(negation, exp.Not):
            negation = negation.parent
        negation.replace(exp.paren(exp.and_(exp.not_(before), _stopped(predicate))))
        return Term(term, -1)
    guard = exp.not_(before) if isinstance(before, exp.Exists) else \
        exp.not_(exp.paren(exp.Is(this=exp.paren(before), expression=exp.true())))
    predicate.replace(exp.and_(predicate.copy(), guard))
    return Term(term)


def _stopped(predicate: exp.Exists | exp.In) -> exp.Expression:
    """What a NOT EXISTS or NOT IN over the appended rows is not TRUE for: EXISTS over them; an IN that
    is not FALSE — TRUE, or NULL (the value NULL and some row appended, or a NULL among their values).
    Spark tells an IN's NULL from its FALSE only as a conjunct of WHERE (an anti-join aware of NULLs),
    so the NULL cases are EXISTS of their own."""
    if isinstance(predicate, exp.Exists):
        return predicate.copy()
    body = predicate.args["query"].unnest()
    value = body.expressions[0].unalias()
    some = body.copy()
    some.set("expressions", [exp.Literal.number(1)])
    nulls = some.copy().where(exp.Is(this=value.copy(), expression=exp.null()), copy=False)
    return exp.paren(exp.or_(predicate.copy(), exp.and_(exp.Is(this=predicate.this.copy(), expression=exp.null()),
                                                        exp.Exists(this=some)), exp.Exists(this=nulls)))


def _matched(term: exp.Select, occurrence: int, old: str) -> list[Term]:
    """The outer join of the occurrence's appended rows in `term`: the rows they match (their own
    unmatched rows padded too where the join pads that side), and taken away the other side's rows
    padded with NULLs they replace — those no old row matched —, the appended relation joined ON FALSE
    so that the other side's rows are padded."""
    appended = tables(term)[occurrence]
    right = isinstance(appended.parent, exp.Join)
    join = _join_of(appended)
    matched = term.copy()
    pads_own = join_words(join).startswith(("FULL", "RIGHT" if right else "LEFT"))
    _set_side(_join_of(tables(matched)[occurrence]), ("RIGHT" if right else "LEFT") if pads_own else None)
    on = join.args["on"]
    before, now = (exp.Exists(this=exp.select("1").from_(r.copy()).where(on.copy()))
                   for r in (_old_rows(appended, old), appended))
    _conjoined(join.parent, exp.not_(before), now)
    join.set("on", exp.false())
    _set_side(join, "LEFT" if right else "RIGHT")
    return [Term(matched), Term(term, -1)]


def _old_rows(appended: exp.Table, old: str) -> exp.Table:
    """The occurrence's old rows, under the alias its appended ones are read by."""
    relation = exp.to_table(old, dialect=DIALECT)
    relation.set("alias", appended.args["alias"].copy())
    return relation


def _conjoined(scope: exp.Select, *tests: exp.Expression) -> None:
    """`tests` added to the WHERE of `scope`, as conjuncts."""
    where = scope.args.get("where")
    scope.set("where", exp.Where(this=exp.and_(*([where.this] if where is not None else []), *tests, copy=False)))


def _join_of(table: exp.Table) -> exp.Join:
    """The outer join a table is a side of: the one it is the right side of, or its SELECT's only one."""
    return table.parent if isinstance(table.parent, exp.Join) else table.parent.parent.args["joins"][0]


def _set_side(join: exp.Join, side: str | None) -> None:
    """The join made an outer one keeping the `side` (LEFT, RIGHT) rows, or (None) an inner one."""
    join.set("side", side)
    join.set("kind", None)


def signed(terms: list[tuple[Term, int]], shaped: Callable[[exp.Select, int], exp.Select] = lambda tree, _: tree,
           ) -> tuple[str | None, str | None]:
    """The terms' rows gained and lost, each one UNION ALL (`shaped`: each term's tree, given its
    branch's first occurrence); None where there are none."""
    return tuple(" UNION ALL ".join(sql(shaped(term.tree, start)) for term, start in terms if term.sign == sign)
                 or None for sign in (1, -1))     # type: ignore[return-value]
