"""One refresh run and its record: under the table's lock, compare the sources' snapshots, skip or
rewrite (the whole table or the changed partitions), then record the outcome in the catalog store and
in the history — a refresh that is not recorded did not happen, for the user."""

from __future__ import annotations

import logging
import os
import socket
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from mt_magic import config as cfg
from mt_magic.catalog.history import RefreshEntry, RefreshHistory, Runner, Technique, Trigger
from mt_magic.catalog.model import MaterializedTable, Outcome, RefreshOutcome, now_iso
from mt_magic.errors import ExecutionError, MaterializedTableError, TableNotFoundError
from mt_magic.manager.failures import clear_failures
from mt_magic.manager.workspace import Workspace
from mt_magic.refresh.changes import Change, Snapshot, SourceChange, Snapshots
from mt_magic.refresh.choice import Chooser, Known
from mt_magic.refresh.decision import RefreshDecision, Situation, decide
from mt_magic.refresh.full import job_group, run_refresh
from mt_magic.refresh.incremental import Maintainer
from mt_magic.refresh.maintained import Maintained
from mt_magic.refresh.table_change import table_change, unchanged
from mt_magic.storage.manifests import Manifests
from mt_magic.spark.tables import forgetting_listings
from mt_magic.spark.commands import alongside
from mt_magic.spark.errors import error_text, spark_call
from mt_magic.spark.files import WRITE_WAIT_S, Listing
from mt_magic.spark.jobs import group_jobs
from mt_magic.spark.sessions import session_info
from mt_magic.sql.freshness import IntervalFreshness

log = logging.getLogger(__name__)
READ_ATTEMPTS = 3           # reads of sources that kept changing under a refresh, before it fails


@dataclass(frozen=True)
class _Started:
    at: str                     # when, for the record
    clock: float                # time.monotonic() then
    schedule_time: str | None


@dataclass(frozen=True)
class _Work:
    """What a run's record measures from: when it began running, and its job group's jobs before."""

    clock: float
    jobs: frozenset[int] | None
    files: Listing              # the table's published files


class _Moved(Exception):
    """A source changed while a refresh read it: what it wrote is of no state the source had."""


class Runs:
    """The refresh runs of one process: which run now, when a skip last matched, and the history."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.snapshots = Snapshots(ws.spark, ws.files, ws.store, ws.analyzer)
        self.manifests = Manifests(ws.files)
        self.chooser = Chooser(ws.spark, ws.files, self.snapshots)
        self.maintainer = Maintainer(ws.spark, ws.storage)
        self.history = RefreshHistory(ws.store.path, int(ws.options.get(cfg.HISTORY_RETENTION)))
        self.running: set[str] = set()
        self.matched: dict[str, float] = {}    # table → epoch seconds a skip last found its sources unchanged
        self.owner = False        # this process runs the store's pipelines (set by the gateway)

    def begin(self, table: MaterializedTable) -> None:
        """Send what a new table's first refresh asks Spark before it reads (its rule judged, where its
        sources live), not waiting: over Connect the answers come while the statement goes on."""
        self.chooser.begin(table)
        self.snapshots.begin(table.source_tables)

    def situation(self, table: MaterializedTable, whole: bool = True) -> Situation:
        """What a refresh of `table` knows now, to decide by (the run and EXPLAIN alike). `whole`: the
        refresh may rewrite the whole table, so what choosing asks Spark is sent now, beside the
        snapshot (over Connect the requests travel together)."""
        preparing = alongside(self.ws.spark, self.chooser.prepare, table) if whole else None
        snapshot, listings = self._steady_snapshot(table)

        def known(situation: Situation) -> Known:
            if preparing is not None:
                preparing.result()
            return self.chooser.known(table, situation.changes, situation.manifest)
        return Situation(table, snapshot, listings, lambda: self.manifests.read(table.storage.root, table.source_snapshot),
                         self.snapshots.relatives(table), known)

    def run(self, table: MaterializedTable, spec: dict[str, str], trigger: Trigger,
            schedule_time: str | None = None, only_changed: bool = False) -> tuple[MaterializedTable, RefreshOutcome]:
        """One refresh at a time per table: what it knows, the decision (`decide`), the run, and its
        record in the catalog store and the history, whatever the outcome."""
        identifier = table.identifier
        with self.ws.lock(identifier):
            current = self.ws.store.get(identifier)
            if current is None:
                raise TableNotFoundError(f"Materialized table {identifier} was dropped.")
            started = _Started(now_iso(), time.monotonic(), schedule_time)
            try:        # a run that fails while deciding (a source dropped meanwhile) is recorded too
                listings = forgetting_listings(self.ws.spark, current.source_tables) \
                    if self.snapshots.looks_up(current) else None
                situation = self.situation(current, whole=not spec and trigger is not Trigger.BACKFILL)
                decision = decide(situation, spec, trigger, only_changed)
            except BaseException as error:
                self._failed(current, trigger, None, started, error, spec)
                raise
            if decision.technique is Technique.SKIP:
                return current, self._skipped(current, trigger, decision, started)
            dynamic = current.dynamic_options if trigger in (Trigger.SCHEDULED, Trigger.CATCH_UP) else {}
            self.running.add(identifier)
            work = _Work(time.monotonic(), group_jobs(self.ws.spark, job_group(current)),
                         self.ws.storage.published_files(current))
            try:
                maintained, read = self._execute(situation, decision, dynamic, listings)
            except BaseException as error:
                self._failed(current, trigger, decision, started, error)
                raise
            finally:
                self.running.discard(identifier)
                if situation.comparison.change is not Change.NONE:
                    self.snapshots.forget(current)  # a changed source may have moved: asked again next time
            return self._succeeded(situation, decision, trigger, started, maintained, read, work)

    def _skipped(self, table: MaterializedTable, trigger: Trigger, decision: RefreshDecision,
                 started: _Started) -> RefreshOutcome:
        outcome = RefreshOutcome(started.at, time.monotonic() - started.clock, Outcome.SKIPPED, None,
                                 decision.target.describe(), started.schedule_time)
        self.matched[table.identifier] = time.time()    # the data is as fresh as now
        if trigger is not Trigger.CHANGE:     # a CONTINUOUS table's idle triggers are not news
            self.record(table, trigger, outcome, decision, unchanged(self._rows_held(table)).measures())
        return outcome

    def _failed(self, table: MaterializedTable, trigger: Trigger, decision: RefreshDecision | None,
                started: _Started, error: BaseException, spec: dict[str, str] | None = None) -> None:
        """Recorded (`decision` None: it failed deciding, on `spec`); a refresh's own error raised as the
        user reads it (any other is raised as it is)."""
        message = error_text(error)
        target = decision.target.describe() if decision is not None else dict(spec or {})
        outcome = RefreshOutcome(started.at, time.monotonic() - started.clock, Outcome.FAILED, None,
                                 target, started.schedule_time, message)
        self.ws.store.update(table.identifier, lambda t: t.with_refresh(outcome))
        self.record(table, trigger, outcome, decision)
        if isinstance(error, MaterializedTableError):
            raise ExecutionError(f"Refreshing the materialized table {table.identifier} failed: {message}") from None

    def _succeeded(self, situation: Situation, decision: RefreshDecision, trigger: Trigger, started: _Started,
                   maintained: Maintained, read: tuple[Snapshot, dict] | None,
                   work: _Work) -> tuple[MaterializedTable, RefreshOutcome]:
        """`read`: the snapshot of what the run read, where the sources changed as it read them."""
        table, target, result = situation.table, decision.target, maintained.result
        snapshot, files = read or (situation.snapshot, situation.listings)
        ran = time.monotonic()
        jobs = None if work.jobs is None else len(group_jobs(self.ws.spark, job_group(table)) - work.jobs)
        phases = {"decide": round(work.clock - started.clock, 3), "run": round(ran - work.clock, 3)}
        change = table_change(self.ws.spark, table, work.files,
                              self.ws.storage.published_files(replace(table, storage=result.storage)),
                              result.rows, maintained.compacted, self._rows_held(table))
        outcome = RefreshOutcome(started.at, result.duration_s, Outcome.SUCCEEDED, result.rows, target.describe(),
                                 started.schedule_time, jobs=jobs, phases=phases, inserted=change.inserted,
                                 deleted=change.deleted)
        # The table matches the sources after a refresh of all it could have changed in (what it
        # read is what the snapshot listed: the files themselves, or a steady state); a partial one
        # whose sources changed as it read may not have rewritten every partition that changed.
        matched = snapshot if target.whole or read is None and (
            target.key or situation.comparison.change is Change.NONE) else {}
        root = table.storage.root
        if matched:         # the files behind the snapshot, beside the data, before the record names it
            self.manifests.write(root, matched, maintained.manifest(files))
        updated = self.ws.store.update(table.identifier, lambda t: clear_failures(t.with_refresh(
            outcome, storage=result.storage, source_snapshot=matched, published_at=now_iso())))
        self.manifests.keep_only(root, matched)
        recorded = {**phases, "record": round(time.monotonic() - ran, 3)}
        self.record(table, trigger, outcome, decision, {**delta_read(decision, situation, maintained),
                                                         **change.measures(), "jobs": jobs, "phases": recorded})
        if self.owner:       # leftovers are the owner's to sweep, never a client's
            self.ws.storage.sweep(updated, self.ws.retention_s(), just_published=True)
        return updated, outcome

    def _execute(self, situation: Situation, decision: RefreshDecision, dynamic: dict[str, str],
                 listings: Future | None) -> tuple[Maintained, tuple[Snapshot, dict] | None]:
        """The refresh itself, as decided; with the snapshot of what it read where that is not the
        situation's (it read again)."""
        table, snapshot = situation.table, situation.snapshot
        if decision.technique is Technique.INCREMENTAL:
            if listings is not None:
                listings.result()
            return self.maintainer.maintain(table, decision.rule, situation.changes, decision.readings,
                                            situation.manifest, decision.keeping, decision.retraction,
                                            decision.bounds), None
        read = None
        if decision.reads_listed and not dynamic:
            try:
                return self.maintainer.recompute(table, decision.rule, situation.changes, decision.readings, listings,
                                                 lambda: self._held_still(table, snapshot), decision.keeping), None
            except MaterializedTableError:
                if not self._moved(table, snapshot):
                    raise
            except _Moved:
                pass
            # A source changed as it was read (a listed file gone, or one read by name held not still):
            # read again, as Spark lists.
            log.info("The sources of %s changed while the refresh read them: reading again", table.identifier)
            listings, read = None, self._steady_snapshot(table)
            snapshot = read[0]
        for attempt in range(1, READ_ATTEMPTS + 1):
            # Spark lists the sources' files itself as it plans: what it read is what the snapshot
            # lists only if the sources held still meanwhile; else nothing is published, and it reads again.
            try:
                known = (read[1] if read else situation.listings).values()
                result = run_refresh(self.ws.spark, self.ws.storage, table, decision.target, dynamic, listings,
                                     verify=lambda: self._held_still(table, snapshot),
                                     files=[] if None in known else [f for listing in known for f in listing])
                return Maintained(result), read
            except _Moved as moved:
                if attempt == READ_ATTEMPTS:
                    raise ExecutionError(f"The sources of {table.identifier} changed while the refresh read "
                                         f"them, {READ_ATTEMPTS} times ({moved}); nothing was published.") from None
                log.info("The sources of %s changed while the refresh read them (%s): reading again",
                         table.identifier, moved)
                listings = None
                read = self._steady_snapshot(table)
                snapshot = read[0]
        raise AssertionError("unreachable")

    def _steady_snapshot(self, table: MaterializedTable) -> tuple[Snapshot, dict]:
        """The sources' snapshot, taken while no Spark job wrote into them: an overwrite deletes the
        old files before its job commits the new ones, a state no reader of the source has. Taken
        again while a job writes into a source, or started or ended as it was taken; past
        WRITE_WAIT_S of writes, as it is (a killed writer's leftovers are what its readers see too)."""
        deadline = time.monotonic() + WRITE_WAIT_S
        while True:
            taken = spark_call(lambda: self.snapshots.take(table), f"Reading the sources of {table.identifier}")
            if time.monotonic() > deadline or not self.snapshots.unsteady(table, taken[0]):
                return taken
            self.snapshots.await_writes(table.source_tables)

    def _moved(self, table: MaterializedTable, snapshot: Snapshot) -> bool:
        try:
            self._held_still(table, snapshot)
        except _Moved:
            return True
        return False

    def _held_still(self, table: MaterializedTable, snapshot: Snapshot) -> None:
        """Raises _Moved when a source changed since `snapshot`, or a job writes into one now."""
        writing = self.snapshots.writing(table)
        now, _ = self.snapshots.take(table)
        changed = writing or [source for source in snapshot if now.get(source) != snapshot[source]]
        if changed:
            raise _Moved(", ".join(changed))

    def record(self, table: MaterializedTable, trigger: Trigger, outcome: RefreshOutcome,
               decision: RefreshDecision | None, measures: dict | None = None) -> None:
        """The run in the history as it was decided (None: it failed before it was); `measures`: the
        rows and bytes read of the appended files, the Spark jobs it ran and the seconds of its phases."""
        identifier = table.identifier
        finished = now_iso()
        decided = {} if decision is None else {"reason": decision.reason, "technique": decision.technique,
                                               "sources": decision.sources}
        estimate = {"estimate": decision.estimate.describe()} if decision and decision.estimate is not None else {}
        self.history.record(RefreshEntry(
            identifier, trigger, outcome.schedule_time, outcome.started_at, finished, outcome.outcome,
            outcome.rows, self.runner(), outcome.partition, outcome.error,
            self._lag(identifier, outcome, finished), freshness_s(table), **decided, **estimate, **(measures or {}),
            created=table.created_at))
        log.info("Refresh of %s (%s%s): %s, %s rows in %.2f s%s", identifier, trigger,
                 f" {outcome.schedule_time}" if outcome.schedule_time else "", outcome.outcome,
                 outcome.rows if outcome.rows is not None else "no", outcome.duration_s,
                 f": {outcome.error}" if outcome.error else "")

    def coalesced(self, identifier: str, schedule_time: str, into: str) -> None:
        """A fire that waited behind a running refresh and was merged into a later fire: in the history,
        so that no fire disappears silently."""
        table = self.ws.store.get(identifier)
        if table is None:
            return
        moment = now_iso()
        self.history.record(RefreshEntry(table.identifier, Trigger.SCHEDULED, schedule_time, moment, moment,
                                         Outcome.COALESCED, None, self.runner(), freshness_s=freshness_s(table),
                                         reason=f"the previous refresh was still running; merged into the "
                                                f"fire of {into}", created=table.created_at))

    def batch(self, identifier: str, progress: dict) -> None:
        """A streaming job's micro-batch that read rows, in the history like a refresh."""
        table = self.ws.store.get(identifier)
        if table is None:
            return
        took = ((progress.get("durationMs") or {}).get("triggerExecution") or 0) / 1000
        finished = now_iso()
        started = (datetime.fromisoformat(finished) - timedelta(seconds=took)).isoformat(timespec="milliseconds")
        self.history.record(RefreshEntry(identifier, Trigger.BATCH, None, started, finished, Outcome.SUCCEEDED,
                                         progress.get("numInputRows"), self.runner(), {}, None, took,
                                         freshness_s(table), technique=Technique.STREAM, created=table.created_at))

    def _rows_held(self, table: MaterializedTable) -> int | None:
        """The rows the table holds, as its newest refresh or skip counted them (None after a streaming
        batch, or before any count)."""
        for entry in self.history.entries(table.identifier, 50):
            if entry["trigger"] == Trigger.BATCH:
                return None
            if entry["outcome"] in (Outcome.SUCCEEDED, Outcome.SKIPPED):
                return entry.get("table_rows")
        return None

    def runner(self) -> Runner:
        return Runner(socket.gethostname(), os.getpid(), session_info(self.ws.spark).application_id)

    def _lag(self, identifier: str, outcome: RefreshOutcome, finished: str) -> float | None:
        """The data's age at the end: what a refresh or skip read is as of its start; after a failure,
        as of the start of the last one that succeeded (None when none did)."""
        if outcome.outcome is not Outcome.FAILED:
            return _seconds_between(outcome.started_at, finished)
        last = next((e for e in self.history.entries(identifier, 200)
                     if e["outcome"] in (Outcome.SUCCEEDED, Outcome.SKIPPED)), None)
        return _seconds_between(last["started"], finished) if last else None


def delta_read(decision: RefreshDecision, situation: Situation, maintained: Maintained) -> dict:
    """An incremental refresh's reading of the change: of the appended files, rows counted as they were
    read, and bytes from the listings — with the files now of the partitions (the small source) it
    retracted."""
    if decision.technique is not Technique.INCREMENTAL:
        return {}
    read = sum(d.added_bytes for d in situation.changes.values() if d.change is SourceChange.APPENDED)
    if decision.retraction is not None:
        retraction = decision.retraction
        for source, files in ((retraction.source, retraction.files), (retraction.paired_source, retraction.paired_files)):
            listing = situation.listings.get(source) or {}
            read += sum(listing[path][0] for path in files if path in listing)
    return {"delta_rows": maintained.delta_rows, "delta_bytes": read}


def freshness_s(table: MaterializedTable) -> float:
    return IntervalFreshness.parse(table.freshness).duration.total_seconds()


def _seconds_between(start: str, end: str) -> float:
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)
