"""Which technique a table's next whole refresh uses, and why: the delta rule of its query (judged
by Spark once per definition), whether its sources' files can be read alone, what they did since the
published data was computed, and — under `'refresh.policy' = 'auto'` — whether maintaining it from the
change is expected to cost less than recomputing it (`mt_magic.incremental.cost`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyspark.sql import types as T

from mt_magic.catalog.model import MaterializedTable
from mt_magic.config import REFRESH_POLICY
from mt_magic.errors import MaterializedTableError
from mt_magic.incremental.below_join import below, qualified, unnamed_padding
from mt_magic.incremental.distinct_pairs import retractable
from mt_magic.incremental.keyed_subqueries import keyed_sources, keyed
from mt_magic.incremental.cost import STATE_PASSES, Estimate, SourceBytes, Within, estimate, estimate_below
from mt_magic.incremental.occurrences import Version
from mt_magic.incremental.plan import maintained_plan
from mt_magic.incremental.rules import (Aggregate, DistinctCount, Linear, Recompute, Rule, TopN, apart_occurrences,
                                        monotone_occurrences, maintenance, takes_rows_away)
from mt_magic.incremental.provenance import FILE
from mt_magic.refresh.changes import SourceChange, SourceDelta, Snapshots
from mt_magic.refresh.key_bounds import Bounds, key_bounds
from mt_magic.refresh.keeping import fits, keeping_of, paired
from mt_magic.refresh.provenance_state import Keeping, Retraction
from mt_magic.spark.query_plans import analysed_operators
from mt_magic.spark.commands import alongside, settle
from mt_magic.spark.errors import spark_call
from mt_magic.spark.tables import table_facts
from mt_magic.spark.files import Files
from mt_magic.spark.frames import query_frame, query_over
from mt_magic.spark.types import type_from_json
from mt_magic.sql.statements import quote_identifier
from mt_magic.sql.volatile import volatile_calls
from mt_magic.storage.formats import data_source_options
from mt_magic.storage.manifests import KeptState, Manifest
from mt_magic.storage.versions import data_locations

READABLE_FORMATS = ("parquet", "orc")      # a plain source's files read alone with no options
SCHEMA_TTL_S = 30.0
STATEFUL = (Aggregate, DistinctCount, TopN)        # the rules that keep a state beside the data
FULL_BY_POLICY = f"full: '{REFRESH_POLICY}' = 'full'"
Stateful = Aggregate | DistinctCount | TopN
_A = TypeVar("_A")
# What Spark may make of a linear query and still change rows only as its sources' appends do (a full
# outer join's padded rows an append to either side matches are taken away: `refresh.taken_rows`).
_NOT_LINEAR = {"Aggregate", "Window", "WindowGroupLimit", "Distinct", "Deduplicate", "GlobalLimit", "LocalLimit",
               "Offset", "Sort", "Sample", "Except", "Intersect", "Expand", "Join ExistenceJoin"}


@dataclass(frozen=True)
class Reading:
    """How a source's files are read alone."""

    format: str
    schema: T.StructType
    options: dict[str, str]
    partition_columns: tuple[str, ...]
    # Spark's own relation of the table reads what a snapshot lists: one folder of files, not
    # partitioned (a partition the catalog does not know is not read), not a materialized table.
    as_listed: bool = False
    file_column: str | None = None      # each row carries the name of its file (a table keeping by FILE)


@dataclass(frozen=True)
class Choice:
    """How the next whole refresh runs, and why not incrementally when it does not."""

    rule: Rule
    incremental: bool
    reason: str | None = None
    readings: dict[str, Reading] = field(default_factory=dict)
    estimate: Estimate | None = None        # what the cost rule weighed, where it did
    retraction: Retraction | None = None    # the kept source's rewritten partitions, retracted


@dataclass(frozen=True)
class Known:
    """What choosing a technique asks Spark and the files: the rule, each source's reading (or why
    its files cannot be read alone), whether the state named by the manifest exists, and the cost
    rule's estimate where it can be made (None elsewhere)."""

    rule: Rule
    readings: dict[str, Reading | str]
    state_kept: bool = False
    estimate: Estimate | None = None
    keeping: Keeping | None = None          # what an aggregate's partials (a linear table's rows) are kept by
    bounds: Bounds = field(default_factory=Bounds)     # the appended rows' join keys, bounding the others' reads


class Chooser:
    """The rules of this process's tables, judged by Spark once per definition, and each refresh's
    technique."""

    def __init__(self, spark: Any, files: Files, snapshots: Snapshots) -> None:
        self.spark = spark
        self.files = files
        self.snapshots = snapshots
        # Answers being asked or given (over Connect a question goes out as soon as it is known, and
        # whoever needs the answer waits for it); a failed one is asked again.
        self._rules: dict[str, tuple[str, Future[Rule]]] = {}
        self._schemas: dict[str, tuple[float, Future[T.StructType]]] = {}
        self._lock = threading.Lock()

    def rule(self, table: MaterializedTable) -> Rule:
        return self._settled(self._rules, table.identifier, self._judging(table))

    def _judging(self, table: MaterializedTable) -> tuple[str, Future[Rule]]:
        return self._asking(self._rules, table.identifier, table.definition_query,
                            lambda known: known != table.definition_query, lambda: self._judged_rule(table))

    def _judged_rule(self, table: MaterializedTable) -> Rule:
        rule = _unjudged(table)
        counted = self._counted(rule, table.definition_query)
        if counted or unnamed_padding(rule):       # its columns named by their tables, by Spark's schemas
            named = qualified(table.definition_query, {
                source: self._schema(source).fieldNames() for source in dict.fromkeys(rule.sources)})
            rule = next((r for r in map(rule_by_syntax, [keyed(named, counted)] * bool(counted) + [named])
                         if not isinstance(r, Recompute)), rule)
        return rule if isinstance(rule, Recompute) else self._judged(table, rule)

    def _counted(self, rule: Rule, query: str) -> set[str]:
        """The sources subqueries read by their keys (`keyed_subqueries`): partitioned ones, where the query reads
        no other partitioned source or aggregates (written whole either way; TPC-H Q4's orders read whole)."""
        aggregates = isinstance(rule, Aggregate)
        tested = keyed_sources(query, aggregates) & set(rule.sources) if not isinstance(rule, Recompute) else set()
        partitioned = {source for source in rule.sources if self._partitioned(source)} if tested else set()
        return tested & partitioned if partitioned <= tested or aggregates else set()

    def _partitioned(self, source: str) -> bool:
        """Whether a source is partitioned: a materialized table's keys, else what Spark's catalog says."""
        upstream = self.snapshots.store.get(source)
        if upstream is not None:
            return bool(upstream.partition_keys)
        facts = self.snapshots.facts(source) or \
            table_facts(self.spark, ".".join(quote_identifier(p) for p in source.split(".", 2)))
        return bool(facts.partition_columns)

    def _asking(self, answers: dict[str, tuple[Any, Future[_A]]], key: str, token: Any,
                stale: Callable[[Any], bool], request: Callable[[], _A]) -> tuple[Any, Future[_A]]:
        """The answer to `key` being asked or given; else `request` sent now (over Connect not waited
        for), `token` marking what it answers."""
        with self._lock:
            known = answers.get(key)
            if known is not None and not stale(known[0]):
                return known
            known = (token, Future())
            answers[key] = known
        alongside(self.spark, settle, known[1], request)
        return known

    def _settled(self, answers: dict[str, tuple[Any, Future[_A]]], key: str, entry: tuple[Any, Future[_A]]) -> _A:
        """The answer; a failed one is forgotten, to be asked again."""
        try:
            return entry[1].result()
        except BaseException:
            with self._lock:
                if answers.get(key) is entry:
                    del answers[key]
            raise

    def _judged(self, table: MaterializedTable, rule: Linear | Stateful) -> Rule:
        """Spark's reading of what the rule wrote: a rule is trusted only where Spark agrees."""
        def real(i: int, _version: Version) -> str:
            return ".".join(quote_identifier(p) for p in rule.sources[i].split(".", 2))
        try:
            if isinstance(rule, Linear):
                found = analysed_operators(query_frame(self.spark, table.definition_query)) & _NOT_LINEAR
                return Recompute(f"Spark plans it with {sorted(found)[0]}") if found else rule
            state_sql = rule.state(real)
            # The output over the state, its operators read outside the state's own: one request, and
            # the state's schema beside it (a plan of its own) where an average's type matters.
            schema = alongside(self.spark, spark_call, lambda: query_frame(self.spark, state_sql).schema,
                               "Analysing the state") if isinstance(rule, Aggregate) and rule.averaged else None
            state = query_frame(self.spark, state_sql)
            probe = f"mt_state_{uuid.uuid4().hex[:10]}"
            # (grouping sets, DISTINCT aggregates: judged per state row; the rule's own aggregate merges them)
            output = rule.output(probe, table.query_columns, regrouped=False) \
                if isinstance(rule, Aggregate) and rule.regroups else rule.output(probe, table.query_columns)
            if isinstance(rule, Aggregate) and rule.above is not None:
                with query_over(self.spark, output, {probe: state}) as above:   # it analyses, over the state
                    spark_call(lambda: above.schema, "Analysing the query above the aggregate")
                # judged by its own aggregate's result: the query above aggregates what that result holds
                output = rule.own_output(probe, rule.own_names, regrouped=not rule.regroups)
            with query_over(self.spark, output, {probe: state}) as out:
                found = analysed_operators(out, outside=probe) & ({"Window"} if isinstance(rule, DistinctCount)
                                                                  else {"Aggregate", "Window"})
            if schema is not None and any(isinstance(schema.result().fields[len(rule.keys) + j].dataType,
                                                     T.DecimalType) for j in rule.averaged):
                return Recompute("AVG of a DECIMAL (its rounding is recomputed, not merged)")
            return Recompute("an output expression that is not a group key or a merged aggregate") if found else rule
        except MaterializedTableError as error:
            return Recompute(f"its delta does not analyse ({str(error).splitlines()[0][:120]})")

    def prepare(self, table: MaterializedTable) -> None:
        """Ask what choosing asks Spark that the snapshot does not — the rule, judged, and the schemas
        of the sources never read before — and wait for the answers. Over Connect the requests travel
        together, beside the snapshot's; a failure here is met again, and reported, where the choice
        asks."""
        for answer in self.begin(table):
            with contextlib.suppress(MaterializedTableError):
                answer()

    def begin(self, table: MaterializedTable) -> list[Callable[[], object]]:
        """Send what `prepare` asks, not waiting (a CREATE sends it as soon as its table is known); how
        to wait for each answer."""
        answers: list[Callable[[], object]] = [functools.partial(self.rule, table)]
        self._judging(table)
        rule = _unjudged(table)
        if isinstance(rule, Recompute) or table.options.get(REFRESH_POLICY) == "full":
            return answers
        for source in dict.fromkeys(rule.sources):
            if self.snapshots.store.get(source) is None:
                self._asking_schema(source)
                answers.append(functools.partial(self._schema, source))
        return answers

    def reading(self, source: str) -> Reading | str:
        """How `source`'s files are read alone, or why they cannot be."""
        upstream = self.snapshots.store.get(source)
        if upstream is not None:
            return table_reading(upstream)
        facts = self.snapshots.facts(source)
        provider = (facts.provider or "").lower() if facts else ""
        if provider not in READABLE_FORMATS:
            return f"{source} is stored as {provider or 'a relation that is not files'}"
        return Reading(provider, self._schema(source), {}, facts.partition_columns, not facts.partition_columns)

    def _schema(self, source: str) -> T.StructType:
        return self._settled(self._schemas, source, self._asking_schema(source))

    def _asking_schema(self, source: str) -> tuple[float, Future[T.StructType]]:
        quoted = ".".join(quote_identifier(p) for p in source.split(".", 2))
        return self._asking(self._schemas, source, time.monotonic(),
                            lambda asked: time.monotonic() - asked > SCHEMA_TTL_S,
                            lambda: spark_call(lambda: self.spark.table(quoted).schema, f"Reading the schema of {source}"))

    def technique(self, table: MaterializedTable, judged: bool = True) -> str:
        """What a refresh after appends to the sources does, and how (DESCRIBE, EXPLAIN). Not `judged`:
        by the rules alone, without asking Spark (a CREATE's summary, which must stay cheap)."""
        if table.streams:
            return "stream: Spark Structured Streaming maintains it"
        if table.options.get(REFRESH_POLICY) == "full":
            return FULL_BY_POLICY
        return (self.rule(table) if judged else _unjudged(table)).describe()

    def plan(self, table: MaterializedTable) -> list[str]:
        """The maintained plan a refresh after appends runs: its operators, rules and state (DESCRIBE
        EXTENDED, EXPLAIN)."""
        if table.streams or table.options.get(REFRESH_POLICY) == "full":
            return [self.technique(table)]
        rule = self.rule(table)
        keeping = self._keeping(table, rule, {source: self.reading(source) for source in dict.fromkeys(rule.sources)}) \
            if isinstance(rule, Aggregate) else None
        return maintained_plan(rule, below(rule, keeping.provenance.occurrence) if keeping is not None else None)

    def _keeping(self, table: MaterializedTable, rule: Rule, readings: dict[str, Reading | str]) -> Keeping | None:
        """What the table keeps its derived rows by (`keeping_of`): nothing where it is partitioned like
        the source, whose changed partitions the refresh rewrites."""
        keeping = keeping_of(rule, readings, self.snapshots.store.get)
        if keeping is not None and table.partition_keys and keeping.source.lower() in self.snapshots.lineage(table).columns:
            return None
        return keeping

    def known(self, table: MaterializedTable, changes: dict[str, SourceDelta], manifest: Manifest | None) -> Known:
        """What choosing a technique asks Spark and the files (`decision.choose` decides with it): the
        rule, each source's reading, whether the manifest's state exists, and — where only appends
        happened, under the cost rule — its estimate."""
        rule = self.rule(table)
        if table.options.get(REFRESH_POLICY) == "full" or isinstance(rule, Recompute):
            return Known(rule, {})
        readings = {source: self.reading(source) for source in dict.fromkeys(rule.sources)}
        keeping = self._keeping(table, rule, readings)
        if keeping is not None and keeping.provenance.column == FILE:
            readings[keeping.source] = dataclasses.replace(readings[keeping.source], file_column=FILE)
        if keeping is not None and isinstance(rule, (Aggregate, DistinctCount)):
            rule = retractable(rule)
            keeping = paired(keeping, rule, readings, self.snapshots.store.get)
        if manifest is None or any(isinstance(r, str) for r in readings.values()):
            return Known(rule, readings, keeping=keeping)
        kept = (not isinstance(rule, STATEFUL) or manifest.state_folder is not None
                and self.files.exists(manifest.state_folder)) and fits(rule, manifest, keeping)
        appended = any(d.change is SourceChange.APPENDED for d in changes.values())
        bounds, within = key_bounds(rule, readings, changes) if kept and appended else (Bounds(), None)
        weighs = kept and appended and table.options.get(REFRESH_POLICY, "auto") == "auto" and \
            all(d.change in (SourceChange.UNCHANGED, SourceChange.APPENDED) for d in changes.values())
        return Known(rule, readings, kept, self._estimate(table, rule, changes, manifest, within) if weighs else None,
                     keeping, bounds)

    def _estimate(self, table: MaterializedTable, rule: Linear | Stateful, changes: dict[str, SourceDelta],
                  manifest: Manifest, within: Within | None) -> Estimate:
        """The cost rule, over the bytes the listings and the state's files hold (a state in the
        data's files: its columns' share of them, the rest being written by either technique)."""
        above = rule.sources[len(rule.aggregated):] if isinstance(rule, Aggregate) else ()
        branches = rule.occurrences if isinstance(rule, Linear) else (rule.sources[:len(rule.sources) - len(above)],)
        sources = {s: SourceBytes(d.total_bytes - d.added_bytes, d.added_bytes) for s, d in changes.items()}
        state = sum(size for path in manifest.state_paths(table.storage) for size, _ in
                    self.files.listing(path).values()) if isinstance(rule, STATEFUL) else None
        if state is not None and manifest.carried:
            state = state * len(manifest.state_columns) // (manifest.hidden_columns + len(table.columns))
        taking = isinstance(rule, Linear) and takes_rows_away(rule, {s for s, d in changes.items() if d.added_bytes})
        if taking:
            state = sum(size for location in data_locations(table.storage)
                        for size, _ in self.files.listing(location).values())
        layout = below(rule, kept.provenance.occurrence) if isinstance(rule, Aggregate) and \
            isinstance(kept := manifest.kept, KeptState) else None
        if layout is not None:
            partials = sum(size for size, _ in self.files.listing(kept.folder).values()) \
                if self.files.exists(kept.folder) else 0
            return estimate_below(kept.source, sources, partials, state or 0, layout.padded)
        # merged from its partials: read, none written — unless another source's append reaches them all
        merged = manifest.merged_from_partials and all(s == manifest.kept.source or not b.added for s, b in sources.items())
        work = "writing the table's rows again without those taken away" if taking else \
            "merging the state from the partials kept by source partition" if manifest.merged_from_partials else ""
        return estimate(branches, sources, state, within, set(monotone_occurrences(rule)), work, apart_occurrences(rule),
                        above, 1 if merged else STATE_PASSES)


def table_reading(table: MaterializedTable) -> Reading:
    """How a materialized table's own files are read alone: its columns as stored, partition columns
    last (as Spark reads them from the folders)."""
    keys = {k.lower() for k in table.partition_keys}
    ordered = [c for c in table.columns if c.name.lower() not in keys] + \
        [c for k in table.partition_keys for c in table.columns if c.name.lower() == k.lower()]
    schema = T.StructType([T.StructField(c.name, type_from_json(c.type_json), True) for c in ordered])
    return Reading(table.storage.format, schema, data_source_options(table.options), table.partition_keys)



def _unjudged(table: MaterializedTable) -> Rule:
    """The rule by syntax alone (Spark has not yet read what it writes)."""
    return rule_by_syntax(table.definition_query)


@functools.lru_cache(maxsize=256)
def rule_by_syntax(definition_query: str) -> Rule:
    """Parsing a query costs milliseconds; a statement asks its rule several times (the rules are frozen)."""
    calls = volatile_calls(definition_query)
    return Recompute(f"the non-deterministic function {calls[0].upper()}") if calls else maintenance(definition_query)
