"""CONTINUOUS mode: one Spark Structured Streaming query per materialized table.

Aggregating queries run in complete mode, others in append mode; each micro-batch is committed in
one atomic step keyed by its batch id (refresh/sink.py). A fresh run starts a new version folder,
published at its first batch. The checkpoint is Spark's; it plays Flink's savepoint on SUSPEND.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from mt_magic.catalog.handlers import JobHandler
from mt_magic.catalog.model import MaterializedTable
from mt_magic.catalog.store import CatalogStore
from mt_magic.errors import MaterializedTableError, StateError, ValidationError
from mt_magic.refresh.sink import APPEND, COMPLETE, BatchGate, BatchSink
from mt_magic.spark.files import Listing
from mt_magic.storage.versions import TableStorage
from mt_magic.spark.tables import forget_listing
from mt_magic.spark.errors import SPARK_ERRORS, error_sentence, spark_message
from mt_magic.spark.sessions import session_conf, session_info
from mt_magic.spark.streaming import add_listener, start_stream, unsupported_reason

log = logging.getLogger(__name__)

STOP_WAIT_S = 60.0          # how long a stop waits for the batch in flight to finish; then it interrupts it


def job_name(table: MaterializedTable) -> str:
    return f"Materialized_table_{table.identifier}_continuous_refresh_job"


def output_mode(spark: Any, frame: DataFrame, table: MaterializedTable) -> tuple[str | None, str]:
    """Append where Spark allows it, complete for aggregations; else None and Spark's reason."""
    reasons = []
    for mode in (APPEND, COMPLETE):
        reason = unsupported_reason(spark, frame, mode)
        if reason is not None:
            reasons.append(reason)
            continue
        if mode == APPEND and table.partition_keys:
            reasons.append("a partitioned table's micro-batches must replace its partitions, and this "
                           "query's stream only appends rows.")
            continue
        return mode, ""
    # The reason that names the operation, rather than only the output mode it rules out.
    return None, next((r for r in reasons if "output mode" not in r.lower()), reasons[-1])


@dataclass
class Progress:
    """What the dashboard shows of a running job."""

    batch_id: int | None = None
    input_rows: int | None = None
    processing_ms: int | None = None
    last_published: float | None = None          # epoch seconds
    last_checked: float | None = None            # the job last looked at its sources (rows or none)
    history: list[dict] = field(default_factory=list)


@dataclass
class Job:
    table_id: str
    quoted: str
    query: StreamingQuery
    checkpoint: str
    mode: str
    run_version: str
    stopping: bool = False
    progress: Progress = field(default_factory=Progress)


class ContinuousJobs:
    """Starts, stops and watches the streaming queries; reports failures to `on_failure` and batches
    that read rows to `on_batch`."""

    def __init__(self, spark: Any, storage: TableStorage, store: CatalogStore,
                 retention_s: Callable[[], float], on_failure: Callable[[str, str], None],
                 on_batch: Callable[[str, dict], None]) -> None:
        self.spark = spark
        self.storage = storage
        self.store = store
        self._retention_s = retention_s
        self._on_failure = on_failure
        self._on_batch = on_batch
        self._jobs: dict[str, Job] = {}
        self._lock = threading.RLock()
        self._closed = False        # a closed gateway's jobs: none starts (a restart scheduled before)

    # ------------------------------------------------------------ lifecycle
    def start(self, table: MaterializedTable, streaming_query: str, checkpoint: str, fresh: bool,
              trigger_s: float, dynamic_options: dict[str, str], shuffle_partitions: int,
              streamed: dict[str, tuple[list[str], Listing]]) -> JobHandler:
        """Start the table's query; `fresh` starts over on a new version, else continue the checkpoint.
        The job has its own shuffle partitions whatever the user's session says (a new checkpoint
        keeps them; Spark fixes a stateful stream's partitions when its checkpoint is created).
        `streamed`: each streamed source's folders and the files the stream starts from, which every
        batch checks before it commits."""
        _Listener.follow(self.spark, self)      # from the first job on: a gateway without jobs has none
        frame = self.spark.sql(streaming_query)
        mode, reason = output_mode(self.spark, frame, table)
        if mode is None:
            raise ValidationError(f"Materialized table {table.identifier} cannot be streamed: {reason}")
        run_version = self._run_version(table, fresh)
        if fresh:
            self.storage.files.delete(checkpoint)
        sink = BatchSink(self.store.path, table.identifier, mode, run_version, dict(dynamic_options),
                         self._retention_s(), {s: folders for s, (folders, _) in streamed.items()},
                         {s: listing for s, (_, listing) in streamed.items()})
        writer = (frame.writeStream.queryName(job_name(table)).outputMode(mode)
                  .option("checkpointLocation", checkpoint)
                  .trigger(processingTime=f"{max(trigger_s, 0.1)} seconds")
                  .foreachBatch(sink))
        info = session_info(self.spark)
        BatchGate.open(run_version)
        with self._lock:
            if self._closed:
                raise StateError(f"The continuous refresh job of {table.identifier} was not started: its "
                                 "gateway is closed.")
            try:
                # An idle job says so at every trigger: the dashboard knows the table is up to date.
                with session_conf(self.spark, {"spark.sql.shuffle.partitions": str(shuffle_partitions),
                                               "spark.sql.streaming.noDataProgressEventInterval":
                                                   f"{int(max(trigger_s, 0.1) * 1000)}ms"}):
                    query = start_stream(writer)
            except BaseException:
                BatchGate.discard(run_version)
                if fresh:   # a job that never ran leaves no checkpoint behind
                    self.storage.files.delete(checkpoint)
                raise
            self._jobs[table.identifier] = Job(table.identifier, table.quoted, query, checkpoint, mode,
                                                run_version)
        log.info("Continuous refresh job of %s started (%s mode, every %.1f s, %s)", table.identifier, mode,
                 trigger_s, "fresh" if fresh else "from its checkpoint")
        return JobHandler(str(query.id), str(query.runId), job_name(table), checkpoint, mode, run_version,
                          trigger_s, info.master, info.application_id, dict(dynamic_options))

    def _run_version(self, table: MaterializedTable, fresh: bool) -> str:
        if not fresh and table.job and table.job.run_version:
            return table.job.run_version
        return self.storage.new_version(table, noted=False)

    def stop(self, identifier: str) -> None:
        """Graceful: a batch in flight completes (or is re-run after restart), never half-applied."""
        with self._lock:
            job = self._jobs.pop(identifier, None)
        if job is None:
            return
        job.stopping = True
        try:
            deadline = time.monotonic() + STOP_WAIT_S
            _between_batches(job.query, deadline)
            with BatchGate.closed(job.run_version, max(0.0, deadline - time.monotonic())):
                job.query.stop()
            # The last batch's progress may arrive after the job is gone: its commit is not seen there.
            with contextlib.suppress(MaterializedTableError):     # the table is being dropped
                forget_listing(self.spark, job.quoted)
            log.info("Continuous refresh job of %s stopped", identifier)
        except SPARK_ERRORS as error:
            log.warning("Stopping the streaming job of %s: %s", identifier, spark_message(error))

    def stop_all(self, listening: bool = False) -> None:
        """Every job stopped at a checkpoint; `listening` keeps following the session's queries (a
        gateway that may own the store again later)."""
        if not listening:
            with self._lock:
                self._closed = True
        for identifier in list(self._jobs):
            self.stop(identifier)
        if not listening:
            _Listener.unfollow(self.spark, self)

    def is_running(self, identifier: str) -> bool:
        job = self._jobs.get(identifier)
        return job is not None and job.query.isActive

    def progress(self, identifier: str) -> Progress | None:
        job = self._jobs.get(identifier)
        return job.progress if job else None

    def job(self, identifier: str) -> Job | None:
        return self._jobs.get(identifier)

    # ------------------------------------------------------------- events
    def _by_run(self, run_id: str) -> Job | None:
        """By run, not query id: a job restarted from its checkpoint keeps the query id, and the
        stopped run's last events (its termination above all) arrive after the new run started."""
        return next((j for j in list(self._jobs.values()) if str(j.query.runId) == run_id), None)

    def _progressed(self, run_id: str, progress: dict) -> None:
        job = self._by_run(run_id)
        if job is None:
            return
        record = job.progress
        record.last_checked = time.time()
        record.batch_id = progress.get("batchId")
        record.input_rows = progress.get("numInputRows")
        record.processing_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        if record.input_rows:     # the batch committed before Spark reports its progress
            record.last_published = time.time()
            # It committed in the stream's own session: this session's cached file listing is old.
            forget_listing(self.spark, job.quoted)
            self._on_batch(job.table_id, progress)
        record.history = (record.history + [{"batch_id": record.batch_id, "input_rows": record.input_rows,
                                             "processing_ms": record.processing_ms,
                                             "timestamp": progress.get("timestamp")}])[-20:]

    def _idle(self, run_id: str) -> None:
        """The job looked and its sources had nothing new: the table is as fresh as now."""
        job = self._by_run(run_id)
        if job is not None:
            job.progress.last_checked = time.time()

    def _terminated(self, run_id: str, exception: str | None) -> None:
        job = self._by_run(run_id)
        if job is None or job.stopping:
            return
        with self._lock:
            self._jobs.pop(job.table_id, None)
        self._on_failure(job.table_id, error_sentence(exception or "The streaming job stopped."))


def _between_batches(query: StreamingQuery, deadline: float) -> None:
    """Wait (until `deadline`) for a pause between batches: stopping interrupts the stream's thread,
    and a batch in its write would be aborted half-way (Spark logs the abort and the interrupted
    thread's errors). Where the batches run in this process, BatchGate closes the gap after it."""
    while time.monotonic() < deadline:
        try:
            if not query.isActive or not query.status.get("isTriggerActive"):
                return
        except SPARK_ERRORS:
            return
        time.sleep(0.05)


class _Listener(StreamingQueryListener):
    """One listener per session, for as long as the session lives, passing events to the job sets
    that follow it. Never removed: removing a Spark Connect listener can deadlock with its own event
    thread (PySpark 4.3 joins that thread while holding the lock the thread waits for)."""

    _by_session: dict[int, tuple[Any, _Listener]] = {}
    _guard = threading.Lock()

    def __init__(self) -> None:
        self._followers: weakref.WeakSet[ContinuousJobs] = weakref.WeakSet()

    @classmethod
    def follow(cls, spark: Any, jobs: ContinuousJobs) -> None:
        with cls._guard:
            entry = cls._by_session.get(id(spark))
            if entry is None:      # the session is kept with its listener: its id stays its own
                entry = cls._by_session[id(spark)] = (spark, cls())
                add_listener(spark, entry[1])
            entry[1]._followers.add(jobs)

    @classmethod
    def unfollow(cls, spark: Any, jobs: ContinuousJobs) -> None:
        with cls._guard:
            entry = cls._by_session.get(id(spark))
            if entry is not None:
                entry[1]._followers.discard(jobs)

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        try:
            progress = json.loads(event.progress.json)
            for jobs in list(self._followers):
                jobs._progressed(str(event.progress.runId), progress)
        except Exception:   # noqa: BLE001 - a listener must never break Spark's event bus
            log.exception("Streaming progress")

    def onQueryIdle(self, event) -> None:
        try:
            for jobs in list(self._followers):
                jobs._idle(str(event.runId))
        except Exception:   # noqa: BLE001 - a listener must never break Spark's event bus
            log.exception("Streaming idle event")

    def onQueryTerminated(self, event) -> None:
        try:
            for jobs in list(self._followers):
                jobs._terminated(str(event.runId), event.exception)
        except Exception:   # noqa: BLE001
            log.exception("Streaming termination")
