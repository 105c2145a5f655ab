"""What a new owner does after it opened the store, in the background: tables put back into Spark in
bulk and in dependency order, streams restarted, old versions swept, missed fires caught up. A client
whose Spark catalog lacks the store's tables puts them back the same way, and does nothing else.

Opening a store of a thousand tables therefore returns at once. A statement, or a refresh, on a
table that is not back in Spark yet waits for that table: if the background has not taken it up,
the waiting thread puts it back itself; if it has, the thread waits for that batch to end, so what
the statement does (a DROP, a publish) is never undone by the batch's DDL arriving after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from mt_magic.catalog.model import ACTIVATED, MaterializedTable
from mt_magic.errors import MaterializedTableError
from mt_magic.manager.pipelines import Pipelines
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.storage.registry import SCRIPT_BATCH, Registration

log = logging.getLogger(__name__)
WORKERS = 2              # scripts of DDL side by side: Spark's driver spends its time in each statement


class TakeoverTables:
    def __init__(self, pipelines: Pipelines, catch_up: Callable[[], None]) -> None:
        self.pipelines = pipelines
        self.ws = pipelines.ws
        self._catch_up = catch_up
        self.warnings: list[str] = []
        self._waiting: dict[str, MaterializedTable] = {}      # not back in Spark yet, by identifier
        self._taken: set[str] = set()                         # being put back now
        self._failed: set[str] = set()                        # Spark's entry may not be the record's
        self._guard = threading.Lock()
        self._batch_ended = threading.Condition(self._guard)
        self._stopping = threading.Event()
        self._registered = threading.Event()                  # every table is back in Spark, streaming
        self._thread: threading.Thread | None = None
        self._registration: Registration | None = None

    def start(self, tables: list[MaterializedTable], owner: bool = True) -> None:
        """Databases created and listed now (one call each); the rest in the background. A client
        (not `owner`) only puts the tables back."""
        self.stop()           # a client's restore, when it becomes the owner
        try:
            self._registration = Registration(self.ws.storage, tables)
            waiting = _dependency_order(tables)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            self.warnings.append(f"Putting the tables back into Spark: {spark_message(error)}")
            waiting = []
        with self._guard:
            self._waiting = {t.identifier: t for t in waiting}
            self._taken = set()
            self._batch_ended.notify_all()
        self._stopping.clear()
        self._registered.clear()
        self._thread = threading.Thread(target=self._run, args=(tables, owner), name="mt_magic-restore",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def registered(self, timeout_s: float | None = None) -> bool:
        """Until every table is back in Spark and streaming again (sweeps and catch-up may go on);
        False on timeout."""
        return self._registered.wait(timeout_s)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Until the whole restore is over (streams, sweeps and catch-up included); False on timeout."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._thread is None or not self._thread.is_alive()

    def failed(self) -> set[str]:
        """The tables that could not be put back: Spark's entry may not be the record's."""
        with self._guard:
            return set(self._failed)

    def recovered(self, identifier: str) -> None:
        """A failed table that its follower has since made agree with its record."""
        with self._guard:
            self._failed.discard(identifier)

    # --------------------------------------------------------------- waiting
    def named_in(self, mentions: Iterable[str]) -> None:
        """Wait for the tables a statement may name: the words and quoted names of its text, lower-cased
        (a name it holds in any part counts: at worst a table is put back a moment early)."""
        with self._guard:
            waiting = list(self._waiting.values())
        if waiting:
            names = set(mentions)
            self.ensure([t.identifier for t in waiting if t.name.lower() in names])

    def ensure(self, identifiers: Iterable[str]) -> None:
        """These tables back in Spark now: put back here, or, if the background has taken one up,
        once its batch has ended."""
        for identifier in identifiers:
            with self._guard:
                while identifier in self._taken:
                    self._batch_ended.wait()
                table = self._waiting.get(identifier)
                if table is None:
                    continue
                self._taken.add(identifier)
            self._put_back([table])

    # ------------------------------------------------------------ background
    def _run(self, tables: list[MaterializedTable], owner: bool) -> None:
        try:
            workers = [threading.Thread(target=self._register, name=f"mt_magic-restore-{n}", daemon=True)
                       for n in range(1, WORKERS)]
            for worker in workers:
                worker.start()
            self._register()
            for worker in workers:
                worker.join()
            if not owner:
                return
            ordered = _dependency_order(tables)
            for table in (t for t in ordered if t.streams and not self._stopping.is_set()):
                self._restart(table)
            self._registered.set()
            for table in ordered:
                if self._stopping.is_set():
                    return
                self._sweep(table)
            if not self._stopping.is_set():
                self._catch_up()
        except Exception as error:    # noqa: BLE001 - a closed session mid-restore: the next owner redoes it
            log.warning("Restoring the catalog store's tables: %s", spark_message(error))
        finally:
            self._registered.set()

    def _register(self) -> None:
        """Batches of the tables nobody has taken, in dependency order, until none is left."""
        try:
            while not self._stopping.is_set():
                with self._guard:
                    batch = [t for i, t in self._waiting.items() if i not in self._taken][:SCRIPT_BATCH]
                    self._taken.update(t.identifier for t in batch)
                if not batch:
                    return
                self._put_back(batch)
        except Exception as error:    # noqa: BLE001 - a closed session: the next owner redoes it
            log.warning("Putting the tables back into Spark: %s", spark_message(error))

    def _put_back(self, batch: list[MaterializedTable]) -> None:
        try:
            failures = self._registration.put_back(batch)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            failures = {t.identifier: spark_message(error) for t in batch}
        finally:
            with self._guard:
                for table in batch:
                    self._waiting.pop(table.identifier, None)
                    self._taken.discard(table.identifier)
                self._failed.update(failures)
                self._batch_ended.notify_all()
        self.warnings.extend(f"{i}: {message}" for i, message in failures.items())

    def _restart(self, table: MaterializedTable) -> None:
        """An ACTIVATED CONTINUOUS table that Spark streams: its job again, from its checkpoint."""
        pipelines = self.pipelines
        try:
            with self.ws.lock(table.identifier):
                current = self.ws.store.get(table.identifier)
                if current is None or not current.streams or current.refresh_status != ACTIVATED or \
                        pipelines.streaming(current.identifier):
                    return                 # dropped, suspended or restarted meanwhile
                try:
                    handler = pipelines.start(current, fresh=False)
                except (MaterializedTableError, *SPARK_ERRORS) as error:
                    pipelines.stream_failed(current.identifier, spark_message(error))   # retried, or suspended
                    raise
                self.ws.store.update(current.identifier, lambda t: t.evolve(refresh_handler=handler))
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            self.warnings.append(f"{table.identifier}: {spark_message(error)}")

    def _sweep(self, table: MaterializedTable) -> None:
        """Old versions of the table deleted once unreferenced for the retention."""
        try:
            with self.ws.lock(table.identifier):
                current = self.ws.store.get(table.identifier)
                if current is not None:
                    self.ws.storage.sweep(current, self.ws.retention_s(),
                                          just_published=current.identifier not in self._failed)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            self.warnings.append(f"{table.identifier}: {spark_message(error)}")


def _dependency_order(tables: list[MaterializedTable]) -> list[MaterializedTable]:
    """The tables a table reads before it (a table read by many is put back early)."""
    by_id = {t.identifier: t for t in tables}
    ordered: dict[str, MaterializedTable] = {}
    for root in tables:
        stack, open_ = [(root, False)], set()
        while stack:
            table, expanded = stack.pop()
            if table.identifier in ordered:
                continue
            if expanded:
                ordered[table.identifier] = table
                continue
            open_.add(table.identifier)
            stack.append((table, True))
            stack.extend((by_id[s], False) for s in table.source_tables
                         if s in by_id and s not in ordered and s not in open_)
    return list(ordered.values())
