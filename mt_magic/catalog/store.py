"""The catalog store: one TinyDB JSON file, safe across threads, processes and kills."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from filelock import FileLock
from tinydb import Query, TinyDB
from tinydb.storages import Storage

from mt_magic.catalog.jsonfile import read_json, write_json
from mt_magic.catalog.model import SCHEMA_VERSION, MaterializedTable
from mt_magic.errors import MaterializedTableError

_TABLES = "materialized_tables"
_META = "meta"
_DROPPING = "dropping"          # a record's mark while its DROP deletes the data


class AtomicJSONStorage(Storage):
    """Writes a temporary file, fsyncs it and renames it over the old one: never a torn file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict | None:
        return read_json(self.path)

    def write(self, data: dict) -> None:
        write_json(self.path, data, durable=True)


class CatalogStore:
    """Materialized-table records by identifier; every operation re-reads the file under a lock."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._file_lock = FileLock(self.path + ".lock")
        self._thread_lock = threading.RLock()
        self._table_locks: dict[str, FileLock] = {}
        self._lock_dir = os.path.join(os.path.dirname(self.path), ".locks")
        os.makedirs(self._lock_dir, exist_ok=True)
        with self._thread_lock, self._file_lock:
            _check_ours(self.path)
        with self._db() as db:
            meta = db.table(_META, cache_size=0)
            version = meta.get(doc_id=1)
            if version is None:
                meta.insert({"schema_version": SCHEMA_VERSION})
            elif version["schema_version"] > SCHEMA_VERSION:
                raise MaterializedTableError(
                    f"The catalog store {self.path} was written by a newer mt_magic (schema version "
                    f"{version['schema_version']}, this one reads {SCHEMA_VERSION}).")

    @contextmanager
    def _db(self) -> Iterator[TinyDB]:
        # A fresh TinyDB per operation: no cached documents or id counters from before the lock.
        with self._thread_lock, self._file_lock:
            db = TinyDB(self.path, storage=AtomicJSONStorage)
            try:
                yield db
            finally:
                db.close()

    def table_lock(self, identifier: str) -> FileLock:
        """One table's lock beside the store: one refresh or publish of a table at a time, whichever
        process runs it. Reentrant in the thread that holds it."""
        with self._thread_lock:
            lock = self._table_locks.get(identifier)
            if lock is None:
                name = hashlib.sha1(identifier.encode("utf-8")).hexdigest()[:16]
                lock = self._table_locks[identifier] = FileLock(os.path.join(self._lock_dir, f"{name}.lock"))
            return lock

    def get(self, identifier: str) -> MaterializedTable | None:
        with self._db() as db:
            doc = db.table(_TABLES, cache_size=0).get(Query().identifier == identifier)
        return MaterializedTable.from_document(_strip(doc)) if doc and not doc.get(_DROPPING) else None

    def list(self) -> list[MaterializedTable]:
        return self._records(dropping=False)

    def dropping(self) -> list[MaterializedTable]:
        """Records whose DROP has not finished deleting their data (it was killed, or failed)."""
        return self._records(dropping=True)

    def _records(self, dropping: bool) -> list[MaterializedTable]:
        with self._db() as db:
            docs = db.table(_TABLES, cache_size=0).all()
        return sorted((MaterializedTable.from_document(_strip(d)) for d in docs
                       if bool(d.get(_DROPPING)) is dropping), key=lambda t: t.identifier)

    def put(self, table: MaterializedTable) -> None:
        doc = {**table.to_document(), "identifier": table.identifier}

        def whole(current: dict) -> None:     # not merged: no key of an older record survives
            current.clear()
            current.update(doc)

        with self._db() as db:
            tables = db.table(_TABLES, cache_size=0)
            if not tables.update(whole, Query().identifier == table.identifier):
                tables.insert(doc)

    def update(self, identifier: str,
               change: Callable[[MaterializedTable], MaterializedTable]) -> MaterializedTable | None:
        """Read-modify-write of one record under the lock, so concurrent writers do not clobber."""
        with self._db():
            current = self.get(identifier)
            if current is None:
                return None
            updated = change(current)
            self.put(updated)
            return updated

    def retire(self, identifier: str) -> MaterializedTable | None:
        """The first step of a DROP, one write: the table is gone for every reader of the store,
        and its record stays (marked) until its data is deleted. Returns the record."""
        with self._db() as db:
            tables = db.table(_TABLES, cache_size=0)
            doc = tables.get(Query().identifier == identifier)
            if doc is None:
                return None
            tables.update({_DROPPING: True}, Query().identifier == identifier)
        return MaterializedTable.from_document(_strip(doc))

    def forget(self, identifier: str) -> None:
        """The last step of a DROP: the retired record goes (a new table of that name stays)."""
        with self._db() as db:
            db.table(_TABLES, cache_size=0).remove((Query().identifier == identifier)
                                                   & (Query()[_DROPPING] == True))  # noqa: E712


def _check_ours(path: str) -> None:
    """A file that is not a catalog store is never written to: a clear error, the file left as it is."""
    try:
        document = read_json(path)
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) else "it is not JSON"
        raise MaterializedTableError(f"The catalog store {path} cannot be read ({reason}); it was left as "
                                     "it is.") from None
    if document is not None and not (isinstance(document, dict) and _META in document
                                     and set(document) <= {_META, _TABLES}):
        raise MaterializedTableError(f"{path} is not an mt_magic catalog store; it was left as it is. Name "
                                     "a new file or the catalog.json of an existing store.")


def _strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("identifier", _DROPPING)}
