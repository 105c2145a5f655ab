"""The pipelines that keep tables fresh: started, stopped, suspended, resumed, changed, dropped.

FULL tables have a cron job in the embedded scheduler, which fires the gateway's public refresh;
CONTINUOUS tables have a streaming job (`streams.py`) or, where Spark cannot stream the query
correctly, an interval job that recomputes when a source's snapshot changed. A refresh itself is a
run (`refresh_runs.py`), retried by the failure rule (`failures.py`); a new owner's takeover is `takeover.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from mt_magic.catalog.handlers import RecomputeHandler, RefreshHandler, ScheduleHandler
from mt_magic.catalog.history import Trigger, matched_at
from mt_magic.catalog.model import ACTIVATED, SUSPENDED, MaterializedTable, Outcome, RefreshOutcome
from mt_magic.errors import MaterializedTableError, StateError
from mt_magic.manager.failures import FailureRule
from mt_magic.manager.refresh_runs import Runs
from mt_magic.manager.streams import Streams, checkpoint_of, trigger_seconds
from mt_magic.manager.upstream import UpstreamWait
from mt_magic.manager.workspace import Workspace
from mt_magic.incremental.rules import Rule
from mt_magic.refresh.continuous import Progress
from mt_magic.refresh.decision import Situation
from mt_magic.refresh.full import job_group
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT, periodic_partition
from mt_magic.refresh.scheduler import WORKFLOW_GROUP, RefreshScheduler, next_fire, workflow_name
from mt_magic.results import Result
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.spark.jobs import cancel_jobs
from mt_magic.spark.sessions import session_info
from mt_magic.sql.freshness import CONTINUOUS, FULL, IntervalFreshness, ModeDecision
from mt_magic.sql.zones import zone_named

log = logging.getLogger(__name__)
RECENT = 20                  # history entries the dashboard shows per table
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

    def up_to_date_as_of(self) -> datetime | None:
        """When the table last matched its sources: its data age counts from then (status, DESCRIBE
        and the dashboard alike; see `history.matched_at`)."""
        progress = self.progress
        looked = max(progress.last_published or 0, progress.last_checked or 0) if progress is not None else 0
        return matched_at(self.table.published_at, self.recent, max(looked, self.matched_at or 0) or None)


class Pipelines:
    def __init__(self, ws: Workspace, refresh: Callable[[str, str], object]) -> None:
        self.ws = ws
        self._refresh_fired = refresh     # a fire's refresh, by identifier, on the path `Gateway.refresh` takes
        self.runs = Runs(ws)
        self.failures = FailureRule(ws)
        self.scheduler = RefreshScheduler(refresh, self.runs.coalesced, ready=lambda n, at: self.upstream.ready(n, at))
        self.upstream = UpstreamWait(ws, self.runs, self.scheduler.has)
        self.streams = Streams(ws, self.scheduler, self.runs.snapshots, self.failures,
                               recompute=lambda table: self.runs.run(table, {}, Trigger.CHANGE)[0],
                               on_batch=self._batch)

    def _batch(self, identifier: str, progress: dict) -> None:
        self.failures.succeeded(identifier)      # the job works again
        self.runs.batch(identifier, progress)

    # ============================================================ state
    def state(self, table: MaterializedTable) -> PipelineState:
        identifier = table.identifier
        runs = self.runs
        return PipelineState(table, self.next_refresh(table), identifier in runs.running,
                             self.progress(identifier) if table.streams else None,
                             runs.matched.get(identifier), tuple(runs.history.entries(identifier, RECENT)))

    def refreshing(self, identifier: str) -> bool:
        return identifier in self.runs.running

    def situation(self, table: MaterializedTable) -> Situation:
        """What a refresh of `table` would decide by now (EXPLAIN decides by it as the run does)."""
        return self.runs.situation(table)

    def rule(self, table: MaterializedTable) -> Rule:
        """The delta rule of the table's query, as Spark judged it."""
        return self.runs.chooser.rule(table)

    def technique(self, table: MaterializedTable, judged: bool = True) -> str:
        return self.runs.chooser.technique(table, judged)

    def plan(self, table: MaterializedTable) -> list[str]:
        return self.runs.chooser.plan(table)

    def strategy(self, table: MaterializedTable) -> MaterializedTable:
        """A CONTINUOUS table with how it keeps up (a stream, or a recompute on change)."""
        return self.streams.strategy(table)

    def begin(self, table: MaterializedTable | None = None, sources: tuple[str, ...] = ()) -> None:
        """Send what a first refresh asks Spark (of the table, or where these sources live) now,
        not waiting: over Connect the answers come while the statement goes on."""
        if table is not None:
            self.runs.begin(table)
        if sources:
            self.runs.snapshots.begin(sources)

    def first_refresh(self, table: MaterializedTable) -> MaterializedTable:
        return self.runs.run(table, {}, Trigger.INITIAL)[0]

    def history(self, identifier: str | None, limit: int | None, earlier: bool = False) -> list[dict]:
        return self.runs.history.entries(identifier, limit, earlier)

    def new_history(self, identifier: str) -> None:
        """A table created: its history starts empty, a dropped table's of the name kept apart."""
        self.runs.history.set_aside(identifier)

    def progress(self, identifier: str) -> Progress | None:
        return self.streams.jobs.progress(identifier)

    def streaming(self, identifier: str) -> bool:
        return self.streams.running(identifier)

    def stream_failed(self, identifier: str, message: str) -> None:
        """A streaming job that could not start: retried, or the table suspended (the failure rule)."""
        self.streams.failed(identifier, message)

    def stream_afresh(self, table: MaterializedTable) -> RefreshHandler:
        """A new streaming job for a new definition (§4.5): from scratch, no dynamic options."""
        return self.streams.start(table, fresh=True, dynamic_options={})

    def delete_checkpoints(self, table: MaterializedTable) -> None:
        self.streams.delete_checkpoints(table)

    def every(self, name: str, seconds: float, job: Callable[[], object]) -> None:
        """A housekeeping job of the store's owner, on the refresh scheduler's thread."""
        self.scheduler.every(name, seconds, job)

    def once(self, name: str, job: Callable[[], object]) -> None:
        self.scheduler.run_once(name, 0, job)

    def own(self, owner: bool) -> None:
        """This process runs the store's pipelines, and sweeps what refreshes leave (or no longer)."""
        self.runs.owner = owner

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
        if moment is None:
            return ""
        zone = getattr(moment.tzinfo, "key", None) or moment.tzname()     # the session time zone's name
        return f", next refresh {moment.strftime(SCHEDULE_TIME_FORMAT)} {zone}"

    # ======================================================= start/stop
    def start(self, table: MaterializedTable, fresh: bool, paused: bool = False,
              zone: tzinfo | None = None) -> RefreshHandler:
        """The table's pipeline: a cron job (FULL), a streaming job or a change detector (CONTINUOUS).
        `zone`: the session time zone, when the caller starts many (over Connect, asking is a round trip)."""
        if table.refresh_mode == FULL:
            return self.schedule(table, paused=paused, dynamic_options=table.dynamic_options, zone=zone)
        if not table.streams:
            return self.detect_changes(table, paused=paused, dynamic_options=table.dynamic_options)
        return self.streams.start(table, fresh=fresh, dynamic_options=table.dynamic_options,
                              checkpoint=checkpoint_of(table))

    def detect_changes(self, table: MaterializedTable, paused: bool, dynamic_options: dict) -> RecomputeHandler:
        """Recompute on change: every trigger compares the sources' snapshots, through the public
        refresh path (as a FULL table's cron fire)."""
        trigger = trigger_seconds(self.ws, table)
        identifier = table.identifier
        self.scheduler.every(identifier, trigger, lambda: self._fire_change(identifier), paused=paused)
        info = session_info(self.ws.spark)
        return RecomputeHandler(table.identifier, trigger, info.master, info.application_id,
                                dict(dynamic_options))

    def _fire_change(self, identifier: str) -> None:
        try:
            self._refresh_fired(identifier, datetime.now(self.ws.zone()).strftime(SCHEDULE_TIME_FORMAT))
        except (MaterializedTableError, *SPARK_ERRORS) as error:     # recorded; the thread goes on
            log.warning("Change refresh of %s: %s", identifier, spark_message(error))

    def schedule(self, table: MaterializedTable, paused: bool, dynamic_options: dict,
                 zone: tzinfo | None = None) -> ScheduleHandler:
        freshness = IntervalFreshness.parse(table.freshness)
        zone = zone or self.ws.zone()
        info = session_info(self.ws.spark)
        self.scheduler.schedule(table.identifier, freshness, zone, paused=paused)
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
                if trigger in (None, Trigger.CATCH_UP):      # a backfill's order is the user's
                    self.upstream.wait(table, schedule_time)
        trigger = trigger or (Trigger.SCHEDULED if schedule_time is not None else Trigger.MANUAL)
        table, last = self._attempts(table, table.check_partition_spec(spec), trigger, schedule_time)
        info = session_info(self.ws.spark)
        target = ", ".join(f"{k}={v}" for k, v in last.partition.items()) or "whole table"
        done = (f"Skipped {table.identifier}: no source changed since its last refresh." if
                last.outcome is Outcome.SKIPPED else f"Refreshed {table.identifier} ({target}): {last.rows} "
                f"rows in {last.duration_s:.2f} s.")
        return Result.table(["job id", "cluster info", "rows", "partition"],
                            [(job_group(table), {"spark.master": info.master, "spark.app.id": info.application_id},
                              last.rows, target)], message=done, brief=True)

    def _attempts(self, table: MaterializedTable, spec: dict[str, str], trigger: Trigger,
                  schedule_time: str | None) -> tuple[MaterializedTable, RefreshOutcome]:
        """A manual refresh runs once; a pipeline's run (scheduled, catch-up, change, backfill) by the
        failure rule."""
        if trigger is Trigger.MANUAL:
            return self.runs.run(table, spec, trigger, schedule_time)
        return self.failures.retried(
            table.identifier, lambda: self.runs.run(table, spec, trigger, schedule_time,
                                                    only_changed=trigger is not Trigger.BACKFILL),
            on_suspend=lambda: self._pause(table.identifier))

    def _pause(self, identifier: str) -> None:
        if self.scheduler.has(identifier):
            self.scheduler.pause(identifier)

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

    # ======================================================== ownership
    def stop_all(self) -> None:
        """This process no longer owns the store: schedules go, streams stop at a checkpoint."""
        self.scheduler.clear()
        self.streams.jobs.stop_all(listening=True)

    def close(self) -> None:
        """Stop the streaming jobs gracefully, the scheduler and any running refresh; statuses stay."""
        self.streams.jobs.stop_all()
        for identifier in list(self.runs.running):
            cancel_jobs(self.ws.spark, f"mt_magic:{identifier}")
        self.scheduler.shutdown()
