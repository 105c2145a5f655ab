"""The maintained plan, in words: each operator of a query, the rule that maps its inputs' change to its
output's, and the state it keeps — or the construct that makes the query a full recompute. EXPLAIN and
DESCRIBE EXTENDED show it; it is read off the rule the refresh runs, so it says what the refresh does."""

from __future__ import annotations

from sqlglot import exp

from mt_magic.incremental.aggregate import Aggregate
from mt_magic.incremental.below_join import Below
from mt_magic.incremental.checks import (HELD_FILTER, HELD_VALUE, Appended, Monotone, held_still, join_words,
                                         monotone)
from mt_magic.incremental.distinct import DistinctCount
from mt_magic.incremental.existence import tested_partials
from mt_magic.incremental.keyed_above import keyed_above
from mt_magic.incremental.keyed_subqueries import HIGHEST, KEY, KEYS, LISTED, LOWEST, ROWS, VALUE, VALUES
from mt_magic.incremental.linear import Linear
from mt_magic.incremental.occurrences import identifier, sql, subquery_expression, tables
from mt_magic.incremental.rules import (Recompute, Rule, appendable_held, held_sources, monotone_occurrences,
                                        takes_away)
from mt_magic.incremental.topn import TopN


def maintained_plan(rule: Rule, layout: Below | None = None) -> list[str]:
    """One line per operator, the input's first and the result's last; `layout`: where an aggregate's
    partials are kept below its joins (known once its sources' partitions are)."""
    if isinstance(rule, Recompute):
        return [f"full recompute: {rule.reason}"]
    stuck = set(held_sources(rule)) - appendable_held(rule)       # held still where one of its reads is
    if isinstance(rule, Linear):
        lines = [line for branch in rule.branches for line in _input(branch, stuck, signed=True)]
        if len(rule.branches) > 1:
            lines.append(f"UNION ALL of {len(rule.branches)} branches: each branch's change appended")
        taking = any(how is not Appended.PASSES and rule.sources[i] not in stuck
                     for i, how in monotone_occurrences(rule).items())
        return [*lines, "result: the change appended as new files (no state)" + (
            "; the rows an append takes away: the files they are in written again without them" if taking else "")]
    if isinstance(rule, TopN):
        by = ", ".join(rule.keys) or "the whole result"
        return [*_input(rule.ranked, stuck), f"top-{rule.limit} per {by}: the change's rows ranked with the kept ones; "
                                      f"state: the rows within {rule.limit} per key"]
    if isinstance(rule, DistinctCount):
        by = ", ".join(rule.keys) or "the one group"
        return [*_input(rule.select, stuck), f"COUNT(DISTINCT …) per {by}: the change's new values added; "
                                      "state: the distinct values per group"]
    return [*_input(rule.select, stuck, takes_away(rule), layout), *_aggregated(rule)]


def _keyed(rule: Aggregate) -> list[str]:
    """The lines of subqueries read by their keys (`keyed_subqueries`): what the aggregate computes for each."""
    if not rule.above or not any(kind in rule.above for kind in (KEYS, LISTED, VALUES)):
        return []
    named = [n for n in rule.select.named_selects if not n.startswith(KEY)]
    outputs = {n.rstrip("0123456789") for n in named}
    lines = []
    if outputs & {ROWS, LOWEST, HIGHEST}:
        counted = " or ".join(["counted"] * (ROWS in outputs) +
                              ["with the least or greatest value it compares"] * bool(outputs & {LOWEST, HIGHEST}))
        lines.append(f"the keys an EXISTS or NOT EXISTS tests, {counted} (the aggregate): the query above reads "
                     "them through a LEFT JOIN, a key without rows padded with NULL")
    if LISTED in rule.above:
        lines.append("the keys an IN lists, grouped (the aggregate): the query above reads them through the IN, a "
                     "semi-join")
    if VALUE in outputs:
        lines.append("the value a scalar subquery computes, per key of its correlation (the aggregate): the query "
                     "above reads it through a LEFT JOIN, a key without rows padded with NULL as the subquery's value is")
    if any(n[-1].isdigit() for n in named):
        lines.append("several subqueries of one table by the same keys: one aggregate, each subquery's rows its own "
                     "FILTER")
    return lines


def _aggregated(rule: Aggregate) -> list[str]:
    by = ", ".join(rule.written_keys) or "the one group"
    values = rule.keys[len(rule.written_keys):]
    merges = ", ".join(dict.fromkeys(p.merge for p in rule.partials))
    count = len(rule.partials)
    state = f"the change's partials merged ({merges}); state: {count} partial{'s' if count != 1 else ''} per group" \
        if count else "the change's groups added; state: the groups"
    lines = [f"aggregate by {by}: {state}" + (f" and distinct value of {', '.join(values)}" if values else "")]
    if rule.grouping:
        kind = rule.grouping.split("(")[0].strip()
        lines.append(f"{kind}: each grouping set's groups merged again from the state")
    if values:
        lines.append("DISTINCT aggregates: each group's distinct values counted again from the state "
                     "(a value whose rows all left is gone)")
    if rule.having:
        lines.append("HAVING: applied to the merged groups")
    if rule.limit:
        lines.append(f"ORDER BY … LIMIT {rule.limit}: the first rows taken again from every group")
    lines.extend(_keyed(rule))
    if rule.above:
        lines.extend(f"scan {source}: read whole by the query above the aggregate, each refresh " +
                     ("(its change is the aggregate's, as above)" if source in rule.aggregated else
                      "(a change of it needs nothing more)") for source in rule.sources[len(rule.aggregated):])
        lines.append("the query above the aggregate (it reads the aggregate's result): computed again over "
                     "the groups the state holds" + (" and the tables beside it" if rule.beside else ""))
        if tested_partials(rule) is not None:
            lines.append("it reads only whether each key has rows: where no key gains its first or loses its last "
                         "(counted as the state is written) and the tables beside are unchanged, kept as it is")
        if keyed_above(rule) is not None:
            lines.append("its rows each one key's of the aggregate: after an append of new keys alone, theirs "
                         "computed alone (the tables beside read within their range) and added to the rows it had")
    return lines


def _input(select: exp.Select, stuck: set[str], signed: bool = False, layout: Below | None = None) -> list[str]:
    """The scans, joins and filters of one SELECT (its subqueries in FROM read through); `stuck`: the
    sources held still wherever they are read (another read of theirs is); `signed`: an append can take
    rows away (`rules.takes_away`); `layout`: the partials kept below the joins."""
    held = held_still(select)
    scanned = tables(select)
    found = {i: how for i, how in monotone(select).items()
             if (signed or how.appended is Appended.PASSES) and identifier(scanned[i]) not in stuck}
    moving = {i: how.appended for i, how in found.items()}
    lines = []
    moving_tables = {id(table): moving[index] for index, table in enumerate(tables(select)) if index in moving}
    for index, table in enumerate(tables(select)):
        where = held.get(index)
        if layout is not None and index == layout.occurrence:
            lines.append(f"scan {identifier(table)}: its partials kept below the joins, per partition and value of "
                         f"{', '.join(layout.interface)}; " + (
                             "the side a LEFT JOIN pads: any change of it or of the other side joins them all with "
                             "the other side again" if layout.padded else "its appended rows' partials joined with "
                             "the others, a change of another source joining them all again"))
            continue
        lines.append(f"scan {identifier(table)}: " + (
            f"read {where}, held still (a change recomputes)" if where and index not in moving else
            f"read {where}{_moved(found[index])}; a rewrite recomputes" if where else
            "its appended files read (its change)"))
    inside = {id(n) for q in select.walk() if q is not select and subquery_expression(q) for n in q.walk()}
    for scope in select.find_all(exp.Select):
        if id(scope) in inside:          # a subquery's own operators are held still with its tables
            continue
        for join in scope.args.get("joins") or ():
            name = join.this.alias_or_name
            words = join_words(join)
            right_moves = moving_tables.get(id(join.this))
            padding = Appended.MATCHES in (right_moves, moving_tables.get(id(scope.args["from_"].this)))
            unpads = _JOINED[Appended.MATCHES]
            if layout is not None and layout.padded and join.this is tables(select)[layout.occurrence]:
                lines.append(f"{words} JOIN {name}: its kept partials read in its place, a padded row counting one "
                             "row and no values")
            elif words.startswith(("LEFT", "SEMI", "ANTI")):
                words = words if words.startswith("LEFT") else f"LEFT {words}"
                right = f"; an append to its right side {_JOINED[right_moves]}" if right_moves else \
                    " while its right side holds still"
                lines.append(f"{words} JOIN {name}: linear in its left side{right}")
            elif words.startswith("RIGHT"):
                left = f"; an append to its left side {unpads}" if padding else " while its left side holds still"
                lines.append(f"{words} JOIN {name}: linear in its right side{left}")
            elif words.startswith("FULL"):
                lines.append(f"{words} JOIN {name}: " + (f"an append to either side {unpads} (its own unmatched rows "
                                                         "padded)" if padding else "both sides held still"))
            else:
                lines.append(f"inner join {name}: each side's change joined with the other (ΔA ⋈ B′ + A ⋈ ΔB)")
        where = scope.args.get("where")
        if where is not None:
            text = sql(where.this)
            text = text if len(text) <= 80 else text[:77] + "…"
            filtering = HELD_FILTER in held.values() and where.find(exp.Exists, exp.Select) is not None
            read = {index for index, table in enumerate(tables(select)) if table.find_ancestor(exp.Where) is where}
            kinds = {moving[i] for i in read & set(moving)}
            does = " and ".join(_JOINED[kind] for kind in (Appended.PASSES, Appended.STOPS) if kind in kinds)
            lines.append(f"filter {text}: " + (
                f"{'a semi-join' if kinds == {Appended.PASSES} else 'a semi- or anti-join'}, applied to the change; an "
                f"append to its subqueries' tables {does}" if filtering and read <= set(moving) else "a semi- or "
                "anti-join, applied to the change while its subqueries' tables hold still" if filtering else
                "applied to the change"))
        if HELD_VALUE in held.values() and any(e.find(exp.Subquery) for e in scope.expressions):
            lines.append("scalar subquery in SELECT: evaluated for the change's rows while its tables hold still")
    return lines


def _moved(how: Monotone) -> str:
    """What an append does to the rows, named after the predicate that reads it (not after a join)."""
    label, text = _MOVING[how.appended]
    return f" ({label}): {text}" if label and not isinstance(how.node, exp.Join) else f": {text}"


_MOVING = {Appended.PASSES: ("an EXISTS or IN", "its appended rows add the rows they let pass and its old rows did "
                                               "not (a semi-join's change)"),
           Appended.STOPS: ("a NOT EXISTS or NOT IN", "its appended rows take away the rows they stop and its old rows "
                                                      "let pass (an anti-join's change)"),
           Appended.MATCHES: (None, "its appended rows add the rows they match and take away the rows padded "
                                    "with NULLs those replace")}
_JOINED = {Appended.PASSES: "adds the rows it lets pass", Appended.STOPS: "takes away the rows it stops",
           Appended.MATCHES: "adds the rows it matches and takes away the padded rows they replace"}
