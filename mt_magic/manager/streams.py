"""CONTINUOUS tables kept by a streaming job: which tables stream, the job with its own settings,
the watcher that sees a streamed source lose or rewrite files, SUSPEND to a savepoint and RESUME,
restarts with backoff after a failure."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace

from mt_magic import config as cfg
from mt_magic.catalog.handlers import JobHandler
from mt_magic.catalog.model import ACTIVATED, SUSPENDED, MaterializedTable, RefreshStrategy, now_iso
from mt_magic.errors import MaterializedTableError, SparkError
from mt_magic.manager.failures import FailureRule
from mt_magic.manager.workspace import Workspace
from mt_magic.refresh.changes import Snapshots
from mt_magic.refresh.continuous import ContinuousJobs, output_mode
from mt_magic.refresh.scheduler import RefreshScheduler
from mt_magic.results import Result
from mt_magic.spark.errors import SPARK_ERRORS, spark_call, spark_message
from mt_magic.spark.sessions import default_parallelism
from mt_magic.sql.freshness import IntervalFreshness

log = logging.getLogger(__name__)


def trigger_seconds(ws: Workspace, table: MaterializedTable) -> float:
    """A CONTINUOUS table's trigger: the checkpoint interval where set, else its freshness."""
    interval = ws.options.get(cfg.CHECKPOINT_INTERVAL)
    return (ws.options.duration(cfg.CHECKPOINT_INTERVAL) if interval
            else IntervalFreshness.parse(table.freshness).duration).total_seconds()


class Streams:
    """The streaming strategy's jobs: started with their own settings, watched, suspended, restarted."""

    def __init__(self, ws: Workspace, scheduler: RefreshScheduler, snapshots: Snapshots, failures: FailureRule,
                 recompute: Callable[[MaterializedTable], MaterializedTable],
                 on_batch: Callable[[str, dict], None]) -> None:
        self.ws = ws
        self.scheduler = scheduler
        self.snapshots = snapshots
        self.failures = failures
        self._recompute = recompute          # a batch refresh of the whole table, recorded
        self._streamed: dict[str, dict[str, dict | None]] = {}   # table → streamed source → its files
        self.jobs = ContinuousJobs(ws.spark, ws.storage, ws.store, ws.retention_s, self.failed, on_batch)

    def running(self, identifier: str) -> bool:
        return self.jobs.is_running(identifier)

    def strategy(self, table: MaterializedTable) -> MaterializedTable:
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

    def start(self, table: MaterializedTable, fresh: bool, dynamic_options: dict,
                  checkpoint: str | None = None) -> JobHandler:
        """Start the streaming job: fresh (new checkpoint, new data version) or from `checkpoint`."""
        streaming = self.streaming_query(table)
        trigger = trigger_seconds(self.ws, table)
        location = checkpoint if checkpoint and not fresh else self.new_checkpoint(table)
        streamed = [s for s in table.source_tables if s.lower() not in self._static(table)]
        # The files the stream starts from, of sources no job is writing into: a later listing
        # missing one of them is not an append.
        self.snapshots.await_writes(streamed)
        self._streamed[table.identifier] = {s: self.snapshots.listing(s) for s in streamed}
        partitions = int(self.ws.options.get(cfg.CONTINUOUS_SHUFFLE_PARTITIONS) or
                         default_parallelism(self.ws.spark))
        sources = {source: (self.snapshots.folders(source) or [], listing or {})
                   for source, listing in self._streamed[table.identifier].items()}
        handler = spark_call(lambda: self.jobs.start(table, streaming, location, fresh, trigger,
                                                     dynamic_options, partitions, sources),
                             f"Starting the continuous refresh job of {table.identifier}")
        self.scheduler.every(_watch_id(table.identifier), max(trigger, 1.0),
                             lambda: self._watch(table.identifier))
        return replace(handler, restarts=table.job.restarts if table.job and not fresh else 0)

    def _static(self, table: MaterializedTable) -> set[str]:
        names = [n.strip() for n in (table.options.get(cfg.STATIC_SOURCES) or "").split(",") if n.strip()]
        return {".".join(self.ws.analyzer.resolve(self.ws.name(n))).lower() for n in names}

    def streaming_query(self, table: MaterializedTable) -> str:
        """Sources listed in the static-sources option are joined as static data; the rest stream."""
        return spark_call(lambda: self.ws.analyzer.streaming_query(table.definition_query, self._static(table)),
                          f"Materialized table {table.identifier}")

    def _watch(self, identifier: str) -> None:
        """A file stream sees only new files: a streamed source that lost or rewrote one (overwrite,
        delete, compaction) makes the table recomputed from its sources and streamed afresh."""
        if self.jobs.is_running(identifier) and self._rewritten(identifier):
            self._afresh(identifier)

    def _rewritten(self, identifier: str) -> list[str]:
        """The streamed sources that lost or rewrote files since the stream last looked."""
        try:
            known = self._streamed.get(identifier)
            if known is None:
                return []
            now = {source: self.snapshots.listing(source) for source in known}
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            log.warning("Watching the streamed sources of %s: %s", identifier, spark_message(error))
            return []
        rewritten = [s for s, files in known.items() if files is not None and now[s] is not None
                     and any(now[s].get(path) != facts for path, facts in files.items())]
        if rewritten:
            log.info("A streamed source of %s lost or rewrote files (%s): recomputing from the sources",
                     identifier, ", ".join(rewritten))
        else:
            self._streamed[identifier] = now
        return rewritten

    def _afresh(self, identifier: str) -> None:
        """The table recomputed from its sources, and its stream started on a new checkpoint."""
        try:
            self.stop(identifier)
            table = self.ws.store.get(identifier)
            if table is None or table.refresh_status != ACTIVATED:
                return
            try:        # the answer now; the fresh stream's first batch reads every file again anyway
                table = self._recompute(table)
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                log.warning("Recomputing %s: %s", identifier, spark_message(error))
            self.delete_checkpoints(table)
            handler = self.start(table, fresh=True, dynamic_options=table.dynamic_options)
            self.ws.store.update(identifier, lambda t: t.evolve(refresh_handler=handler))
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            log.warning("Streaming %s afresh: %s", identifier, spark_message(error))

    def stop(self, identifier: str) -> None:
        self.scheduler.remove(_watch_id(identifier))
        self._streamed.pop(identifier, None)
        self.jobs.stop(identifier)

    def checkpoint_root(self) -> str:
        return self.ws.options.get(cfg.CHECKPOINT_DIR) or f"{self.ws.home()}/checkpoints"

    def savepoint_root(self) -> str:
        """Unlike Flink, SUSPEND needs no setting: savepoints default to a folder in the store's folder."""
        return self.ws.options.get(cfg.SAVEPOINT_DIR) or f"{self.ws.home()}/savepoints"

    def new_checkpoint(self, table: MaterializedTable, root: str | None = None) -> str:
        folder = root or self.checkpoint_root()
        return self.ws.files.qualify(
            f"{folder}/{table.catalog}/{table.database}/{table.name}-{uuid.uuid4().hex[:8]}")

    def delete_checkpoints(self, table: MaterializedTable) -> None:
        job = table.job
        for path in (job.checkpoint_location, job.restore_path) if job else ():
            if path:
                self.ws.files.delete(path)

    def suspend(self, table: MaterializedTable) -> Result:
        self.stop(table.identifier)    # waits for a batch in flight, which takes the table lock
        with self.ws.lock(table.identifier):
            job = table.job
            savepoint = self.new_checkpoint(table, self.savepoint_root())
            self.ws.files.mkdirs(savepoint.rsplit("/", 1)[0])
            self.ws.files.rename(job.checkpoint_location, savepoint)
            handler = replace(job, restore_path=savepoint, checkpoint_location=savepoint)
            self.ws.store.update(table.identifier, lambda t: t.evolve(refresh_status=SUSPENDED,
                                                                      refresh_handler=handler))
        return Result.ok(f"Suspended materialized table {table.identifier}; savepoint {savepoint}.")

    def resume(self, table: MaterializedTable, dynamic_options: dict) -> Result:
        restore = table.job.restore_path if table.job and table.refresh_status == SUSPENDED else None
        handler = self.start(table, fresh=restore is None, dynamic_options=dynamic_options,
                                 checkpoint=restore)
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            refresh_status=ACTIVATED, refresh_handler=handler, consecutive_failures=0, suspend_reason=None))
        started = "from its savepoint" if restore else "from scratch"
        return Result.ok(f"Resumed materialized table {table.identifier}: continuous refresh job "
                         f"{handler.streaming_query_id} started {started}.")

    def failed(self, identifier: str, message: str) -> None:
        """Called from Spark's listener thread: count the failure, then restart from the checkpoint
        with backoff, or, at `max-consecutive-failures` in a row, suspend the table with the reason
        (never ACTIVATED without a job; RESUME continues from the checkpoint). A failure after a
        streamed source lost files is no failure of the job: the stream starts afresh."""
        log.warning("Continuous refresh job of %s failed: %s", identifier, message)
        if self._rewritten(identifier):     # a batch failed for files a rewrite deleted: no restart
            self.scheduler.run_once(f"restart:{identifier}", 0, lambda: self._afresh(identifier))
            return
        self._count_failure(identifier, message)

    def _count_failure(self, identifier: str, message: str) -> None:
        table = self.failures.failed(
            identifier, "failures of the continuous refresh job", message, on_suspend=lambda: self.stop(identifier),
            noted=lambda t: _with_job(t, failure=message, failed_at=now_iso()),
            suspended=lambda t: _with_job(t, restore_path=checkpoint_of(t)))
        if table is None or table.job is None:
            return
        failures = table.consecutive_failures
        self.scheduler.run_once(f"restart:{identifier}", 2 ** (failures - 1),
                                lambda: self._restart(identifier, table.job.restarts + 1))

    def _restart(self, identifier: str, restarts: int) -> None:
        try:
            table = self.ws.store.get(identifier)
            if table is None or table.refresh_status != ACTIVATED or not table.streams \
                    or self.jobs.is_running(identifier):
                return
            handler = self.start(table, fresh=False, dynamic_options=table.dynamic_options,
                                 checkpoint=checkpoint_of(table))
            self.ws.store.update(identifier, lambda t: t.evolve(refresh_handler=replace(
                handler, restarts=restarts, failure=t.job.failure if t.job else None,
                failed_at=t.job.failed_at if t.job else None)))
        except Exception as error:   # noqa: BLE001 - recorded; the scheduler thread must go on
            try:
                self.ws.store.update(identifier, lambda t: _with_job(t, restarts=restarts))
                self.failed(identifier, spark_message(error))
            except MaterializedTableError:
                log.warning("Restarting the continuous refresh job of %s failed: %s", identifier, error)


def _watch_id(identifier: str) -> str:
    return f"watch:{identifier}"


def checkpoint_of(table: MaterializedTable) -> str | None:
    return table.job.checkpoint_location if table.job else None


def _with_job(table: MaterializedTable, **changes) -> MaterializedTable:
    """The record with its streaming job's handler changed (a table without one stays as it is)."""
    return table.evolve(refresh_handler=replace(table.job, **changes)) if table.job else table
