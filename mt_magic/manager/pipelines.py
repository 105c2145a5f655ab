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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from mt_magic import config as cfg
from mt_magic.catalog.handlers import RecomputeHandler, RefreshHandler, ScheduleHandler
from mt_magic.catalog.history import RefreshEntry, RefreshHistory, Runner, Trigger
from mt_magic.catalog.model import (ACTIVATED, INITIALIZING, SUSPENDED, MaterializedTable, Outcome,
                                    RefreshOutcome, now_iso)
from mt_magic.errors import (ExecutionError, MaterializedTableError, StateError, TableNotFoundError,
                             ValidationError)
from mt_magic.manager.streams import Streams, checkpoint_of, trigger_seconds
from mt_magic.manager.workspace import Workspace
from mt_magic.refresh.changes import Change, Snapshots, compare, volatile
from mt_magic.refresh.continuous import Progress
from mt_magic.refresh.full import job_group, run_refresh
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT, periodic_partition
from mt_magic.refresh.scheduler import WORKFLOW_GROUP, RefreshScheduler, next_fire, workflow_name, zone_named
from mt_magic.results import Result
from mt_magic.spark.catalog import refresh_listings
from mt_magic.spark.commands import alongside
from mt_magic.spark.errors import SPARK_ERRORS, spark_call, spark_message
from mt_magic.spark.jobs import cancel_jobs
from mt_magic.spark.session import session_info
from mt_magic.storage.versions import Target
from mt_magic.sql.freshness import CONTINUOUS, FULL, IntervalFreshness, ModeDecision
from mt_magic.sql.statements import quote_identifier

log = logging.getLogger(__name__)
RECENT = 20                  # history entries the dashboard shows per table
RETRY_BACKOFF_S = 1.0        # before a pipeline's refresh is tried again: 1 s, 2 s, 4 s …
MAX_CATCH_UPS = 1000         # missed fires run after one downtime, at most
UPSTREAM_WAIT_S = 300.0      # how long a refresh waits for the tables it reads to finish theirs
STREAM_SETTLE_S = 1.0        # after a stream stops, how long its cancelled tasks may still write


@dataclass(frozen=True)
class PipelineState:
    """One table as its owner sees it now: the record and what runs for it."""

    table: MaterializedTable
    next_refresh: object            # datetime | None, in the scheduler's zone
    refreshing: bool
    progress: Progress | None
    matched_at: float | None = None     # epoch seconds a skip last found the sources unchanged
    recent: tuple[dict, ...] = ()       # the newest history entries, newest first


class Pipelines:
    def __init__(self, ws: Workspace, refresh: Callable[[str, str], object]) -> None:
        self.ws = ws
        self._running: set[str] = set()
        self._refresh_named = refresh
        self.scheduler = RefreshScheduler(refresh, self._coalesced)
        self.snapshots = Snapshots(ws.spark, ws.storage.files, ws.store, ws.analyzer)
        self._matched: dict[str, float] = {}
        self.history = RefreshHistory(ws.store.path, int(ws.options.get(cfg.HISTORY_RETENTION)))
        self.owner = False        # this process runs the store's pipelines (set by the gateway)
        self._followed: dict[str, tuple | None] = {}
        self._following = threading.Lock()
        self.streams = Streams(ws, self.scheduler, self.snapshots,
                               recompute=lambda table: self.run(table, {}, Trigger.CHANGE)[0],
                               on_batch=self.record_batch)

    # ============================================================ state
    def state(self, table: MaterializedTable) -> PipelineState:
        identifier = table.identifier
        return PipelineState(table, self.next_refresh(table), identifier in self._running,
                             self.streams.jobs.progress(identifier) if table.streams else None,
                             self._matched.get(identifier), tuple(self.history.entries(identifier, RECENT)))

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
        return self.streams.start(table, fresh=fresh, dynamic_options=table.dynamic_options,
                              checkpoint=checkpoint_of(table))

    def detect_changes(self, table: MaterializedTable, paused: bool, dynamic_options: dict) -> RecomputeHandler:
        """Recompute on change: every trigger compares the sources' snapshots, through the public
        refresh path (as a FULL table's cron fire)."""
        trigger = trigger_seconds(self.ws, table)
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

    def schedule(self, table: MaterializedTable, paused: bool, dynamic_options: dict) -> ScheduleHandler:
        freshness = IntervalFreshness.parse(table.freshness)
        zone = self.ws.zone()
        info = session_info(self.ws.spark)
        self.scheduler.schedule(table.identifier, table.quoted, freshness, zone, paused=paused)
        return ScheduleHandler(workflow_name(table.quoted), WORKFLOW_GROUP, table.identifier,
                               freshness.quartz_cron(), str(zone), info.master, info.application_id,
                               dict(dynamic_options))

    def stop(self, table: MaterializedTable) -> None:
        self.scheduler.remove(table.identifier)
        self.streams.stop(table.identifier)

    def discard(self, table: MaterializedTable) -> None:
        """Everything of a table, gone: pipeline, running jobs, then the table for every reader (its
        record and Spark's entry), its data and checkpoints last — a DROP killed midway leaves no
        table with part of its data, and the next owner finishes it (`finish_drops`)."""
        self.stop(table)
        cancel_jobs(self.ws.spark, job_group(table))
        with self.ws.lock(table.identifier):
            self._delete(self.ws.store.retire(table.identifier) or table)

    def finish_drops(self) -> None:
        """DROPs a kill or an error interrupted: what they had not deleted yet."""
        for table in self.ws.store.dropping():
            with self.ws.lock(table.identifier):
                self._delete(table)

    def _delete(self, table: MaterializedTable) -> None:
        self.ws.storage.drop(table, settle_s=STREAM_SETTLE_S if table.streams else 0.0)
        self.streams.delete_checkpoints(table)
        self.ws.store.forget(table.identifier)

    def change_mode(self, table: MaterializedTable, decision: ModeDecision) -> Result:
        """FLIP-435: the pipeline is stopped and recreated for the new freshness and mode."""
        updated = table.evolve(freshness=str(decision.freshness), logical_refresh_mode=decision.logical_mode,
                               refresh_mode=decision.refresh_mode, refresh_strategy=None, strategy_reason=None)
        to_continuous, was_continuous = decision.refresh_mode == CONTINUOUS, table.refresh_mode == CONTINUOUS
        if to_continuous:
            updated = self.streams.strategy(updated)
        self.stop(table)
        if table.streams and not updated.streams:
            self.streams.delete_checkpoints(table)
        dynamic = table.dynamic_options
        if not to_continuous:
            handler = self.schedule(updated, paused=table.refresh_status == SUSPENDED, dynamic_options=dynamic)
        elif table.refresh_status == SUSPENDED:
            handler = table.refresh_handler if was_continuous and updated.streams == table.streams else None
        elif updated.streams:    # a new trigger continues from the checkpoint; else the job starts fresh
            handler = self.streams.start(updated, fresh=not table.streams, dynamic_options=dynamic,
                                     checkpoint=checkpoint_of(table))
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
            if table.refresh_status != ACTIVATED and trigger is not Trigger.BACKFILL:
                raise StateError(f"Materialized table {table.identifier} is {table.refresh_status}: a "
                                 f"periodic refresh for {schedule_time} does not run.")
            if table.refresh_mode == CONTINUOUS:
                trigger = trigger or Trigger.CHANGE
            else:
                spec = periodic_partition(schedule_time, IntervalFreshness.parse(table.freshness),
                                          table.formatter_options(), self.ws.zone(), table.identifier)
                self._after_upstream(table, schedule_time)
        trigger = trigger or (Trigger.SCHEDULED if schedule_time is not None else Trigger.MANUAL)
        table, last = self._attempts(table, check_partition_spec(table, spec), trigger, schedule_time)
        info = session_info(self.ws.spark)
        target = ", ".join(f"{k}={v}" for k, v in last.partition.items()) or "whole table"
        done = (f"Skipped {table.identifier}: no source changed since its last refresh." if
                last.outcome is Outcome.SKIPPED else f"Refreshed {table.identifier} ({target}): {last.rows} "
                f"rows in {last.duration_s:.2f} s.")
        return Result.table(["job id", "cluster info", "rows", "partition"],
                            [(job_group(table), {"spark.master": info.master, "spark.app.id": info.application_id},
                              last.rows, target)], message=done, brief=True)

    def _after_upstream(self, table: MaterializedTable, schedule_time: str) -> None:
        """Dependency order: when the materialized tables this one reads fire at the same schedule
        time (or refresh now), their refreshes finish before this one starts (bounded by the
        freshness, at most UPSTREAM_WAIT_S)."""
        zone = self.ws.zone()
        moment = datetime.strptime(schedule_time, SCHEDULE_TIME_FORMAT).replace(tzinfo=zone)
        upstream = [u for u in map(self.ws.store.get, table.source_tables) if u is not None]
        if not upstream:
            return

        def waiting() -> list[str]:
            return [u.identifier for u in upstream if u.identifier in self._running or (
                u.refresh_mode == FULL and u.refresh_status == ACTIVATED and self.scheduler.has(u.identifier)
                and next_fire(IntervalFreshness.parse(u.freshness), zone, moment - timedelta(seconds=1)) == moment
                and not any(e.get("schedule_time") == schedule_time for e in self.history.entries(u.identifier, 20)))]
        deadline = time.monotonic() + min(_freshness_s(table), UPSTREAM_WAIT_S)
        while waiting() and time.monotonic() < deadline:
            time.sleep(0.1)

    def _attempts(self, table: MaterializedTable, spec: dict[str, str], trigger: Trigger,
                  schedule_time: str | None) -> tuple[MaterializedTable, RefreshOutcome]:
        """A manual refresh runs once. A pipeline's run (scheduled, catch-up, change, backfill) is
        retried with backoff; when all attempts failed it counts as one failed run, and at
        `max-consecutive-failures` failed runs in a row the table is suspended with the reason."""
        if trigger is Trigger.MANUAL:
            return self.run(table, spec, trigger, schedule_time)
        retries = int(self.ws.options.get(cfg.REFRESH_RETRIES))
        for attempt in range(retries + 1):
            try:
                return self.run(table, spec, trigger, schedule_time, only_changed=trigger is not Trigger.BACKFILL)
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                if isinstance(error, TableNotFoundError) or attempt == retries:
                    self._failed_run(table.identifier, str(error) if isinstance(error, MaterializedTableError)
                                     else spark_message(error))
                    raise
                time.sleep(RETRY_BACKOFF_S * 2 ** attempt)
        raise AssertionError("unreachable")

    def _failed_run(self, identifier: str, message: str) -> None:
        table = self.ws.store.update(identifier, lambda t: t.evolve(consecutive_failures=t.consecutive_failures + 1))
        if table is None or table.refresh_status != ACTIVATED:
            return
        failures = table.consecutive_failures
        if failures >= int(self.ws.options.get(cfg.MAX_CONSECUTIVE_FAILURES)):
            reason = f"{failures} consecutive failed refreshes; the last: {message}"
            log.warning("Suspended %s: %s", identifier, reason)
            if self.scheduler.has(identifier):
                self.scheduler.pause(identifier)
            self.ws.store.update(identifier, lambda t: t.evolve(refresh_status=SUSPENDED, suspend_reason=reason))

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
            # When the snapshot asks the catalog where the sources live (after a change it does), the
            # session forgets its cached listings of them at the same time (over Connect the two
            # requests travel together): a refresh reads what is there now.
            listings = alongside(self.ws.spark, refresh_listings, self.ws.spark, current.source_tables) \
                if self.snapshots.looks_up(current) else None
            # Taken before the refresh reads: a change while it runs shows at the next comparison.
            snapshot = spark_call(lambda: self.snapshots.take(current), f"Reading the sources of {identifier}")
            comparison = compare(current.source_snapshot, snapshot, bool(volatile(current)))
            target = Target(spec)
            if only_changed and comparison.change is Change.NONE:
                outcome = RefreshOutcome(started_at, time.monotonic() - started, Outcome.SKIPPED, None, spec,
                                         schedule_time)
                self._matched[identifier] = time.time()    # the data is as fresh as now
                if trigger is not Trigger.CHANGE:     # a CONTINUOUS table's idle triggers are not news
                    self._record(current, trigger, outcome)
                return current, outcome
            if comparison.change is not Change.NONE:
                self.snapshots.forget(current)
            if only_changed and not spec and comparison.change is Change.PARTITIONS:
                target = Target(key=comparison.key, values=comparison.values)
            self._running.add(identifier)
            try:
                result = run_refresh(self.ws.spark, self.ws.storage, current, target, dynamic, listings)
            except BaseException as error:
                message = str(error) if isinstance(error, MaterializedTableError) else spark_message(error)
                outcome = RefreshOutcome(started_at, time.monotonic() - started, Outcome.FAILED, None,
                                         target.describe(), schedule_time, message)
                self.ws.store.update(identifier, lambda t: t.with_refresh(outcome))
                self._record(current, trigger, outcome)
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
                outcome, storage=result.storage, source_snapshot=matched, consecutive_failures=0,
                published_at=now_iso()))
            self._record(current, trigger, outcome)
            if self.owner:       # leftovers are the owner's to sweep, never a client's
                self.ws.storage.sweep(updated, self.ws.retention_s(), just_published=True)
            return updated, outcome

    def _record(self, table: MaterializedTable, trigger: Trigger, outcome: RefreshOutcome) -> None:
        identifier = table.identifier
        finished = now_iso()
        self.history.record(RefreshEntry(
            identifier, trigger, outcome.schedule_time, outcome.started_at, finished, outcome.outcome,
            outcome.rows, self._runner(), outcome.partition, outcome.error,
            self._lag(identifier, outcome, finished), _freshness_s(table)))
        log.info("Refresh of %s (%s%s): %s, %s rows in %.2f s%s", identifier, trigger,
                 f" {outcome.schedule_time}" if outcome.schedule_time else "", outcome.outcome,
                 outcome.rows if outcome.rows is not None else "no", outcome.duration_s,
                 f": {outcome.error}" if outcome.error else "")

    def _coalesced(self, name: str, schedule_time: str, into: str) -> None:
        """A fire that waited behind a running refresh and was merged into a later fire: in the history,
        so that no fire disappears silently."""
        table = self.ws.store.get(".".join(self.ws.identifier(self.ws.name(name))))
        if table is None:
            return
        moment = now_iso()
        self.history.record(RefreshEntry(table.identifier, Trigger.SCHEDULED, schedule_time, moment, moment,
                                         Outcome.COALESCED, None, self._runner(), freshness_s=_freshness_s(table),
                                         reason=f"the previous refresh was still running; merged into the "
                                                f"fire of {into}"))

    def _runner(self) -> Runner:
        return Runner(socket.gethostname(), os.getpid(), session_info(self.ws.spark).application_id)

    def _lag(self, identifier: str, outcome: RefreshOutcome, finished: str) -> float | None:
        """The data's age at the end: what a refresh or skip read is as of its start; after a failure,
        as of the start of the last one that succeeded (None when none did)."""
        if outcome.outcome is not Outcome.FAILED:
            return _seconds_between(outcome.started_at, finished)
        last = next((e for e in self.history.entries(identifier, 200)
                     if e["outcome"] in (Outcome.SUCCEEDED, Outcome.SKIPPED)), None)
        return _seconds_between(last["started"], finished) if last else None

    def record_batch(self, identifier: str, progress: dict) -> None:
        """A streaming job's micro-batch that read rows, in the history like a refresh."""
        table = self.ws.store.get(identifier)
        if table is None:
            return
        if table.consecutive_failures:      # the job works again: the failures are no longer consecutive
            self.ws.store.update(identifier, lambda t: t.evolve(consecutive_failures=0))
        took = ((progress.get("durationMs") or {}).get("triggerExecution") or 0) / 1000
        finished = now_iso()
        started = (datetime.fromisoformat(finished) - timedelta(seconds=took)).isoformat(timespec="milliseconds")
        self.history.record(RefreshEntry(identifier, Trigger.BATCH, None, started, finished, Outcome.SUCCEEDED,
                                         progress.get("numInputRows"), self._runner(), {}, None, took,
                                         _freshness_s(table)))

    # =================================================== suspend/resume
    def suspend(self, table: MaterializedTable) -> Result:
        if table.streams:
            return self.streams.suspend(table)
        if self.scheduler.has(table.identifier):
            self.scheduler.pause(table.identifier)
        self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_status=SUSPENDED))
        return Result.ok(f"Suspended materialized table {table.identifier}.")

    def resume(self, table: MaterializedTable, options: dict[str, str]) -> Result:
        if table.streams:
            return self.streams.resume(table, options)
        dynamic = options or table.dynamic_options
        handler = (self.schedule(table, paused=False, dynamic_options=dynamic) if table.refresh_mode == FULL
                   else self.detect_changes(table, paused=False, dynamic_options=dynamic))
        changed = dynamic != table.dynamic_options       # the data is written differently from now on
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            refresh_status=ACTIVATED, refresh_handler=handler, consecutive_failures=0, suspend_reason=None,
            source_snapshot={} if changed else t.source_snapshot))
        return Result.ok(f"Resumed materialized table {table.identifier}{self.next_text(table.identifier)}.")

    def job_running(self, identifier: str) -> bool:
        """A CONTINUOUS table's pipeline runs: its streaming job, or its unpaused change detector."""
        return self.streams.running(identifier) or self.scheduler.next_fire_time(identifier) is not None

    # ========================================================= restarts
    # ========================================================== restore
    def restore(self) -> list[str]:
        """A new owner of the store: every table back into Spark, unfinished CREATEs rolled back,
        FULL tables rescheduled (SUSPENDED ones paused), ACTIVATED streams restarted."""
        warnings = []
        try:
            self.finish_drops()
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            warnings.append(f"Finishing an interrupted DROP: {spark_message(error)}")
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
                    try:
                        handler = self.start(table, fresh=False)
                    except (MaterializedTableError, *SPARK_ERRORS) as error:
                        self.streams.failed(table.identifier, spark_message(error))   # retried, or suspended
                        raise
                    self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_handler=handler))
                self.ws.storage.sweep(table, self.ws.retention_s())
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                warnings.append(f"{table.identifier}: {spark_message(error)}")
        return warnings

    # ======================================================== ownership
    def stop_all(self) -> None:
        """This process no longer owns the store: schedules go, streams stop at a checkpoint."""
        self.scheduler.clear()
        self.streams.jobs.stop_all(listening=True)

    def catch_up(self) -> None:
        """After downtime (a new owner, a takeover), the fires of ACTIVATED FULL tables that nobody ran,
        by `materialized-table.missed-runs`: `latest` (one run, for the most recent), `all` (one per
        fire, oldest first) or `skip`. Each runs with its own schedule time, so a date-formatted
        table refills the partition of that fire."""
        policy = self.ws.options.get(cfg.MISSED_RUNS)
        if policy == "skip":
            return
        now = datetime.now(self.ws.zone())
        for table in self.ws.store.list():
            if table.refresh_mode != FULL or table.refresh_status != ACTIVATED:
                continue
            missed = self.missed_fires(table, now)
            if policy == "latest":
                missed = missed[-1:]
            if missed:
                self.scheduler.run_once(f"catch-up:{table.identifier}", 0,
                                        lambda t=table.identifier, m=tuple(missed): self._catch_up(t, m))

    def missed_fires(self, table: MaterializedTable, now: datetime) -> list[str]:
        """The table's fire times after the last one that ran (or its creation), up to `now`."""
        zone = self.ws.zone()
        ran = [datetime.strptime(e["schedule_time"], SCHEDULE_TIME_FORMAT).replace(tzinfo=zone)
               for e in self.history.entries(table.identifier, 500)
               if e.get("schedule_time") and e["trigger"] in (Trigger.SCHEDULED, Trigger.CATCH_UP)]
        after = max(ran) if ran else datetime.fromisoformat(table.created_at).astimezone(zone)
        freshness = IntervalFreshness.parse(table.freshness)
        fires: list[str] = []
        moment = next_fire(freshness, zone, after + timedelta(seconds=1))
        while moment is not None and moment <= now and len(fires) < MAX_CATCH_UPS:
            fires.append(moment.strftime(SCHEDULE_TIME_FORMAT))
            moment = next_fire(freshness, zone, moment + timedelta(seconds=1))
        return fires

    def _catch_up(self, identifier: str, schedule_times: tuple[str, ...]) -> None:
        for schedule_time in schedule_times:
            try:
                table = self.ws.store.get(identifier)
                if table is None or table.refresh_status != ACTIVATED:
                    return
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
        self.streams.jobs.stop_all()
        for identifier in list(self._running):
            cancel_jobs(self.ws.spark, f"mt_magic:{identifier}")
        self.scheduler.shutdown()


def _published(table: MaterializedTable) -> tuple:
    """What readers of the table see: its location and its partitions' locations."""
    storage = table.storage
    return storage.location, tuple((tuple(p.spec.items()), p.location) for p in storage.partitions)


def _freshness_s(table: MaterializedTable) -> float:
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
