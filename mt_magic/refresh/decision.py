"""A refresh's decision as a value: what it does and why, from what it knows. EXPLAIN prints it, the
run executes it and the history records it; one function makes it, so the three cannot disagree.

`decide` is pure: what it needs from Spark and the files — the rule as Spark judged it, how each
source is read alone, whether a state is kept, what the cost rule weighs — is asked first
(`Chooser.known`) and handed to it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from mt_magic.catalog.history import Technique, Trigger
from mt_magic.catalog.model import MaterializedTable, Target
from mt_magic.config import REFRESH_POLICY
from mt_magic.incremental.below_join import Below, below
from mt_magic.incremental.cost import Estimate
from mt_magic.incremental.provenance import OTHER_BRANCHES, keepable, subtracts
from mt_magic.incremental.rules import (Aggregate, Linear, Recompute, Rule, TopN, above_only, appendable_held,
                                        held_sources, takes_rows_away)
from mt_magic.refresh.changes import (Change, Relative, Snapshot, SourceChange, SourceDelta, compare, deltas,
                                      volatile)
from mt_magic.refresh.choice import STATEFUL, Choice, Known, Reading
from mt_magic.refresh.key_bounds import Bounds
from mt_magic.refresh.provenance_state import Keeping, Retraction, Way, changed_partitions, counted, partition_of
from mt_magic.refresh.taken_rows import EXACT_FORMATS
from mt_magic.spark.files import Listing
from mt_magic.storage.manifests import KeptRows, KeptState, Manifest

SKIP_REASON = "no source changed since the table last matched them"
RETRACTED_SHARE = 0.5        # above it, retracting a source's rewritten partitions costs more than recomputing


class Situation:
    """What a refresh knows before it decides: the sources' snapshot now against the record, and —
    asked only where the decision needs them (a skip does not) — the manifest of the files the data
    was computed from, each source's change since, and what choosing asks Spark."""

    def __init__(self, table: MaterializedTable, snapshot: Snapshot, listings: dict[str, Listing | None],
                 manifest: Callable[[], Manifest | None], relatives: dict[str, Relative],
                 known: Callable[[Situation], Known]) -> None:
        self.table = table
        self.snapshot = snapshot
        self.listings = listings            # the files the snapshot was taken from
        self.comparison = compare(table.source_snapshot, snapshot, bool(volatile(table)))
        self._manifest, self._relatives, self._known = manifest, relatives, known

    @functools.cached_property
    def manifest(self) -> Manifest | None:
        return self._manifest()

    @functools.cached_property
    def changes(self) -> dict[str, SourceDelta]:
        return deltas(self.manifest.listings if self.manifest else None, self.listings, self._relatives)

    @functools.cached_property
    def known(self) -> Known:
        return self._known(self)


@dataclass(frozen=True)
class RefreshDecision:
    technique: Technique
    target: Target
    reason: str | None = None               # why it skips, or why it does not refresh incrementally
    estimate: Estimate | None = None        # what the cost rule weighed, where it did
    sources: dict[str, str] = field(default_factory=dict)   # each source's change, where one changed
    rule: Rule | None = None                # a whole refresh's rule, and how it reads each source
    readings: dict[str, Reading] = field(default_factory=dict)
    keeping: Keeping | None = None          # what an aggregate's partials are kept by
    retraction: Retraction | None = None    # the kept source's partitions an incremental refresh retracts
    bounds: Bounds = field(default_factory=Bounds)     # the appended rows' join keys bounding the others' reads

    @property
    def reads_listed(self) -> bool:
        """A whole recompute from the files the snapshot listed (a stateful rule's keeps its state)."""
        return self.technique is Technique.FULL and self.rule is not None and \
            not isinstance(self.rule, Recompute) and bool(self.readings)

    def describe(self) -> str:
        """What it does, as EXPLAIN says it ("would …")."""
        return phrase(self.technique, self.target.describe(), self.reason,
                      self.rule.describe() if self.rule is not None else None)


def phrase(technique: Technique, partition: dict[str, str], reason: str | None, how: str | None = None) -> str:
    """A decision in words, from what the history records of a run (`how`: the rule's own account of
    an incremental refresh)."""
    where = ", ".join(f"{key}={value}" for key, value in partition.items())
    if technique is Technique.SKIP:
        return f"skip: {reason}"
    if technique is Technique.INCREMENTAL:
        return f"refresh {how}"
    if technique is Technique.PARTITIONS:
        key, values = next(iter(partition.items()), ("", ""))
        return f"recompute partitions {key} in ({values})" if reason is not None else f"rewrite the partition {where}"
    return f"recompute the whole table ({reason})"


def decide(situation: Situation, spec: dict[str, str], trigger: Trigger, only_changed: bool) -> RefreshDecision:
    """`only_changed` (a pipeline's run): nothing runs when no source changed, and only the changed
    partitions are rewritten where the sources tell them. A refresh asked for runs whatever changed:
    with no source changed it rebuilds the data."""
    comparison, changes = situation.comparison, situation.changes
    sources = {name: delta.describe() for name, delta in changes.items()} \
        if comparison.change is not Change.NONE else {}
    if only_changed and comparison.change is Change.NONE:
        return RefreshDecision(Technique.SKIP, Target(spec), SKIP_REASON)
    if spec or trigger is Trigger.BACKFILL:
        return RefreshDecision(Technique.PARTITIONS, Target(spec), sources=sources)
    choice = choose(situation, rebuild=comparison.change is Change.NONE and not only_changed)
    keeping = situation.known.keeping if choice.readings else None
    if choice.incremental:
        if choice.retraction is not None:
            for retracted in filter(None, (choice.retraction.source, choice.retraction.paired_source)):
                sources[retracted] = f"{changes[retracted].describe()}; {choice.retraction.describe()}"
        bounds = situation.known.bounds
        for occurrence, keys in bounds.keys.items():    # what its appended rows are joined within
            sources[choice.rule.sources[occurrence]] += f"; joined within {', '.join(b.describe() for b in keys)}"
        for (occurrence, beside), read in bounds.reads.items():     # and what that lets the others skip
            if len(read.files) < read.of:
                sources[choice.rule.sources[occurrence]] += (
                    f"; joined with the rows appended to {choice.rule.sources[beside]}: {len(read.files)} of {read.of} "
                    "of its files read (the others hold no key within theirs)")
        return RefreshDecision(Technique.INCREMENTAL, Target(), None, choice.estimate, sources, choice.rule,
                               choice.readings, keeping, choice.retraction, situation.known.bounds)
    if only_changed and comparison.change is Change.PARTITIONS:
        return RefreshDecision(Technique.PARTITIONS, Target(key=comparison.key, values=comparison.values),
                               choice.reason, choice.estimate, sources)
    return RefreshDecision(Technique.FULL, Target(), choice.reason, choice.estimate, sources, choice.rule,
                           choice.readings, keeping)


def retracting(situation: Situation, source: str) -> Retraction | str:
    """The rewritten source's partitions to retract, or why they are not: the source an aggregate's
    partials (a linear table's rows) are kept by is retracted, alone (the others unchanged), by
    partition folder — under `auto`, a recompute is chosen when the rewritten partitions hold more than
    half of its bytes; another source is joined again with partials kept below the joins (the kept
    source may have been appended to meanwhile), or, small, diffed with its content kept."""
    keeping, manifest, changes = situation.known.keeping, situation.manifest, situation.changes
    rewritten = f"{source} was rewritten"
    before, now = (manifest.listings.get(source) if manifest else None), situation.listings.get(source)
    if keeping is None or before is None or now is None:
        return rewritten
    if keeping.paired_source and source in (keeping.source, keeping.paired_source):
        return _pair(situation, keeping)
    others = [d.change for s, d in changes.items() if s != source and s not in above_only(situation.known.rule)]
    if keeping.source != source and _rejoins(situation):
        if any(change not in (SourceChange.UNCHANGED, SourceChange.APPENDED) for change in others):
            return f"{rewritten} and another source changed"
        return Retraction(source, (), tuple(sorted(now)), Way.REJOINED, keeping.source)
    if any(change is not SourceChange.UNCHANGED for change in others):
        return f"{rewritten} and another source changed"
    if keeping.source != source:
        return _other_branches(situation, source) or _diffed(situation, source, now)
    found = _changed(situation, source, keeping.provenance.column)
    if isinstance(found, str):
        return found
    return Retraction(source, tuple(sorted(found[0])), tuple(found[1]), column=keeping.provenance.column)


def _changed(situation: Situation, source: str, column: str) -> tuple[set[str], list[str]] | str:
    """A source's changed partitions and their files now, or why they are not retracted: files outside
    partition folders, or — under `auto` — more than half of its bytes rewritten."""
    before, now = situation.manifest.listings.get(source), situation.listings.get(source)
    if before is None or now is None:
        return f"{source} was rewritten"
    partitions, files = changed_partitions(before, now, column)
    if partitions & {"", OTHER_BRANCHES}:       # files outside partition folders, or a partition named as ours
        return f"{source} was rewritten"
    if situation.table.options.get(REFRESH_POLICY, "auto") == "auto":
        touched = sum(size for listing in (before, now) for path, (size, _) in listing.items()
                      if partition_of(path, column) in partitions)
        if touched > RETRACTED_SHARE * max(sum(size for size, _ in now.values()), 1):
            return f"most of {source} was rewritten ({counted(partitions, column)})"
    return partitions, files


def _pair(situation: Situation, keeping: Keeping) -> Retraction | str:
    """Partials kept by two sources' partitions: each one's changed partitions (rewritten, or appended
    to beside the other's rewrite) retracted, the other sources unchanged. Their files now are joined
    with the other's files now: under `auto`, where both hold rows now, that reads both sources whole,
    and recomputing costs no more."""
    pair = (keeping.source, keeping.paired_source)
    changed = next((s for s, d in situation.changes.items() if s not in pair and d.change is not SourceChange.UNCHANGED), None)
    if changed is not None:
        return f"{changed} changed beside a rewrite of {' and '.join(pair)}"
    found = [_changed(situation, source, column) for source, column in
             zip(pair, (keeping.provenance.column, keeping.provenance.paired.column), strict=True)]
    if (reason := next((f for f in found if isinstance(f, str)), None)) is not None:
        return reason
    (partitions, files), (paired, paired_files) = found
    if files and paired_files and situation.table.options.get(REFRESH_POLICY, "auto") == "auto":
        return (f"{' and '.join(pair)} were both rewritten with rows now: each one's joined with the other's "
                f"files costs as much as recomputing")
    return Retraction(keeping.source, tuple(sorted(partitions)), tuple(files), column=keeping.provenance.column,
                      paired_source=keeping.paired_source, paired=tuple(sorted(paired)), paired_files=tuple(paired_files))


def _other_branches(situation: Situation, source: str) -> Retraction | None:
    """A source read only by the UNION ALL branches that do not read the kept one: those branches'
    rows are computed again, the kept branch's stay."""
    rule, keeping = situation.known.rule, situation.known.keeping
    if not isinstance(rule, Linear) or not isinstance(situation.manifest.kept, KeptRows):
        return None
    for (_, start), occurrences in zip(rule.starts(), rule.occurrences, strict=True):
        if start <= keeping.provenance.occurrence < start + len(occurrences):
            return None if source in occurrences else Retraction(source, (OTHER_BRANCHES,), (), Way.BRANCHES)
    return None


def _diffed(situation: Situation, source: str, now: Listing) -> Retraction | str:
    """A small source rewritten is diffed with the content the state kept of it, where its partials
    subtract (a MIN or MAX over it is recomputed)."""
    kept, rule = situation.manifest.kept, situation.known.rule
    if isinstance(rule, TopN):
        return f"{source} was rewritten (a top-N over it is recomputed)"
    if not isinstance(rule, Aggregate) or not isinstance(kept, KeptState) or source not in kept.previous or \
            not keepable(rule, rule.sources.index(source)):
        return f"{source} was rewritten"
    if not subtracts(rule):
        return f"{source} was rewritten (a MIN or MAX over it is recomputed)"
    if '"decimal' in kept.schema:      # a weighed partial's DECIMAL type is not the kept one's
        return f"{source} was rewritten (a DECIMAL sum over it is recomputed)"
    return Retraction(source, (), tuple(sorted(now)), Way.DIFFED)


def _rejoins(situation: Situation) -> bool:
    """The partials are kept below the joins: another source's change is joined with them again,
    whatever the kept source did besides but a rewrite (its appended rows' partials join too)."""
    return _below(situation) is not None


def _padded_kept(situation: Situation, source: str) -> bool:
    """The source is the padded side of a LEFT JOIN whose partials are kept below it: any change of it
    joins them all again (its being held still asks nothing more)."""
    layout = _below(situation)
    return layout is not None and layout.padded and situation.manifest.kept.source == source


def _below(situation: Situation) -> Below | None:
    """Where the partials are kept below the joins, if they are."""
    kept, rule = situation.manifest.kept, situation.known.rule
    return below(rule, kept.provenance.occurrence) \
        if isinstance(kept, KeptState) and isinstance(rule, Aggregate) else None


def choose(situation: Situation, rebuild: bool = False) -> Choice:
    """Incremental when the rule holds, every source is unchanged or appended and can be read alone,
    and a stateful rule's state is at hand; otherwise full, saying why. `rebuild`: asked to refresh
    with no source changed, which recomputes (a user's way to rebuild the data)."""
    table, known, manifest, changes = situation.table, situation.known, situation.manifest, situation.changes
    rule = known.rule
    if table.options.get(REFRESH_POLICY) == "full":
        return Choice(rule, False, f"'{REFRESH_POLICY}' = 'full'")
    if isinstance(rule, Recompute):
        return Choice(rule, False, rule.reason)
    unreadable = next((r for r in known.readings.values() if isinstance(r, str)), None)
    if unreadable is not None:
        return Choice(rule, False, unreadable)
    readings = {s: r for s, r in known.readings.items() if isinstance(r, Reading)}
    if rebuild:
        return Choice(rule, False, "no source changed: a manual refresh recomputes", readings)
    if manifest is None:
        return Choice(rule, False, "the first refresh" if not table.source_snapshot else
                      "no manifest of the files the published data read", readings)
    retraction = None
    for source in readings:     # (what only the query above an aggregate reads is read whole: `above_only`)
        if changes[source].change is SourceChange.REWRITTEN and source not in above_only(rule):
            retraction = retracting(situation, source)
            if isinstance(retraction, str):
                return Choice(rule, False, retraction, readings)
        if changes[source].change is SourceChange.UNKNOWN:
            return Choice(rule, False, f"no manifest of the files {source} had", readings)
    appendable = appendable_held(rule)
    if isinstance(rule, Linear) and table.storage.format.lower() not in EXACT_FORMATS and takes_rows_away(
            rule, {s for s, d in changes.items() if d.change is SourceChange.APPENDED}):
        return Choice(rule, False, f"an append takes rows away, which {table.storage.format} files may not hold "
                      "exactly as computed", readings)
    held = [(s, where) for s, where in held_sources(rule).items() if changes[s].change is not SourceChange.UNCHANGED
            and not (changes[s].change is SourceChange.APPENDED and s in appendable)
            and not (retraction is not None and retraction.way is Way.REJOINED and retraction.source == s)
            and not _padded_kept(situation, s)]
    if held:
        return Choice(rule, False, f"{held[0][0]} changed: it is read {held[0][1]}", readings)
    if not known.state_kept:
        return Choice(rule, False, "no state kept yet" if isinstance(rule, STATEFUL) else
                      f"no provenance of its rows kept yet (by {known.keeping.source})", readings)
    if table.options.get(REFRESH_POLICY, "auto") != "auto" or retraction is not None or \
            all(d.change is not SourceChange.APPENDED for d in changes.values()):
        return Choice(rule, True, None, readings, retraction=retraction)
    weighed = known.estimate
    if weighed is None or weighed.incremental_cheaper:
        return Choice(rule, True, None, readings, weighed)
    return Choice(rule, False, f"recomputing is expected to cost less ({weighed.describe()})", readings, weighed)
