"""Linear queries: filter, project, computed columns, inner joins, LATERAL VIEW, UNION ALL of those. The
change of the result is the query over the change (a join's by the bilinear rule: for each appended
occurrence i, the occurrences before i read their new files, i its appended ones, those after their
old files), merged by adding files."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mt_magic.incremental.checks import growing, linear_branches
from mt_magic.incremental.occurrences import DIALECT, Names, Version, identifier, replaced, sql, tables


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

    def delta(self, appended: set[str], names: Names) -> str | None:
        """The rows the result gains from the appended sources; None when none of them is read."""
        return _union(_terms(branch, occurrences, start, appended, names)
                      for (branch, start), occurrences in zip(self.starts(), self.occurrences, strict=True))

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


def _terms(branch: exp.Select, occurrences: tuple[str, ...], start: int, appended: set[str],
           names: Names) -> list[str]:
    return [sql(t) for t in term_trees(branch, occurrences, start, appended, names)]


def term_trees(branch: exp.Select, occurrences: tuple[str, ...], start: int, appended: set[str],
                names: Names) -> list[exp.Select]:
    """The bilinear rule: one term per appended occurrence. One read in an EXISTS or IN conjunct
    (`growing`) is not linear but monotone: its term keeps the rows its appended rows make pass and its
    old rows did not (a semi-join's change: EXISTS over the appended rows AND NOT over the old ones)."""
    grows = growing(branch)
    terms = []
    for i, source in enumerate(occurrences):
        if source not in appended:
            continue
        term = replaced(branch, lambda j, i=i: names(
            start + j, Version.NEW if j < i else Version.DELTA if j == i else Version.OLD))
        if i in grows:
            _not_before(term, i, names(start + i, Version.OLD))
        terms.append(term)
    return terms


def _not_before(term: exp.Select, occurrence: int, old: str) -> None:
    """Adds to the EXISTS or IN reading the occurrence's appended rows in `term` that over its old rows
    it was not TRUE."""
    appended = tables(term)[occurrence]
    predicate = appended.find_ancestor(exp.Exists, exp.In)
    before = predicate.copy()
    relation = exp.to_table(old, dialect=DIALECT)
    relation.set("alias", appended.args["alias"].copy())
    position = next(k for k, table in enumerate(tables(predicate)) if table is appended)   # an IN's value may read one too
    tables(before)[position].replace(relation)
    guard = exp.not_(before) if isinstance(before, exp.Exists) else \
        exp.not_(exp.paren(exp.Is(this=exp.paren(before), expression=exp.true())))
    predicate.replace(exp.and_(predicate.copy(), guard))


def _union(parts) -> str | None:
    flat = [part for group in parts for part in group]
    return " UNION ALL ".join(flat) if flat else None
