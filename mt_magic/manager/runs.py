"""One refresh run and its record: under the table's lock, compare the sources' snapshots, skip or
rewrite (the whole table or the changed partitions), then record the outcome in the catalog store and
in the history — a refresh that is not recorded did not happen, for the user."""

from __future__ import annotations

import logging
import os
import socket
import time
from concurrent.futures import Future
from datetime import datetime, timedelta

from mt_magic import config as cfg
from mt_magic.catalog.history import RefreshEntry, RefreshHistory, Runner, Technique, Trigger
from mt_magic.catalog.model import MaterializedTable, Outcome, RefreshOutcome, now_iso
from mt_magic.errors import ExecutionError, MaterializedTableError, TableNotFoundError, ValidationError
from mt_magic.manager.failures import cleared
from mt_magic.manager.workspace import Workspace
from mt_magic.refresh.changes import (Change, Snapshot, SourceChange, SourceDelta, Snapshots, compare, deltas,
                                      volatile)
from mt_magic.refresh.full import run_refresh
from mt_magic.refresh.choice import Choice, Chooser
from mt_magic.refresh.incremental import Maintained, Maintainer
from mt_magic.storage.manifests import Manifest, Manifests
from mt_magic.spark.catalog import refresh_listings
from mt_magic.spark.commands import alongside
from mt_magic.spark.errors import error_text, spark_call
from mt_magic.spark.session import is_connect, session_info
from mt_magic.storage.versions import Target
from mt_magic.sql.freshness import IntervalFreshness

log = logging.getLogger(__name__)
READ_ATTEMPTS = 3           # reads of sources that kept changing under a refresh, before it fails


class _Moved(Exception):
    """A source changed while a refresh read it: what it wrote is of no state the source had."""


class Runs:
    """The refresh runs of one process: which run now, when a skip last matched, and the history."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.snapshots = Snapshots(ws.spark, ws.storage.files, ws.store, ws.analyzer)
        self.manifests = Manifests(ws.storage.files)
        self.chooser = Chooser(ws.spark, ws.storage.files, self.snapshots)
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

    def run(self, table: MaterializedTable, spec: dict[str, str], trigger: Trigger,
            schedule_time: str | None = None, only_changed: bool = False) -> tuple[MaterializedTable, RefreshOutcome]:
        """One refresh at a time per table; the outcome is recorded either way, in the record and
        in the history. `only_changed`: nothing runs when no source changed (a FULL table records
        the skip), and only the changed partitions are rewritten where the sources tell them."""
        identifier = table.identifier
        with self.ws.lock(identifier):
            current = self.ws.store.get(identifier)
            if current is None:
                raise TableNotFoundError(f"Materialized table {identifier} was dropped.")
            dynamic = current.dynamic_options if trigger in (Trigger.SCHEDULED, Trigger.CATCH_UP) else {}
            started_at, started = now_iso(), time.monotonic()
            # When the snapshot asks the catalog where the sources live (after a change it does), a
            # Connect session forgets its cached listings of them at the same time (the two requests
            # travel together): a refresh reads what is there now. A classic session forgets them when
            # a refresh reads the tables (not a skip, nor a refresh from the listed files).
            listings = alongside(self.ws.spark, refresh_listings, self.ws.spark, current.source_tables) \
                if is_connect(self.ws.spark) and self.snapshots.looks_up(current) else None
            whole = not spec and trigger is not Trigger.BACKFILL
            preparing = alongside(self.ws.spark, self.chooser.prepare, current) if whole else None
            # Taken before the refresh reads, of sources no job is writing into.
            snapshot, files = self._steady_snapshot(current)
            comparison = compare(current.source_snapshot, snapshot, bool(volatile(current)))
            target = Target(spec)
            if only_changed and comparison.change is Change.NONE:
                outcome = RefreshOutcome(started_at, time.monotonic() - started, Outcome.SKIPPED, None, spec,
                                         schedule_time)
                self.matched[identifier] = time.time()    # the data is as fresh as now
                if trigger is not Trigger.CHANGE:     # a CONTINUOUS table's idle triggers are not news
                    self.record(current, trigger, outcome, Technique.SKIP)
                return current, outcome
            root = current.storage.root
            manifest = self.manifests.read(root, current.source_snapshot)
            changes = deltas(manifest.listings if manifest else None, files, self.snapshots.relatives(current))
            sources = {name: delta.describe() for name, delta in changes.items()} \
                if comparison.change is not Change.NONE else {}
            if preparing is not None:
                preparing.result()
            choice = self.chooser.choose(current, changes, manifest, rebuild=comparison.change is Change.NONE
                                            and not only_changed) if whole else None
            if choice is None or not choice.incremental:
                if only_changed and not spec and comparison.change is Change.PARTITIONS:
                    target = Target(key=comparison.key, values=comparison.values)
            technique = Technique.INCREMENTAL if choice and choice.incremental else \
                Technique.FULL if target.whole else Technique.PARTITIONS
            reason = choice.reason if choice and technique is not Technique.INCREMENTAL else None
            self.running.add(identifier)
            try:
                maintained, read = self._run(current, target, choice, changes, manifest, dynamic, listings,
                                             snapshot)
                if read is not None:      # the sources changed while it read: it read them again
                    snapshot, files = read
            except BaseException as error:
                message = error_text(error)
                outcome = RefreshOutcome(started_at, time.monotonic() - started, Outcome.FAILED, None,
                                         target.describe(), schedule_time, message)
                self.ws.store.update(identifier, lambda t: t.with_refresh(outcome))
                self.record(current, trigger, outcome, technique, sources, reason, weighed(choice))
                if isinstance(error, MaterializedTableError):
                    raise ExecutionError(f"Refreshing the materialized table {identifier} failed: "
                                         f"{message}") from None
                raise
            finally:
                self.running.discard(identifier)
                if comparison.change is not Change.NONE:
                    self.snapshots.forget(current)  # a changed source may have moved: asked again next time
            result = maintained.result
            outcome = RefreshOutcome(started_at, result.duration_s, Outcome.SUCCEEDED, result.rows,
                                     target.describe(), schedule_time)
            # The table matches the sources after a refresh of all it could have changed in (what it
            # read is what the snapshot listed: the files themselves, or a steady state); a partial one
            # whose sources changed as it read may not have rewritten every partition that changed.
            matched = snapshot if target.whole or read is None and (
                target.key or comparison.change is Change.NONE) else {}
            if matched:         # the files behind the snapshot, beside the data, before the record names it
                self.manifests.write(root, matched, maintained.manifest(files))
            updated = self.ws.store.update(identifier, lambda t: cleared(t.with_refresh(
                outcome, storage=result.storage, source_snapshot=matched, published_at=now_iso())))
            self.manifests.keep_only(root, matched)
            self.record(current, trigger, outcome, technique, sources, reason,
                        weighed(choice) | delta_read(technique, changes, maintained))
            if self.owner:       # leftovers are the owner's to sweep, never a client's
                self.ws.storage.sweep(updated, self.ws.retention_s(), just_published=True)
            return updated, outcome

    def _run(self, table: MaterializedTable, target: Target, choice: Choice | None,
             changes: dict[str, SourceDelta], manifest: Manifest | None, dynamic: dict[str, str],
             listings: Future | None, snapshot: Snapshot) -> tuple[Maintained, tuple[Snapshot, dict] | None]:
        """The refresh itself, by the technique chosen; with the snapshot of what it read where that
        is not `snapshot` (it read again)."""
        if choice is not None and choice.incremental:
            if listings is not None:
                listings.result()
            return self.maintainer.maintain(table, choice.rule, changes, choice.readings, manifest), None
        read = None
        if choice is not None and choice.reads_listed and target.whole and not dynamic:
            try:
                return self.maintainer.recompute(table, choice.rule, changes, choice.readings, listings,
                                                 verify=lambda: self._held_still(table, snapshot)), None
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
                result = run_refresh(self.ws.spark, self.ws.storage, table, target, dynamic, listings,
                                     verify=lambda: self._held_still(table, snapshot))
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
        """The sources' snapshot, taken when no Spark job is writing into them: an overwrite deletes
        the old files before its job commits the new ones, a state no reader of the source has."""
        def take() -> tuple[Snapshot, dict]:
            return spark_call(lambda: self.snapshots.take(table), f"Reading the sources of {table.identifier}")
        taken = take()      # first: it learns where the sources live
        return take() if self.snapshots.await_writes(table.source_tables) else taken

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

    def record(self, table: MaterializedTable, trigger: Trigger, outcome: RefreshOutcome, technique: Technique,
               sources: dict[str, str] | None = None, reason: str | None = None,
               measures: dict | None = None) -> None:
        """`measures`: what the cost rule weighed, and the rows and bytes read of the appended files."""
        identifier = table.identifier
        finished = now_iso()
        self.history.record(RefreshEntry(
            identifier, trigger, outcome.schedule_time, outcome.started_at, finished, outcome.outcome,
            outcome.rows, self.runner(), outcome.partition, outcome.error,
            self._lag(identifier, outcome, finished), freshness_s(table), reason=reason, technique=technique,
            sources=sources or {}, **(measures or {})))
        log.info("Refresh of %s (%s%s): %s, %s rows in %.2f s%s", identifier, trigger,
                 f" {outcome.schedule_time}" if outcome.schedule_time else "", outcome.outcome,
                 outcome.rows if outcome.rows is not None else "no", outcome.duration_s,
                 f": {outcome.error}" if outcome.error else "")

    def coalesced(self, name: str, schedule_time: str, into: str) -> None:
        """A fire that waited behind a running refresh and was merged into a later fire: in the history,
        so that no fire disappears silently."""
        table = self.ws.store.get(".".join(self.ws.identifier(self.ws.name(name))))
        if table is None:
            return
        moment = now_iso()
        self.history.record(RefreshEntry(table.identifier, Trigger.SCHEDULED, schedule_time, moment, moment,
                                         Outcome.COALESCED, None, self.runner(), freshness_s=freshness_s(table),
                                         reason=f"the previous refresh was still running; merged into the "
                                                f"fire of {into}"))

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
                                         freshness_s(table), technique=Technique.STREAM))

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


def weighed(choice: Choice | None) -> dict:
    return {"estimate": choice.estimate.describe()} if choice is not None and choice.estimate else {}


def delta_read(technique: Technique, changes: dict[str, SourceDelta], maintained: Maintained) -> dict:
    """An incremental refresh's reading of the appended files: rows counted as they were read, bytes
    from the listings."""
    if technique is not Technique.INCREMENTAL:
        return {}
    return {"delta_rows": maintained.delta_rows,
            "delta_bytes": sum(d.added_bytes for d in changes.values() if d.change is SourceChange.APPENDED)}


def freshness_s(table: MaterializedTable) -> float:
    return IntervalFreshness.parse(table.freshness).duration.total_seconds()


def _seconds_between(start: str, end: str) -> float:
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def check_partition_spec(table: MaterializedTable, spec: dict[str, str]) -> dict[str, str]:
    """Spec §4.3, stricter: keys must be partition keys, and of a string type."""
    keys = {k.lower(): k for k in table.partition_keys}
    unknown = [k for k in spec if k.lower() not in keys]
    if unknown:
        raise ValidationError("The partition spec contains unknown partition keys:\n\n"
                              + "\n".join(unknown) + "\n\nAll known partition keys are:\n\n"
                              + "\n".join(table.partition_keys))
    wrong = [k for k in spec if table.column(k).type != "string"]
    if wrong:
        raise ValidationError("Currently, refreshing materialized table only supports referring to "
                              "char, varchar and string type partition keys. All specified partition "
                              "keys in partition specs with unsupported types are:\n\n" + "\n".join(wrong))
    return {keys[k.lower()]: v for k, v in spec.items()}
