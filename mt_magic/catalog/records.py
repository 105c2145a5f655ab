"""The store's records, one small TinyDB file per table: a statement on one table reads and writes
that table's file alone, so its cost does not grow with the store.

Each file is written whole or not at all (a temporary file renamed over the old one, fsynced), under
the table's own record lock. A listing re-reads only the files that changed since the last one
(their inode, size and time say so), so listing a thousand tables costs a folder scan.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from filelock import FileLock
from tinydb import TinyDB
from tinydb.storages import Storage

from mt_magic.catalog.jsonfile import read_json, write_json

RECORDS_DIR = "tables"
_RECORD = "record"          # the one TinyDB table of a record file, holding one document
_SUFFIX = ".json"
_UNPARSED = object()        # a document read, not parsed yet


class AtomicJSONStorage(Storage):
    """Writes a temporary file, fsyncs it and renames it over the old one: never a torn file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict | None:
        return read_json(self.path)

    def write(self, data: dict) -> None:
        write_json(self.path, data, durable=True)


class NamedLocks:
    """A file lock per identifier in the store's `.locks` folder, named by a hash of the identifier
    (a name never becomes a path); one FileLock object per identifier, so it is reentrant in a thread."""

    def __init__(self, home: str, suffix: str, length: int) -> None:
        self._folder = os.path.join(home, ".locks")
        os.makedirs(self._folder, exist_ok=True)
        self._suffix, self._length = suffix, length
        self._guard = threading.Lock()
        self._locks: dict[str, FileLock] = {}

    def get(self, identifier: str) -> FileLock:
        with self._guard:
            lock = self._locks.get(identifier)
            if lock is None:
                name = _file_name(identifier)[:self._length] + self._suffix
                lock = self._locks[identifier] = FileLock(os.path.join(self._folder, name))
            return lock


class RecordFiles:
    """Documents by identifier, each in `tables/<hash>.json` in the store's folder (a name never becomes a
    path: the file is named by a hash of the identifier, which the document also holds). `parse`
    turns a document into what a listing returns, once per version of the file."""

    def __init__(self, home: str, parse: Callable[[dict], Any]) -> None:
        self._parse = parse
        self.folder = os.path.join(home, RECORDS_DIR)
        os.makedirs(self.folder, exist_ok=True)
        self._locks = NamedLocks(home, ".record.lock", length=24)
        self._thread_lock = threading.RLock()
        self._seen: dict[str, tuple[tuple[int, int, int], dict | None, Any]] = {}   # file → (stat, document, parsed)

    def path(self, identifier: str) -> str:
        return os.path.join(self.folder, _file_name(identifier) + _SUFFIX)

    @contextmanager
    def locked(self, identifier: str) -> Iterator[None]:
        """One writer of the record at a time, across threads and processes (reentrant in a thread)."""
        with self._locks.get(identifier):
            yield

    def read(self, identifier: str) -> dict | None:
        with self._db(self.path(identifier)) as db:
            document = db.table(_RECORD, cache_size=0).get(doc_id=1)
        return dict(document) if document is not None and document.get("identifier") == identifier else None

    def write(self, document: dict) -> None:
        """The record replaced whole (no key of an older document survives), in one file write."""
        def whole(current: dict) -> None:
            current.clear()
            current.update(document)

        with self._db(self.path(document["identifier"])) as db:
            table = db.table(_RECORD, cache_size=0)
            if table.contains(doc_id=1):      # an update that finds nothing would still write
                table.update(whole, doc_ids=[1])
            else:
                table.insert(document)

    def remove(self, identifier: str) -> None:
        try:
            os.unlink(self.path(identifier))
        except FileNotFoundError:
            pass

    def all(self) -> list[Any]:
        """Every document, parsed; files unchanged since the last call are not read again, and a
        document is parsed once per version of its file."""
        with self._thread_lock:
            self._scan()
            found = []
            for name, (key, document, parsed) in self._seen.items():
                if document is None:
                    continue
                if parsed is _UNPARSED:
                    parsed = self._parse(document)
                    self._seen[name] = (key, document, parsed)
                found.append(parsed)
            return found

    def documents(self) -> list[dict]:
        """Every document as stored, not parsed: what a listing of names needs."""
        with self._thread_lock:
            self._scan()
            return [document for _, document, _ in self._seen.values() if document is not None]

    def _scan(self) -> None:
        """Reads the files that changed since the last scan (their inode, size and time say so)."""
        seen: dict[str, tuple[tuple[int, int, int], dict | None, Any]] = {}
        for entry in os.scandir(self.folder):
            if not entry.name.endswith(_SUFFIX):
                continue          # a writer's temporary file
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            known = self._seen.get(entry.name)
            if known is not None and known[0] == key:
                seen[entry.name] = known
                continue
            try:
                document = (read_json(entry.path) or {}).get(_RECORD, {}).get("1")
            except FileNotFoundError:
                continue
            seen[entry.name] = (key, document or None, _UNPARSED)
        self._seen = seen

    def stamp(self) -> int:
        """Changes whenever any record does: how a client notices another process's write."""
        with self._thread_lock:
            self._scan()
            return hash(tuple(sorted((name, key) for name, (key, _, _) in self._seen.items())))

    @contextmanager
    def _db(self, path: str) -> Iterator[TinyDB]:
        # A fresh TinyDB per operation: no cached documents from before the caller's lock.
        db = TinyDB(path, storage=AtomicJSONStorage)
        try:
            yield db
        finally:
            db.close()


def _file_name(identifier: str) -> str:
    return hashlib.sha1(identifier.encode("utf-8")).hexdigest()[:24]
