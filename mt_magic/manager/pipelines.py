"""The pipelines that keep tables fresh: schedules, streaming jobs, refresh runs and their records.

FULL tables have a cron job in the embedded scheduler, which fires the gateway's public refresh;
CONTINUOUS tables have a streaming job (restarted with backoff after a failure, recomputed when a
streamed source loses or rewrites files) or, where Spark cannot stream the query correctly, an
interval job that recomputes when a source's snapshot changed. Every refresh holds the table's lock,
compares the sources' snapshots, and records its outcome in the catalog store and the history.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from mt_magic import config as cfg
from mt_magic.catalog.handlers import JobHandler, RecomputeHandler, RefreshHandler, ScheduleHandler
from mt_magic.catalog.history import RefreshEntry, RefreshHistory, Runner, Trigger
from mt_magic.catalog.model import (ACTIVATED, INITIALIZING, SUSPENDED, MaterializedTable, Outcome,
                                    RefreshOutcome, RefreshStrategy, now_iso)
from mt_magic.errors import (ExecutionError, MaterializedTableError, SparkError, StateError,
                             TableNotFoundError, ValidationError)
from mt_magic.manager.workspace import Workspace
from mt_magic.refresh.changes import Change, Snapshots, compare, volatile
from mt_magic.refresh.continuous import ContinuousJobs, Progress, output_mode
from mt_magic.refresh.full import job_group, run_refresh
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT, periodic_partition
from mt_magic.refresh.scheduler import WORKFLOW_GROUP, RefreshScheduler, next_fire, workflow_name, zone_named
from mt_magic.results import Result
from mt_magic.spark.errors import SPARK_ERRORS, spark_call, spark_message
from mt_magic.spark.jobs import cancel_jobs
from mt_magic.spark.session import default_parallelism, session_info
from mt_magic.storage.versions import Target
from mt_magic.sql.freshness import CONTINUOUS, FULL, IntervalFreshness, ModeDecision
from mt_magic.sql.statements import quote_identifier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineState:
    """One table as its owner sees it now: the record and what runs for it."""

    table: MaterializedTable
    next_refresh: object            # datetime | None, in the scheduler's zone
    refreshing: bool
    progress: Progress | None
    matched_at: float | None = None     # epoch seconds a skip last found the sources unchanged


class Pipelines:
    def __init__(self, ws: Workspace, refresh: Callable[[str, str], object]) -> None:
        self.ws = ws
        self._running: set[str] = set()
        self._refresh_named = refresh
        self.scheduler = RefreshScheduler(refresh)
        self.snapshots = Snapshots(ws.spark, ws.storage.files, ws.store, ws.analyzer)
        self._streamed: dict[str, dict[str, dict]] = {}   # table → streamed source → its files
        self._matched: dict[str, float] = {}
        self.history = RefreshHistory(ws.store.path)
        self.owner = False        # this process runs the store's pipelines (set by the gateway)
        self._followed: dict[str, tuple | None] = {}
        self._following = threading.Lock()
        self.jobs = ContinuousJobs(ws.spark, ws.storage, ws.store, ws.retention_s, self._job_failed)

    # ============================================================ state
    def state(self, table: MaterializedTable) -> PipelineState:
        identifier = table.identifier
        return PipelineState(table, self.next_refresh(table), identifier in self._running,
                             self.jobs.progress(identifier) if table.streams else None,
                             self._matched.get(identifier))

    def refreshing(self, identifier: str) -> bool:
        return identifier in self._running

    def next_refresh(self, table: MaterializedTable) -> datetime | None:
        """The scheduler's next fire where this process owns the store; a client computes it from the
        table's schedule, as the owner's scheduler does."""
        if self.scheduler.has(table.identifier):
            return self.scheduler.next_fire_time(table.identifier)
        handler = table.refresh_handler
        if table.refresh_status != ACTIVATED or not isinstance(handler, ScheduleHandler):
            return None
        zone = zone_named(handler.time_zone)
        return next_fire(IntervalFreshness.parse(table.freshness), zone, datetime.now(zone))

    def next_text(self, identifier: str) -> str:
        moment = self.scheduler.next_fire_time(identifier)
        return f", next refresh {moment.strftime(SCHEDULE_TIME_FORMAT)}" if moment else ""

    # ======================================================= start/stop
    def start(self, table: MaterializedTable, fresh: bool, paused: bool = False) -> RefreshHandler:
        """The table's pipeline: a cron job (FULL), a streaming job or a change detector (CONTINUOUS)."""
        if table.refresh_mode == FULL:
            return self.schedule(table, paused=paused, dynamic_options=table.dynamic_options)
        if not table.streams:
            return self.detect_changes(table, paused=paused, dynamic_options=table.dynamic_options)
        return self.start_job(table, fresh=fresh, dynamic_options=table.dynamic_options,
                              checkpoint=_checkpoint(table))

    def detect_changes(self, table: MaterializedTable, paused: bool, dynamic_options: dict) -> RecomputeHandler:
        """Recompute on change: every trigger compares the sources' snapshots, through the public
        refresh path (as a FULL table's cron fire)."""
        trigger = self.trigger_s(table)
        name = table.quoted
        self.scheduler.every(table.identifier, trigger, lambda: self._fire_change(name), paused=paused)
        info = session_info(self.ws.spark)
        return RecomputeHandler(table.identifier, trigger, info.master, info.application_id,
                                dict(dynamic_options))

    def _fire_change(self, name: str) -> None:
        try:
            self._refresh_named(name, datetime.now(self.ws.zone()).strftime(SCHEDULE_TIME_FORMAT))
        except (MaterializedTableError, *SPARK_ERRORS) as error:     # recorded; the thread goes on
            log.warning("Change refresh of %s: %s", name, spark_message(error))

    def trigger_s(self, table: MaterializedTable) -> float:
        """A CONTINUOUS table's trigger: the checkpoint interval where set, else its freshness."""
        interval = self.ws.options.get(cfg.CHECKPOINT_INTERVAL)
        return (self.ws.options.duration(cfg.CHECKPOINT_INTERVAL) if interval
                else IntervalFreshness.parse(table.freshness).duration).total_seconds()

    def choose_strategy(self, table: MaterializedTable) -> MaterializedTable:
        """Streaming where Spark's streaming maintains the query; recompute on change for the rest
        (a CONTINUOUS table never fails because its query cannot stream)."""
        upstream = [s for s in table.source_tables if self.ws.store.get(s) is not None]
        if upstream:
            reason = (f"it reads materialized table {', '.join(upstream)}, whose publishes switch "
                      "versions that a stream of files cannot follow")
        else:
            try:        # Spark may refuse a streaming read at once (e.g. in a subquery)
                frame = spark_call(lambda: self.ws.spark.sql(self.streaming_query(table)), "Streaming")
                mode, reason = output_mode(self.ws.spark, frame, table)
            except SparkError as error:
                mode, reason = None, str(error).removeprefix("Streaming: ")
            if mode is not None:
                return table.evolve(refresh_strategy=RefreshStrategy.STREAMING, strategy_reason=None)
        return table.evolve(refresh_strategy=RefreshStrategy.RECOMPUTE, strategy_reason=reason)

    def schedule(self, table: MaterializedTable, paused: bool, dynamic_options: dict) -> ScheduleHandler:
        freshness = IntervalFreshness.parse(table.freshness)
        zone = self.ws.zone()
        info = session_info(self.ws.spark)
        self.scheduler.schedule(table.identifier, table.quoted, freshness, zone, paused=paused)
        return ScheduleHandler(workflow_name(table.quoted), WORKFLOW_GROUP, table.identifier,
                               freshness.quartz_cron(), str(zone), info.master, info.application_id,
                               dict(dynamic_options))

    def start_job(self, table: MaterializedTable, fresh: bool, dynamic_options: dict,
                  checkpoint: str | None = None) -> JobHandler:
        """Start the streaming job: fresh (new checkpoint, new data version) or from `checkpoint`."""
        streaming = self.streaming_query(table)
        trigger = self.trigger_s(table)
        location = checkpoint if checkpoint and not fresh else self.new_checkpoint(table)
        streamed = [s for s in table.source_tables if s.lower() not in self._static(table)]
        # The files the stream starts from: a later listing missing one of them is not an append.
        self._streamed[table.identifier] = {s: self.snapshots.listing(s) for s in streamed}
        partitions = int(self.ws.options.get(cfg.CONTINUOUS_SHUFFLE_PARTITIONS) or
                         default_parallelism(self.ws.spark))
        handler = spark_call(lambda: self.jobs.start(table, streaming, location, fresh, trigger,
                                                     dynamic_options, partitions),
                             f"Starting the continuous refresh job of {table.identifier}")
        self.scheduler.every(_watch_id(table.identifier), max(trigger, 1.0),
                             lambda: self._watch_stream(table.identifier))
        return replace(handler, restarts=table.job.restarts if table.job and not fresh else 0)

    def _static(self, table: MaterializedTable) -> set[str]:
        names = [n.strip() for n in (table.options.get(cfg.STATIC_SOURCES) or "").split(",") if n.strip()]
        return {".".join(self.ws.analyzer.resolve(self.ws.name(n))).lower() for n in names}

    def streaming_query(self, table: MaterializedTable) -> str:
        """Sources listed in the static-sources option are joined as static data; the rest stream."""
        return spark_call(lambda: self.ws.analyzer.streaming_query(table.definition_query, self._static(table)),
                          f"Materialized table {table.identifier}")

    def _watch_stream(self, identifier: str) -> None:
        """A file stream sees only new files: a streamed source that lost or rewrote one (overwrite,
        delete, compaction) makes the table recomputed from its sources and streamed afresh."""
        try:
            known = self._streamed.get(identifier)
            table = self.ws.store.get(identifier)
            if known is None or table is None or not self.jobs.is_running(identifier):
                return
            now = {source: self.snapshots.listing(source) for source in known}
            rewritten = [s for s, files in known.items() if files is not None and now[s] is not None
                         and any(now[s].get(path) != facts for path, facts in files.items())]
            if not rewritten:
                self._streamed[identifier] = now
                return
            log.info("A streamed source of %s lost or rewrote files (%s): recomputing from the sources",
                     identifier, ", ".join(rewritten))
            self.stop_job(identifier)
            try:        # the answer now; the fresh stream's first batch reads every file again anyway
                table, _ = self.run(table, {}, Trigger.CHANGE)
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                log.warning("Recomputing %s: %s", identifier, spark_message(error))
            self.delete_checkpoints(table)
            handler = self.start_job(table, fresh=True, dynamic_options=table.dynamic_options)
            self.ws.store.update(identifier, lambda t: t.evolve(refresh_handler=handler))
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            log.warning("Watching the streamed sources of %s: %s", identifier, spark_message(error))

    def stop_job(self, identifier: str) -> None:
        self.scheduler.remove(_watch_id(identifier))
        self._streamed.pop(identifier, None)
        self.jobs.stop(identifier)

    def stop(self, table: MaterializedTable) -> None:
        self.scheduler.remove(table.identifier)
        self.stop_job(table.identifier)

    def checkpoint_root(self) -> str:
        return self.ws.options.get(cfg.CHECKPOINT_DIR) or f"{self.ws.home()}/checkpoints"

    def savepoint_root(self) -> str:
        """Unlike Flink, SUSPEND needs no setting: savepoints default to a folder beside the store."""
        return self.ws.options.get(cfg.SAVEPOINT_DIR) or f"{self.ws.home()}/savepoints"

    def new_checkpoint(self, table: MaterializedTable, root: str | None = None) -> str:
        folder = root or self.checkpoint_root()
        return self.ws.storage.files.qualify(
            f"{folder}/{table.catalog}/{table.database}/{table.name}-{uuid.uuid4().hex[:8]}")

    def delete_checkpoints(self, table: MaterializedTable) -> None:
        job = table.job
        for path in (job.checkpoint_location, job.restore_path) if job else ():
            if path:
                self.ws.storage.files.delete(path)

    def discard(self, table: MaterializedTable) -> None:
        """Everything of a table, gone: pipeline, running jobs, data, checkpoints, record."""
        self.stop(table)
        cancel_jobs(self.ws.spark, job_group(table))
        with self.ws.lock(table.identifier):
            current = self.ws.store.get(table.identifier) or table
            try:
                self.ws.storage.drop(current)
                self.delete_checkpoints(current)
            finally:
                self.ws.store.delete(table.identifier)

    def change_mode(self, table: MaterializedTable, decision: ModeDecision) -> Result:
        """FLIP-435: the pipeline is stopped and recreated for the new freshness and mode."""
        updated = table.evolve(freshness=str(decision.freshness), logical_refresh_mode=decision.logical_mode,
                               refresh_mode=decision.refresh_mode, refresh_strategy=None, strategy_reason=None)
        to_continuous, was_continuous = decision.refresh_mode == CONTINUOUS, table.refresh_mode == CONTINUOUS
        if to_continuous:
            updated = self.choose_strategy(updated)
        self.stop(table)
        if table.streams and not updated.streams:
            self.delete_checkpoints(table)
        dynamic = table.dynamic_options
        if not to_continuous:
            handler = self.schedule(updated, paused=table.refresh_status == SUSPENDED, dynamic_options=dynamic)
        elif table.refresh_status == SUSPENDED:
            handler = table.refresh_handler if was_continuous and updated.streams == table.streams else None
        elif updated.streams:    # a new trigger continues from the checkpoint; else the job starts fresh
            handler = self.start_job(updated, fresh=not table.streams, dynamic_options=dynamic,
                                     checkpoint=_checkpoint(table))
        else:
            handler = self.detect_changes(updated, paused=False, dynamic_options=dynamic)
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            freshness=updated.freshness, logical_refresh_mode=decision.logical_mode,
            refresh_mode=decision.refresh_mode, refresh_strategy=updated.refresh_strategy,
            strategy_reason=updated.strategy_reason, refresh_handler=handler))
        return Result.ok(f"Materialized table {table.identifier} now has freshness {decision.freshness}, "
                         f"refresh mode {decision.refresh_mode}{self.next_text(table.identifier)}.")

    # ========================================================== refresh
    def refresh(self, table: MaterializedTable, spec: dict[str, str], schedule_time: str | None,
                trigger: Trigger | None = None) -> Result:
        """A manual refresh (spec = the partitions to rewrite; always runs) or the scheduler's at
        schedule_time (FULL: its partition where a formatter says so; CONTINUOUS: a change check),
        which is skipped when no source changed since the table last matched them."""
        if schedule_time is not None:
            if table.refresh_status != ACTIVATED:
                raise StateError(f"Materialized table {table.identifier} is {table.refresh_status}: a "
                                 f"periodic refresh for {schedule_time} does not run.")
            if table.refresh_mode == CONTINUOUS:
                trigger = trigger or Trigger.CHANGE
            else:
                spec = periodic_partition(schedule_time, IntervalFreshness.parse(table.freshness),
                                          table.formatter_options(), self.ws.zone(), table.identifier)
        trigger = trigger or (Trigger.SCHEDULED if schedule_time is not None else Trigger.MANUAL)
        table, last = self.run(table, check_partition_spec(table, spec), trigger, schedule_time,
                               only_changed=schedule_time is not None)
        info = session_info(self.ws.spark)
        target = ", ".join(f"{k}={v}" for k, v in last.partition.items()) or "whole table"
        done = (f"Skipped {table.identifier}: no source changed since its last refresh." if
                last.outcome is Outcome.SKIPPED else f"Refreshed {table.identifier} ({target}): {last.rows} "
                f"rows in {last.duration_s:.2f} s.")
        return Result.table(["job id", "cluster info", "rows", "partition"],
                            [(job_group(table), {"spark.master": info.master, "spark.app.id": info.application_id},
                              last.rows, target)], message=done)

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
            # Taken before the refresh reads: a change while it runs shows at the next comparison.
            snapshot = spark_call(lambda: self.snapshots.take(current), f"Reading the sources of {identifier}")
            comparison = compare(current.source_snapshot, snapshot, bool(volatile(current)))
            target = Target(spec)
            if only_changed and comparison.change is Change.NONE:
                outcome = RefreshOutcome(started_at, time.monotonic() - started, Outcome.SKIPPED, None, spec,
                                         schedule_time)
                self._matched[identifier] = time.time()    # the data is as fresh as now
                if trigger is not Trigger.CHANGE:     # a CONTINUOUS table's idle triggers are not news
                    self._record(identifier, trigger, outcome)
                return current, outcome
            if comparison.change is not Change.NONE:
                self.snapshots.forget(current)
            if only_changed and not spec and comparison.change is Change.PARTITIONS:
                target = Target(key=comparison.key, values=comparison.values)
            self._running.add(identifier)
            try:
                result = run_refresh(self.ws.spark, self.ws.storage, current, target, dynamic)
            except BaseException as error:
                message = str(error) if isinstance(error, MaterializedTableError) else spark_message(error)
                outcome = RefreshOutcome(started_at, time.monotonic() - started, Outcome.FAILED, None,
                                         target.describe(), schedule_time, message)
                self.ws.store.update(identifier, lambda t: t.with_refresh(outcome))
                self._record(identifier, trigger, outcome)
                if isinstance(error, MaterializedTableError):
                    raise ExecutionError(f"Refreshing the materialized table {identifier} failed: "
                                         f"{message}") from None
                raise
            finally:
                self._running.discard(identifier)
            outcome = RefreshOutcome(started_at, result.duration_s, Outcome.SUCCEEDED, result.rows,
                                     target.describe(), schedule_time)
            # The table matches the sources after a refresh of all it could have changed in.
            matched = snapshot if target.whole or target.key or comparison.change is Change.NONE else {}
            updated = self.ws.store.update(identifier, lambda t: t.with_refresh(
                outcome, storage=result.storage, source_snapshot=matched))
            self._record(identifier, trigger, outcome)
            if self.owner:       # leftovers are the owner's to sweep, never a client's
                self.ws.storage.sweep(updated, self.ws.retention_s())
            return updated, outcome

    def _record(self, identifier: str, trigger: Trigger, outcome: RefreshOutcome) -> None:
        info = session_info(self.ws.spark)
        self.history.record(RefreshEntry(
            identifier, trigger, outcome.schedule_time, outcome.started_at, now_iso(), outcome.outcome,
            outcome.rows, Runner(socket.gethostname(), os.getpid(), info.application_id), outcome.partition,
            outcome.error))
        log.info("Refresh of %s (%s%s): %s, %s rows in %.2f s%s", identifier, trigger,
                 f" {outcome.schedule_time}" if outcome.schedule_time else "", outcome.outcome,
                 outcome.rows if outcome.rows is not None else "no", outcome.duration_s,
                 f": {outcome.error}" if outcome.error else "")

    # =================================================== suspend/resume
    def suspend(self, table: MaterializedTable) -> Result:
        if table.streams:
            return self._suspend_job(table)
        if self.scheduler.has(table.identifier):
            self.scheduler.pause(table.identifier)
        self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_status=SUSPENDED))
        return Result.ok(f"Suspended materialized table {table.identifier}.")

    def resume(self, table: MaterializedTable, options: dict[str, str]) -> Result:
        if table.streams:
            return self._resume_job(table, options)
        dynamic = options or table.dynamic_options
        handler = (self.schedule(table, paused=False, dynamic_options=dynamic) if table.refresh_mode == FULL
                   else self.detect_changes(table, paused=False, dynamic_options=dynamic))
        changed = dynamic != table.dynamic_options       # the data is written differently from now on
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            refresh_status=ACTIVATED, refresh_handler=handler,
            source_snapshot={} if changed else t.source_snapshot))
        return Result.ok(f"Resumed materialized table {table.identifier}{self.next_text(table.identifier)}.")

    def _suspend_job(self, table: MaterializedTable) -> Result:
        self.stop_job(table.identifier)    # waits for a batch in flight, which takes the table lock
        with self.ws.lock(table.identifier):
            job = table.job
            savepoint = self.new_checkpoint(table, self.savepoint_root())
            self.ws.storage.files.mkdirs(savepoint.rsplit("/", 1)[0])
            self.ws.storage.files.rename(job.checkpoint_location, savepoint)
            handler = replace(job, restore_path=savepoint, checkpoint_location=savepoint)
            self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_status=SUSPENDED,
                                                                      refresh_handler=handler))
        return Result.ok(f"Suspended materialized table {table.identifier}; savepoint {savepoint}.")

    def _resume_job(self, table: MaterializedTable, dynamic_options: dict) -> Result:
        restore = table.job.restore_path if table.job and table.refresh_status == SUSPENDED else None
        handler = self.start_job(table, fresh=restore is None, dynamic_options=dynamic_options,
                                 checkpoint=restore)
        self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_status=ACTIVATED,
                                                                  refresh_handler=handler))
        started = "from its savepoint" if restore else "from scratch"
        return Result.ok(f"Resumed materialized table {table.identifier}: continuous refresh job "
                         f"{handler.streaming_query_id} started {started}.")

    def job_running(self, identifier: str) -> bool:
        """A CONTINUOUS table's pipeline runs: its streaming job, or its unpaused change detector."""
        return self.jobs.is_running(identifier) or self.scheduler.next_fire_time(identifier) is not None

    # ========================================================= restarts
    def _job_failed(self, identifier: str, message: str) -> None:
        """Called from Spark's listener thread: record, then restart with backoff up to the limit."""
        log.warning("Continuous refresh job of %s failed: %s", identifier, message)
        table = self.ws.store.update(identifier, lambda t: _with_job(t, failure=message, failed_at=now_iso()))
        if table is None or table.job is None:
            return
        restarts = table.job.restarts
        if restarts >= int(self.ws.options.get(cfg.MAX_RESTARTS) or 0):
            log.warning("Continuous refresh job of %s failed; no restarts left: %s", identifier, message)
            return
        self.scheduler.run_once(f"restart:{identifier}", 2 ** restarts,
                                lambda: self._restart_job(identifier, restarts + 1))

    def _restart_job(self, identifier: str, restarts: int) -> None:
        try:
            table = self.ws.store.get(identifier)
            if table is None or table.refresh_status != ACTIVATED or not table.streams \
                    or self.jobs.is_running(identifier):
                return
            handler = self.start(table, fresh=False)
            self.ws.store.update(identifier, lambda t: t.evolve(refresh_handler=replace(
                handler, restarts=restarts, failure=t.job.failure if t.job else None,
                failed_at=t.job.failed_at if t.job else None)))
        except Exception as error:   # noqa: BLE001 - recorded; the scheduler thread must go on
            try:
                self.ws.store.update(identifier, lambda t: _with_job(t, restarts=restarts))
                self._job_failed(identifier, spark_message(error))
            except MaterializedTableError:
                log.warning("Restarting the continuous refresh job of %s failed: %s", identifier, error)

    # ========================================================== restore
    def restore(self) -> list[str]:
        """A new owner of the store: every table back into Spark, unfinished CREATEs rolled back,
        FULL tables rescheduled (SUSPENDED ones paused), ACTIVATED streams restarted."""
        warnings = []
        for table in self.ws.store.list():
            try:
                if table.refresh_status == INITIALIZING:
                    warnings.append(f"{table.identifier}: rolled back an unfinished CREATE.")
                    self.discard(table)
                    continue
                self.ws.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{table.catalog}`.`{table.database}`")
                self.ws.storage.follow(table)
                if not table.streams:
                    self.start(table, fresh=False, paused=table.refresh_status == SUSPENDED)
                elif table.refresh_status == ACTIVATED:
                    handler = self.start(table, fresh=False)
                    self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_handler=handler))
                self.ws.storage.sweep(table, self.ws.retention_s())
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                warnings.append(f"{table.identifier}: {spark_message(error)}")
        return warnings

    # ======================================================== ownership
    def stop_all(self) -> None:
        """This process no longer owns the store: schedules go, streams stop at a checkpoint."""
        self.scheduler.clear()
        self.jobs.stop_all(listening=True)

    def catch_up(self) -> None:
        """Taking over from a dead owner: each ACTIVATED FULL table's latest fire, unless it ran, runs
        once now with its own schedule time."""
        now = datetime.now(self.ws.zone())
        for table in self.ws.store.list():
            if table.refresh_mode != FULL or table.refresh_status != ACTIVATED:
                continue
            fire = IntervalFreshness.parse(table.freshness).floor(now)
            if fire <= datetime.fromisoformat(table.created_at):
                continue
            stamp = fire.strftime(SCHEDULE_TIME_FORMAT)
            if any(e["schedule_time"] == stamp for e in self.history.entries(table.identifier, limit=20)):
                continue
            self.scheduler.run_once(f"catch-up:{table.identifier}", 0,
                                    lambda t=table, s=stamp: self._catch_up(t.identifier, s))

    def _catch_up(self, identifier: str, schedule_time: str) -> None:
        try:
            table = self.ws.store.get(identifier)
            if table is not None:
                self.refresh(table, {}, schedule_time, Trigger.CATCH_UP)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            log.warning("Catch-up refresh of %s for %s: %s", identifier, schedule_time, spark_message(error))

    def follow_store(self) -> None:
        """A client's session follows what other processes created, published and dropped."""
        with self._following:
            seen: dict[str, tuple | None] = {}
            for table in self.ws.store.list():
                if table.refresh_status == INITIALIZING:
                    continue
                seen[table.identifier] = _published(table)
                if self._followed.get(table.identifier) == seen[table.identifier]:
                    continue
                # Under the table's lock, from the record as it is then: a publish between our
                # listing and our switch would otherwise be switched back.
                with self.ws.lock(table.identifier):
                    current = self.ws.store.get(table.identifier)
                    if current is None:
                        del seen[table.identifier]
                        continue
                    seen[table.identifier] = _published(current)
                    try:
                        self.ws.storage.follow(current)
                    except (MaterializedTableError, *SPARK_ERRORS) as error:
                        log.warning("Following %s: %s", table.identifier, spark_message(error))
                        seen[table.identifier] = None        # tried again at the next change
            for identifier in set(self._followed) - set(seen):
                self.ws.storage.forget(".".join(quote_identifier(p) for p in identifier.split(".", 2)))
            self._followed = seen

    def close(self) -> None:
        """Stop the streaming jobs gracefully, the scheduler and any running refresh; statuses stay."""
        self.jobs.stop_all()
        for identifier in list(self._running):
            cancel_jobs(self.ws.spark, f"mt_magic:{identifier}")
        self.scheduler.shutdown()


def _published(table: MaterializedTable) -> tuple:
    """What readers of the table see: its location and its partitions' locations."""
    storage = table.storage
    return storage.location, tuple((tuple(p.spec.items()), p.location) for p in storage.partitions)


def _watch_id(identifier: str) -> str:
    return f"watch:{identifier}"


def _checkpoint(table: MaterializedTable) -> str | None:
    return table.job.checkpoint_location if table.job else None


def _with_job(table: MaterializedTable, **changes) -> MaterializedTable:
    """The record with its streaming job's handler changed (a table without one stays as it is)."""
    return table.evolve(refresh_handler=replace(table.job, **changes)) if table.job else table


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
