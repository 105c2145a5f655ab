"""An aggregate's partials (a linear query's rows) kept per source partition, so that a rewritten
partition can be retracted.

Plain files lose their old rows when a partition is rewritten (a day reprocessed, rows deleted, files
compacted). The provenance state keeps, per partition of one source (the provenance) and per group,
the partials that partition contributed; a refresh after some partitions were rewritten subtracts
their old partials and adds the partials of their files now — signed changes, DBSP's Z-sets: rows
removed weigh −1. COUNT, SUM and AVG subtract; a SUM whose counted values reach zero is NULL again; a
group whose rows reach zero disappears. A rule with MIN or MAX merges its state again from every
partition's partials (a removed partial may have been the group's MIN): measured, one pass over the
partials costs less than finding and deriving again only the groups that need it. A linear query's
rows are tagged with their source partition instead (`tagged_rows`): the table keeps each partition's
rows in files of their own, and a rewritten partition's are written again (the rows of UNION ALL
branches that do not read the kept source are kept as one more partition, OTHER_BRANCHES). A top-N keeps
its rows within N per partition and key, ranked again across partitions; a COUNT(DISTINCT …) its pairs
with their counts (`distinct_pairs`). A materialized source keeps its files' names across its versions:
what is derived from it can be kept by its file (FILE) instead of a partition."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from sqlglot import exp

from mt_magic.incremental.aggregate import STATE_PARTIAL, Aggregate
from mt_magic.incremental.checks import held_still
from mt_magic.incremental.linear import Linear, added_trees, signed, term_trees
from mt_magic.incremental.occurrences import Names, liftable, lifted, replaced, sql, tables
from mt_magic.incremental.rules import read_trees
from mt_magic.incremental.topn import TopN

SIGN = "mt_sign"             # a changed row's weight: +1 added, -1 removed
PARTITION = "mt_partition"   # the provenance state's column naming the source partition a row came from
# (its folders are listed: a name starting with "_" would hide them)
PAIRED = "mt_paired"         # kept by two sources: the second's partition (folders inside PARTITION's)
OTHER_BRANCHES = "__mt_other_branches__"   # the partition the rows of UNION ALL branches not reading it are kept as
FILE = "mt_file"             # a materialized source's rows kept by file: the column naming a row's file


@dataclass(frozen=True)
class Provenance:
    """Which source occurrence the state is kept by, and its partition column; `paired`: a second
    partitioned occurrence an aggregate's partials are kept by too (per pair of partitions), so that
    both sources rewritten at once — TPC-H's RF2 deletes orders and their line items — retract by
    partition, each source's rewritten partitions joined with the other's files now."""

    occurrence: int
    column: str
    paired: Provenance | None = None

    @property
    def columns(self) -> list[str]:
        """The state's columns naming where a row came from."""
        return [PARTITION, PAIRED] if self.paired is not None else [PARTITION]


def kept_state(rule: Aggregate | TopN, provenance: Provenance, reading: Callable[[int], str]) -> str:
    """The partials per source partition and group of the input occurrence i reads as `reading(i)` (a
    top-N's: its rows within N per source partition and key)."""
    if isinstance(rule, TopN):
        return _within(rule, sql(_tagged(replaced(rule.ranked, reading), provenance)))
    return sql(_by_partition(rule, replaced(rule.select, reading), provenance))


def appended_state(rule: Aggregate | TopN, provenance: Provenance, appended: set[str], names: Names,
                   merging: str | None = None) -> str:
    """The appended rows' partials per source partition and group (the bilinear rule's terms);
    `merging`: kept partials (with their partition) merged into them, a partition's files made one."""
    if isinstance(rule, TopN):
        terms = [sql(_tagged(term, provenance))
                 for term in added_trees(term_trees(rule.ranked, rule.occurrences, 0, appended, names))]
        if merging is not None:
            terms.append(f"SELECT {', '.join([*rule.state_columns, PARTITION])} FROM {merging}")
        return _within(rule, " UNION ALL ".join(terms))
    terms = [sql(_by_partition(rule, term.tree, provenance, rows=True, sign=term.sign))
             for term in term_trees(rule.select, rule.aggregated, 0, appended, names)]
    keys = provenance.columns + rule.key_columns
    if merging is not None:
        terms.append(f"SELECT {', '.join(keys)}, {', '.join(rule.partial_columns)} FROM {merging}")
    union = " UNION ALL ".join(terms)
    return f"SELECT {', '.join(keys + _merges(rule))} FROM ({union}) AS appended GROUP BY {', '.join(keys)}"


def merged_partitions(rule: Aggregate | TopN, kept: str) -> str:
    """The per-group state from a provenance state: each group's partials merged over partitions (a
    top-N's rows ranked again across them)."""
    if isinstance(rule, TopN):
        return rule.within(f"SELECT {', '.join(rule.state_columns)} FROM {kept}")
    keys = rule.key_columns
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join(keys + _merges(rule))} FROM {kept}{group}"


def signed_state(rule: Aggregate, provenance: Provenance, reading: Callable[[int], str], signed: int) -> str:
    """The partials per source partition and group of rows with a weight, +1 added or −1 removed
    (DBSP's Z-sets): occurrence `signed` reads a relation whose `mt_sign` column weighs each of its
    rows, and each row's partial counts times its weight (a rule whose partials all subtract)."""
    tree = replaced(rule.select, reading)
    weight = lifted(tree, signed, SIGN, lambda alias: exp.column(SIGN, table=alias))
    rows = _by_partition(rule, tree, provenance, rows=True)
    rows.set("expressions", [*rows.expressions, exp.alias_(weight, SIGN)])
    keys = provenance.columns + rule.key_columns
    sums = [f"SUM({a} * {SIGN}) AS {a}" for a in rule.partial_columns]
    return f"SELECT {', '.join(keys + sums)} FROM ({sql(rows)}) AS weighed GROUP BY {', '.join(keys)}"


def by_file(tree: exp.Select) -> bool:
    """A query can keep what it derives by the file of a source it reads: the name of each row's file
    rides in its relation as one more column (FILE), which a `*` would output."""
    return not any(e.is_star for e in tree.expressions)


def subtracts(rule: Aggregate | TopN) -> bool:
    """A removed partition's partials are subtracted (`Aggregate.subtracts`); a MIN or MAX is merged
    again from every partition's partials instead (a removed one may have been it), as a top-N's rows
    are ranked again."""
    return isinstance(rule, Aggregate) and rule.subtracts


class Branches(Enum):
    """Which UNION ALL branches of a linear query a tagged query holds."""

    ALL = "all"
    KEPT = "kept"           # the one reading the kept occurrence
    OTHERS = "others"       # the others, tagged OTHER_BRANCHES


def tagged_rows(rule: Linear, provenance: Provenance, reading: Callable[[int], str],
                branches: Branches = Branches.ALL) -> str:
    """A linear query, occurrence i reading `reading(i)`, each row tagged with the source partition it
    came from (the kept occurrence's; a UNION ALL branch that does not read it, OTHER_BRANCHES): a
    rewritten partition's rows are found by it."""
    trees = []
    for (branch, start), occurrences in zip(rule.starts(), rule.occurrences, strict=True):
        kept = start <= provenance.occurrence < start + len(occurrences)
        if branches is Branches.ALL or kept == (branches is Branches.KEPT):
            trees.append(_tagged(replaced(branch, lambda j, at=start: reading(at + j)), provenance, start))
    return " UNION ALL ".join(sql(tree) for tree in trees)


def tagged_change(rule: Linear, provenance: Provenance, appended: set[str],
                  names: Names) -> tuple[str | None, str | None]:
    """The rows a linear query gains and loses from the appended sources (`Linear.delta`), tagged as
    `tagged_rows`; None where there are none."""
    return signed(rule.terms(appended, names), lambda tree, start: _tagged(tree, provenance, start))


def _tagged(tree: exp.Select, provenance: Provenance, start: int = 0) -> exp.Select:
    """`tree`'s rows with their partition last; `start`: the index of its first occurrence (a UNION ALL
    branch's), one that does not read the kept occurrence tagging its rows OTHER_BRANCHES."""
    local = provenance.occurrence - start
    tag = partition_expression(Provenance(local, provenance.column), tree) \
        if 0 <= local < len(tables(tree)) else exp.Literal.string(OTHER_BRANCHES)
    tree.set("expressions", [*tree.expressions, exp.alias_(tag, PARTITION)])
    return tree


def partition_expression(provenance: Provenance, tree: exp.Select, name: str = PARTITION) -> exp.Expression:
    """The provenance occurrence's partition column in `tree` (as text: a partition's folder name),
    selected up through the subqueries it is nested in (`tree` is a copy)."""
    return lifted(tree, provenance.occurrence, name, lambda alias: exp.cast(
        exp.column(exp.to_identifier(provenance.column, quoted=True), table=alias), exp.DataType.build("STRING")))


def keepable(rule: Linear | Aggregate | TopN, occurrence: int) -> bool:
    """What the rule derives can be kept by where occurrence i's rows came from: the query that reads
    it can select its columns (`liftable`), and not held still (`held_still`: on the right of a LEFT JOIN,
    the left of a RIGHT JOIN, its rows may be none; nor above an aggregate, which reads its state)."""
    tree, start = next((tree, start) for tree, start in reversed(read_trees(rule)) if start <= occurrence)
    return occurrence - start < len(tables(tree)) and liftable(tree, occurrence - start) and \
        occurrence - start not in held_still(tree)


def _within(rule: TopN, candidates: str) -> str:
    """A top-N's candidate rows (with their partition) within N per source partition and key, unranked."""
    return f"SELECT {', '.join([*rule.state_columns, PARTITION])} FROM ({rule.within(candidates, PARTITION)}) AS kept"


def _by_partition(rule: Aggregate, tree: exp.Select, provenance: Provenance, rows: bool = False,
                  sign: int = 1) -> exp.Select:
    """Partials per source partition and group; `rows`: per input row, ungrouped (`sign` −1: taken away)."""
    state = rule.state_select(tree, rows=rows, sign=sign)
    where = [partition_expression(provenance, state)]
    if provenance.paired is not None:
        where.append(partition_expression(provenance.paired, state, PAIRED))
    state.set("expressions", [exp.alias_(e, name) for e, name in zip(where, provenance.columns)] + state.expressions)
    if not rows:
        group = state.args.get("group")
        state.set("group", exp.Group(expressions=[e.copy() for e in where] + (group.expressions if group else [])))
    return state


def _merges(rule: Aggregate) -> list[str]:
    """Each partial merged; with no group key a count over no rows is zero (one row, as the query's)."""
    return [f"COALESCE(SUM({STATE_PARTIAL}{j}), 0) AS {STATE_PARTIAL}{j}" if p.counting and not rule.keys else
            f"{p.merge}({STATE_PARTIAL}{j}) AS {STATE_PARTIAL}{j}" for j, p in enumerate(rule.partials)]
