"""A query above an aggregate that reads it only through which keys have rows — an EXISTS or NOT EXISTS
read by its keys (`keyed_subqueries`: `mt_exists0.mt_rows > 0`, `COALESCE(mt_exists0.mt_rows, 0) = 0`) —
computes the same result while no key's rows appear or all leave: a change that moves counts but flips
no key (TPC-H Q22's customers without orders, after orders of customers who had some) leaves the table as
it was, and its tables beside it unchanged, only the state is merged (Q22 after RF1: 0.55 s of 1.3 s was
the query above computed again and written). Which keys flip is counted as the new state is written,
merged from the old one (beside which each tested count as it was) and the signed change
(`merging.retracted`); a key whose rows all left is one the new state has not of the old one's."""

from __future__ import annotations

from sqlglot import exp

from mt_magic.incremental.aggregate import ABOVE, STATE_PARTIAL, Aggregate
from mt_magic.incremental.merging import WAS
from mt_magic.incremental.occurrences import parse


def tested_partials(rule: Aggregate) -> tuple[str, ...] | None:
    """The state's counts whose being above zero is all the query above reads of each key (with the
    key and whether the key is in the state at all: its rows' count, `presence`); None where it reads
    more, or the aggregate's groups are not one per key with counts that subtract."""
    if rule.above is None or rule.presence is None or rule.having is not None or rule.limit is not None \
            or rule.regroups or not rule.subtracts or not rule.key_columns:
        return None
    keys, counts = set(), {}
    for name, final in zip(rule.own_names, rule.finals, strict=True):
        if final in rule.key_columns:
            keys.add(name.lower())
        elif final.startswith(STATE_PARTIAL) and final[len(STATE_PARTIAL):].isdigit() and \
                rule.partials[int(final[len(STATE_PARTIAL):])].counting:
            counts[name.lower()] = final
    tree = parse(rule.above)
    aliases = {t.alias_or_name.lower() for t in tree.find_all(exp.Table) if t.name == ABOVE}
    if any(not isinstance(star.parent, (exp.Count, exp.Column)) for star in tree.find_all(exp.Star)):
        return None     # (a SELECT * reads every column; COUNT(*) none)
    tested = {f"{STATE_PARTIAL}{rule.presence}"}
    for column in tree.find_all(exp.Column):
        name = column.name.lower()
        if column.is_star and column.table.lower() in aliases:
            return None
        if name in keys and column.table.lower() in aliases:
            continue
        if name not in counts:
            continue        # (another relation's column: a name of the aggregate's is read qualified only)
        if column.table.lower() not in aliases or not _tested(column):
            return None
        tested.add(counts[name])
    return tuple(sorted(tested))


def _tested(column: exp.Column) -> bool:
    """`c > 0`, or `COALESCE(c, 0) = 0`: whether the count is above zero, NULL (no key) as zero."""
    parent = column.parent
    if isinstance(parent, exp.GT) and parent.this is column:
        return _zero(parent.expression)
    if isinstance(parent, exp.Coalesce) and parent.this is column and len(parent.expressions) == 1 \
            and _zero(parent.expressions[0]) and isinstance(parent.parent, exp.EQ) and parent.parent.this is parent:
        return _zero(parent.parent.expression)
    return False


def _zero(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and node.this == "0"


def flipping(tested: tuple[str, ...]) -> str:
    """A row of the new state (merged with each tested count as it was: `merging.retracted`'s `was`)
    whose key gained its first rows, or whose tested counts are not above zero as they were."""
    return " OR ".join(f"(COALESCE({WAS}{a}, 0) > 0) <> (COALESCE({a}, 0) > 0)" for a in tested)
