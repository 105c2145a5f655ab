"""Incremental refresh: a table brought up to date from what its sources appended, by the rule
`mt_magic.incremental` finds for its query.

Every relation a rule's SQL reads is exactly a set of files the snapshot listed (a source's old files,
its new ones, or only the appended ones), read alone with the source's schema: what the result is
computed from is what the manifest beside it says, whatever is written meanwhile. A linear rule's
change is written and published as a new version that links the old files and adds the new ones
(tables reading this one see an append). An aggregate's state (partials per group) or a top-N's (the
ranked rows within N) is merged with the change's, written beside the new version's data (`_state`, a
folder readers skip), and the data is the state's final projection: data and state are published
together, or neither is.
"""

from __future__ import annotations

import functools
import json
import re
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import types as T

from mt_magic.catalog.model import MaterializedTable, Storage
from mt_magic.config import REFRESH_POLICY
from mt_magic.errors import MaterializedTableError
from mt_magic.incremental.relations import Version
from mt_magic.incremental.rules import Aggregate, DistinctCount, Linear, Recompute, Rule, TopN, maintenance
from mt_magic.refresh.changes import SourceChange, SourceDelta, Snapshots, volatile
from mt_magic.refresh.full import FAILED_TASKS_SETTLE_S, RefreshResult, job_group, shape
from mt_magic.spark.analysis import analysed_operators
from mt_magic.spark.errors import spark_call
from mt_magic.spark.frames import counting_rows, files_frame, query_frame, query_over
from mt_magic.spark.jobs import job_scope
from mt_magic.spark.types import type_from_json
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.manifests import Manifest
from mt_magic.storage.formats import data_source_options, folder_writer
from mt_magic.storage.linked import extended
from mt_magic.storage.versions import Target, TableStorage

READABLE_FORMATS = ("parquet", "orc")      # a plain source's files read alone with no options
SCHEMA_TTL_S = 30.0
STATE_FOLDER = "_state"
STATE_FORMAT = "parquet"
# What Spark may make of a linear query and still add rows only as its sources do.
_STATEFUL = (Aggregate, DistinctCount, TopN)        # the rules that keep a state beside the data
Stateful = Aggregate | DistinctCount | TopN
_NOT_LINEAR = {"Aggregate", "Window", "WindowGroupLimit", "Distinct", "Deduplicate", "GlobalLimit", "LocalLimit",
               "Offset", "Sort", "Sample", "Except", "Intersect", "Expand", "Join LeftOuter", "Join RightOuter",
               "Join FullOuter", "Join LeftSemi", "Join LeftAnti", "Join ExistenceJoin"}


@dataclass(frozen=True)
class Reading:
    """How a source's files are read alone."""

    format: str
    schema: T.StructType
    options: dict[str, str]
    partition_columns: tuple[str, ...]


@dataclass(frozen=True)
class Maintained:
    """An incremental run: what readers see now (unchanged when the change added no row) and the
    state to name in the manifest."""

    result: RefreshResult
    state: str | None = None
    state_schema: str | None = None

    def manifest(self, listings: dict) -> Manifest:
        return Manifest(listings, self.state, self.state_schema)


@dataclass(frozen=True)
class Choice:
    """How the next whole refresh runs, and why not incrementally when it does not."""

    rule: Rule
    incremental: bool
    reason: str | None = None
    readings: dict[str, Reading] = field(default_factory=dict)

    @property
    def keeps_state(self) -> bool:
        """A full refresh that computes the state too (from exactly the files listed)."""
        return not self.incremental and isinstance(self.rule, _STATEFUL) and bool(self.readings)


class Maintainer:
    """The rules of this process's tables, judged by Spark once per definition, and their runs."""

    def __init__(self, spark: Any, storage: TableStorage, snapshots: Snapshots) -> None:
        self.spark = spark
        self.storage = storage
        self.snapshots = snapshots
        self._rules: dict[str, tuple[str, Rule]] = {}
        self._schemas: dict[str, tuple[float, T.StructType]] = {}

    # ------------------------------------------------------------------ rules
    def rule(self, table: MaterializedTable) -> Rule:
        known = self._rules.get(table.identifier)
        if known is not None and known[0] == table.definition_query:
            return known[1]
        rule = _unjudged(table)
        if not isinstance(rule, Recompute):
            rule = self._judged(table, rule)
        self._rules[table.identifier] = (table.definition_query, rule)
        return rule

    def _judged(self, table: MaterializedTable, rule: Linear | Stateful) -> Rule:
        """Spark's reading of what the rule wrote: a rule is trusted only where Spark agrees."""
        def real(i: int, _version: Version) -> str:
            return ".".join(quote_identifier(p) for p in rule.sources[i].split(".", 2))
        try:
            if isinstance(rule, Linear):
                found = analysed_operators(query_frame(self.spark, table.definition_query)) & _NOT_LINEAR
                return Recompute(f"Spark plans it with {sorted(found)[0]}") if found else rule
            state = query_frame(self.spark, rule.state(real))
            schema = spark_call(lambda: state.schema, "Analysing the state")
            if isinstance(rule, Aggregate) and any(
                    isinstance(schema.fields[len(rule.keys) + j].dataType, T.DecimalType) for j in rule.averaged):
                return Recompute("AVG of a DECIMAL (its rounding is recomputed, not merged)")
            probe = f"mt_state_{uuid.uuid4().hex[:10]}"      # the state's schema, with no plan of its own
            with query_over(self.spark, rule.output(probe, table.query_columns),
                            {probe: self.spark.createDataFrame([], schema)}) as out:
                found = analysed_operators(out) & ({"Window"} if isinstance(rule, DistinctCount)
                                                   else {"Aggregate", "Window"})
            return Recompute("an output expression that is not a group key or a merged aggregate") if found else rule
        except MaterializedTableError as error:
            return Recompute(f"its delta does not analyse ({str(error).splitlines()[0][:120]})")

    def reading(self, source: str) -> Reading | str:
        """How `source`'s files are read alone, or why they cannot be."""
        upstream = self.snapshots.store.get(source)
        if upstream is not None:
            columns = upstream.columns
            keys = {k.lower() for k in upstream.partition_keys}
            ordered = [c for c in columns if c.name.lower() not in keys] + \
                [c for k in upstream.partition_keys for c in columns if c.name.lower() == k.lower()]
            schema = T.StructType([T.StructField(c.name, type_from_json(c.type_json), True) for c in ordered])
            return Reading(upstream.storage.format, schema, data_source_options(upstream.options),
                           upstream.partition_keys)
        facts = self.snapshots.facts(source)
        provider = (facts.provider or "").lower() if facts else ""
        if provider not in READABLE_FORMATS:
            return f"{source} is stored as {provider or 'a relation that is not files'}"
        stamp, schema = self._schemas.get(source, (0.0, None))
        if schema is None or time.monotonic() - stamp > SCHEMA_TTL_S:
            quoted = ".".join(quote_identifier(p) for p in source.split(".", 2))
            schema = spark_call(lambda: self.spark.table(quoted).schema, f"Reading the schema of {source}")
            self._schemas[source] = (time.monotonic(), schema)
        return Reading(provider, schema, {}, facts.partition_columns)

    def technique(self, table: MaterializedTable, judged: bool = True) -> str:
        """What a refresh after appends to the sources does, and how (DESCRIBE, EXPLAIN). Not `judged`:
        by the rules alone, without asking Spark (a CREATE's summary, which must stay cheap)."""
        if table.streams:
            return "stream: Spark Structured Streaming maintains it"
        if table.options.get(REFRESH_POLICY) == "full":
            return f"full: '{REFRESH_POLICY}' = 'full'"
        return (self.rule(table) if judged else _unjudged(table)).describe()

    def choose(self, table: MaterializedTable, changes: dict[str, SourceDelta],
               manifest: Manifest | None, rebuild: bool = False) -> Choice:
        """Incremental when the rule holds, every source is unchanged or appended and can be read
        alone, and an aggregate's state is at hand; otherwise full, saying why. `rebuild`: asked to
        refresh with no source changed, which recomputes (a user's way to rebuild the data)."""
        rule = self.rule(table)
        if table.options.get(REFRESH_POLICY) == "full":
            return Choice(rule, False, f"'{REFRESH_POLICY}' = 'full'")
        if isinstance(rule, Recompute):
            return Choice(rule, False, rule.reason)
        readings: dict[str, Reading] = {}
        for source in dict.fromkeys(rule.sources):
            reading = self.reading(source)
            if isinstance(reading, str):
                return Choice(rule, False, reading)
            readings[source] = reading
        if rebuild:
            return Choice(rule, False, "no source changed: a manual refresh recomputes", readings)
        if manifest is None:
            return Choice(rule, False, "the first refresh" if not table.source_snapshot else
                          "no manifest of the files the published data read", readings)
        for source in readings:
            change = changes[source]
            if change.change is SourceChange.REWRITTEN:
                return Choice(rule, False, f"{source} was rewritten", readings)
            if change.change is SourceChange.UNKNOWN:
                return Choice(rule, False, f"no manifest of the files {source} had", readings)
        if isinstance(rule, _STATEFUL) and (manifest is None or manifest.state is None or
                                            not self.storage.files.exists(manifest.state)):
            return Choice(rule, False, "no state kept yet", readings)
        return Choice(rule, True, None, readings)

    # ------------------------------------------------------------------- runs
    def maintain(self, table: MaterializedTable, rule: Linear | Stateful, changes: dict[str, SourceDelta],
                 readings: dict[str, Reading], manifest: Manifest | None) -> Maintained:
        """The refresh from the change: `changes` has every source unchanged or appended, and for an
        aggregate `manifest` names the state the published data was computed with."""
        appended = {s for s, d in changes.items() if d.change is SourceChange.APPENDED}
        if not appended:        # the published data and its state stay what they are
            return Maintained(RefreshResult(table.storage, 0, 0.0, job_group(table)),
                              manifest.state if manifest else None, manifest.state_schema if manifest else None)
        with self._scope(table, "incremental") as relations:
            names = relations.naming(rule.sources, changes, readings)
            if isinstance(rule, Linear):
                return self._append(table, rule.delta(appended, names.name), relations)
            old = relations.add("old_state", self.spark.read.format(STATE_FORMAT).schema(
                T.StructType.fromJson(json.loads(manifest.state_schema))).load(manifest.state))
            return self._stateful(table, rule, rule.merged(old, appended, names.name) or f"SELECT * FROM {old}",
                                   relations)

    def recompute(self, table: MaterializedTable, rule: Stateful, changes: dict[str, SourceDelta],
                  readings: dict[str, Reading]) -> Maintained:
        """A whole refresh of an aggregate that keeps its state: from exactly the files listed now."""
        with self._scope(table, "full, keeping the state") as relations:
            names = relations.naming(rule.sources, changes, readings)
            return self._stateful(table, rule, rule.state(names.name), relations)

    def _scope(self, table: MaterializedTable, what: str) -> _Relations:
        return _Relations(self.spark, table, what)

    def _append(self, table: MaterializedTable, delta: str | None, relations: _Relations) -> Maintained:
        started = time.monotonic()
        if delta is None:
            return Maintained(RefreshResult(table.storage, 0, time.monotonic() - started, relations.group))
        with relations.query(delta) as frame:
            frame, rows = counting_rows(shape(frame.toDF(*table.query_columns), table.columns, table.identifier))
            stage = self.storage.new_version(table)
            try:
                self._write(table, frame, stage)
                if rows() == 0:
                    return Maintained(RefreshResult(table.storage, 0, time.monotonic() - started, relations.group))
                version = extended(self.storage, table, stage)
                published = self._publish(table, version)
            finally:
                self.storage.remove(stage)
        return Maintained(RefreshResult(published, rows(), time.monotonic() - started, relations.group))

    def _stateful(self, table: MaterializedTable, rule: Stateful, state_sql: str,
                   relations: _Relations) -> Maintained:
        started = time.monotonic()
        stage = self.storage.new_version(table)
        try:
            with relations.query(state_sql) as state:
                schema = spark_call(lambda: state.schema, f"Refreshing {table.identifier}")
                spark_call(lambda: state.write.format(STATE_FORMAT).mode("error").save(stage),
                           f"Refreshing {table.identifier}")
            merged = relations.add("state", self.spark.read.format(STATE_FORMAT).schema(schema).load(stage))
            with relations.query(rule.output(merged, table.query_columns)) as output:
                frame, rows = counting_rows(shape(output, table.columns, table.identifier))
                version = self.storage.new_version(table)
                self._write(table, frame, version)
            self.storage.files.mkdirs(version)
            state_folder = f"{version}/{STATE_FOLDER}"
            self.storage.files.rename(stage, state_folder)
            published = self._publish(table, version)
        except BaseException:
            self.storage.remove(stage)
            raise
        self.storage.written(stage)
        return Maintained(RefreshResult(published, rows(), time.monotonic() - started, relations.group),
                          state_folder, schema.json())

    def _write(self, table: MaterializedTable, frame: Any, folder: str) -> None:
        writer = folder_writer(frame, table.storage.format, data_source_options(table.options), table.partition_keys)
        try:
            spark_call(lambda: writer.save(folder), f"Refreshing {table.identifier}")
        except BaseException:
            self.storage.remove(folder, settle_s=FAILED_TASKS_SETTLE_S)
            raise

    def _publish(self, table: MaterializedTable, version: str) -> Storage:
        try:
            published = self.storage.publish(table, version, Target())
        except BaseException:
            self.storage.discard_version(table, version)
            raise
        self.storage.written(version)
        return published


def _unjudged(table: MaterializedTable) -> Rule:
    """The rule by syntax alone (Spark has not yet read what it writes)."""
    calls = volatile(table)
    return Recompute(f"the non-deterministic function {calls[0].upper()}") if calls else \
        maintenance(table.definition_query)


class _Names:
    def __init__(self, nonce: str) -> None:
        self.nonce = nonce

    def name(self, index: int, version: Version) -> str:
        return f"mt_{self.nonce}_{index}_{version.value}"


class _Relations:
    """The DataFrames one incremental run reads, by the names its SQL gives them, in its job group."""

    def __init__(self, spark: Any, table: MaterializedTable, what: str) -> None:
        self.spark = spark
        self.table = table
        self.what = what
        self.nonce = uuid.uuid4().hex[:10]
        self.frames: dict[str, Any] = {}
        self.group = job_group(table)
        self._scope = None

    def __enter__(self) -> _Relations:
        self._scope = job_scope(self.spark, self.group, f"refresh {self.table.identifier} ({self.what})")
        self._scope.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._scope.__exit__(*exc)

    def naming(self, sources: tuple[str, ...], changes: dict[str, SourceDelta],
               readings: dict[str, Reading]) -> _Names:
        names = _Names(self.nonce)
        for index, source in enumerate(sources):
            change, reading = changes[source], readings[source]
            for version, files in ((Version.OLD, change.kept), (Version.NEW, change.files),
                                   (Version.DELTA, change.added)):
                self.frames[names.name(index, version)] = functools.partial(
                    files_frame, self.spark, reading.format, reading.schema, reading.options, files,
                    reading.partition_columns)
        return names

    def add(self, what: str, frame: Any) -> str:
        name = f"mt_{self.nonce}_{what}"
        self.frames[name] = frame
        return name

    def query(self, sql: str) -> AbstractContextManager:
        """The query over the relations it names (the others are not even built)."""
        return query_over(self.spark, sql, {n: f() if callable(f) else f for n, f in self.frames.items()
                                            if re.search(rf"\b{n}\b", sql)})
