"""A streaming job's foreachBatch sink: one atomic commit per batch id, so a batch that is re-run
after a crash changes nothing twice (complete mode: a new version published like a FULL refresh;
append mode: a hidden folder renamed to `b-<batch id>` in the run's version folder), and no commit
of a batch that read a source which lost or rewrote files. A batch fails with a line, not a
traceback, and a stop never aborts a batch's write half-way (BatchGate)."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame

from mt_magic.catalog.model import MaterializedTable, Target
from mt_magic.catalog.store import CatalogStore
from mt_magic.refresh.full import shape
from mt_magic.spark.files import WRITE_WAIT_S, Files, Listing
from mt_magic.spark.streaming import BatchFailure, batch_failure
from mt_magic.storage.formats import data_source_options, folder_writer
from mt_magic.storage.versions import TableStorage

log = logging.getLogger(__name__)

APPEND, COMPLETE = "append", "complete"
BATCH_PREFIX = "b-"


class BatchGate:
    """Where the stream's batches run in this process (a classic session): a stop waits for the batch
    being written, and a batch due meanwhile ends at once, as interrupted — Spark's stop interrupts
    the stream's thread, which aborts a write half-way with ERROR records on the user's console. Over
    Spark Connect the batches run in the server's Python worker, out of a client's reach: there is no
    gate there, and the stop waits for a pause between triggers only."""

    _open: ClassVar[dict[str, BatchGate]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._writing = threading.Lock()
        self._closing = threading.Event()

    @property
    def closing(self) -> bool:
        """The stream is being stopped: a batch's failure now is the stop's."""
        return self._closing.is_set()

    @classmethod
    def open(cls, run_version: str) -> None:
        """The stream writing `run_version` starts in this process."""
        with cls._guard:
            cls._open[run_version] = cls()

    @classmethod
    def discard(cls, run_version: str) -> None:
        """The stream did not start."""
        with cls._guard:
            cls._open.pop(run_version, None)

    @classmethod
    @contextlib.contextmanager
    def batch(cls, run_version: str) -> Iterator[BatchGate | None]:
        """Around a batch: its stream's gate, if it runs in this process."""
        gate = cls._open.get(run_version)
        if gate is None:
            yield None
            return
        while not gate._writing.acquire(timeout=0.05):
            if gate.closing:
                raise batch_failure(None)
        try:
            if gate.closing:
                raise batch_failure(None)
            yield gate
        finally:
            gate._writing.release()

    @classmethod
    @contextlib.contextmanager
    def closed(cls, run_version: str, wait_s: float) -> Iterator[None]:
        """While the stream stops: the batch being written is waited for (up to `wait_s`), and no
        other starts."""
        with cls._guard:
            gate = cls._open.get(run_version)
        if gate is None:        # it runs elsewhere (Connect), or failed and was not started again
            yield
            return
        gate._closing.set()     # kept open until the stream has stopped: a batch due meanwhile ends
        held = gate._writing.acquire(timeout=wait_s)
        try:
            yield
        finally:
            if held:
                gate._writing.release()
            with cls._guard:
                if cls._open.get(run_version) is gate:
                    del cls._open[run_version]


@dataclass
class BatchSink:
    """foreachBatch: one atomic commit per batch id (see the module docstring).

    It holds plain values only: over Spark Connect it is pickled and runs in the server's Python
    worker, where it opens the catalog store itself and works through the batch's own session. The
    table's lock is the store's cross-process one, so a batch never publishes beside a refresh.
    """

    store_path: str
    identifier: str
    mode: str
    run_version: str
    dynamic_options: dict[str, str]
    retention_s: float
    streamed: dict[str, list[str]]                  # streamed source → its folders
    seen: dict[str, Listing]                        # … → its files when the last batch committed
    _moved: str | None = field(default=None, init=False)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        gate = None
        try:
            with BatchGate.batch(self.run_version) as gate:
                self._run(batch, batch_id)
        except BatchFailure:
            raise
        except Exception as error:   # noqa: BLE001 - Spark reads what a batch raises as text, see batch_failure
            raise batch_failure(error, stopping=gate is not None and gate.closing) from None

    def _run(self, batch: DataFrame, batch_id: int) -> None:
        storage = TableStorage(batch.sparkSession)
        if not self._held(storage.files):
            log.info("Batch %d of %s not committed: the streamed source %s lost or rewrote files, so the "
                     "stream no longer matches it (the table is recomputed and streamed afresh)",
                     batch_id, self.identifier, self._moved)
            _drain(batch)
            return
        store = CatalogStore(self.store_path)
        with store.table_lock(self.identifier):
            self._commit(store, storage, batch, batch_id)

    def _held(self, files: Files) -> bool:
        """A file stream sees new files only: after a streamed source lost or rewrote one (an
        overwrite, a delete, a compaction), a batch counts rows the source no longer has, or old and
        new rows together. From then on this run commits nothing; the watcher recomputes the table
        and starts the stream afresh. A job writing into a source is waited for first (an overwrite
        deletes the old files before it commits the new)."""
        if self._moved is None:
            files.await_writes([f for folders in self.streamed.values() for f in folders], WRITE_WAIT_S)
            now = {source: _listing(files, folders) for source, folders in self.streamed.items()}
            self._moved = next((source for source, before in self.seen.items()
                                if any(now[source].get(path) != facts for path, facts in before.items())), None)
            self.seen = now
        return self._moved is None

    def _commit(self, store: CatalogStore, storage: TableStorage, batch: DataFrame, batch_id: int) -> None:
        table = store.get(self.identifier)
        if table is None:
            return                                    # dropped while the batch ran
        frame = shape(batch, table.columns, table.identifier)
        options = data_source_options({**table.options, **self.dynamic_options})
        if self.mode == COMPLETE:
            target = storage.new_version(table)
            folder_writer(frame, table.storage.format, options, table.partition_keys).save(target)
            self._publish(store, storage, table, target)
            storage.written(target)
            return
        final = f"{self.run_version}/{BATCH_PREFIX}{batch_id:012d}"
        if not storage.files.exists(final):
            staged = f"{self.run_version}/_staged-{batch_id}-{uuid.uuid4().hex[:8]}"
            folder_writer(frame, table.storage.format, options, table.partition_keys).save(staged)
            storage.files.rename(staged, final)
        if table.storage.location.rstrip("/") != self.run_version.rstrip("/"):
            self._publish(store, storage, table, self.run_version)

    def _publish(self, store: CatalogStore, storage: TableStorage, table: MaterializedTable,
                 version: str) -> None:
        storage.files.mkdirs(version)
        published = storage.publish(table, version, Target())
        updated = store.update(self.identifier, lambda t: t.evolve(storage=published))
        storage.sweep(updated, self.retention_s, just_published=True)


def _drain(batch: DataFrame) -> None:
    """The batch run through and written nowhere: a batch left unread leaves its state stores
    uncommitted, and Spark (4.x) fails the stream for it with a whole Java stack on the console. Its
    files may be gone by now (another rewrite): then the stream fails as before, and restarts."""
    try:
        batch.write.format("noop").mode("overwrite").save()
    except Exception as error:  # noqa: BLE001 - the stream's own failure follows, and is handled
        log.info("A batch after a rewrite could not be run through: %s", str(error).splitlines()[0][:200])


def _listing(files: Files, folders: list[str]) -> Listing:
    found: Listing = {}
    for folder in folders:
        found.update(files.listing(folder))
    return found
