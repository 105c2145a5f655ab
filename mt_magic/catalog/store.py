"""The catalog store: the records of every materialized table, safe across threads, processes and
kills. `catalog.json` names the store and its layout; each table's record is a file of its own
(catalog/records.py), so a statement on one table costs one table, not the store."""

from __future__ import annotations

import os
from collections.abc import Callable

from filelock import FileLock
from tinydb import TinyDB

from mt_magic.catalog.jsonfile import read_json
from mt_magic.catalog.model import MaterializedTable
from mt_magic.catalog.records import AtomicJSONStorage, NamedLocks, RecordFiles
from mt_magic.errors import MaterializedTableError

_TABLES = "materialized_tables"     # layout 1: every record in catalog.json itself
_META = "meta"
_DROPPING = "dropping"          # a record's mark while its DROP deletes the data
LAYOUT = 2                      # the store's layout (meta's schema_version): 2 = a file per record


class CatalogStore:
    """Materialized-table records by identifier; every read sees the latest write of any process."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        home = os.path.dirname(self.path)
        os.makedirs(home, exist_ok=True)
        self._records = RecordFiles(home, parse=lambda d: (bool(d.get(_DROPPING)),
                                                           MaterializedTable.from_document(_strip(d))))
        self._table_locks = NamedLocks(home, ".lock", length=16)
        with FileLock(self.path + ".lock"):
            _check_ours(self.path)
            self._open_layout()

    def _open_layout(self) -> None:
        """Write the layout on a new store; move the records of a layout-1 store into their own files
        (each record first, then catalog.json: a kill in between moves them again, losing nothing)."""
        db = TinyDB(self.path, storage=AtomicJSONStorage)
        try:
            meta = db.table(_META, cache_size=0).get(doc_id=1)
            if meta is not None and meta["schema_version"] > LAYOUT:
                raise MaterializedTableError(
                    f"The catalog store {self.path} was written by a newer mt_magic (schema version "
                    f"{meta['schema_version']}, this one reads {LAYOUT}).")
            if meta is not None and meta["schema_version"] == LAYOUT:
                return
            for document in db.table(_TABLES, cache_size=0).all():
                self._records.write(dict(document))
            db.storage.write({_META: {"1": {"schema_version": LAYOUT}}})
        finally:
            db.close()

    def table_lock(self, identifier: str) -> FileLock:
        """One table's lock beside the store: one refresh or publish of a table at a time, whichever
        process runs it. Reentrant in the thread that holds it."""
        return self._table_locks.get(identifier)

    def stamp(self) -> int:
        """Changes whenever any record does."""
        return self._records.stamp()

    def get(self, identifier: str) -> MaterializedTable | None:
        doc = self._records.read(identifier)
        return MaterializedTable.from_document(_strip(doc)) if doc and not doc.get(_DROPPING) else None

    def list(self) -> list[MaterializedTable]:
        return self._list(dropping=False)

    def dropping(self) -> list[MaterializedTable]:
        """Records whose DROP has not finished deleting their data (it was killed, or failed)."""
        return self._list(dropping=True)

    def _list(self, dropping: bool) -> list[MaterializedTable]:
        # Records are immutable: one parsed per version of its file serves every listing.
        return sorted((table for marked, table in self._records.all() if marked is dropping),
                      key=lambda t: t.identifier)

    def put(self, table: MaterializedTable) -> None:
        with self._records.locked(table.identifier):
            self._records.write({**table.to_document(), "identifier": table.identifier})

    def update(self, identifier: str,
               change: Callable[[MaterializedTable], MaterializedTable]) -> MaterializedTable | None:
        """Read-modify-write of one record under its lock, so concurrent writers do not clobber."""
        with self._records.locked(identifier):
            current = self.get(identifier)
            if current is None:
                return None
            updated = change(current)
            self.put(updated)
            return updated

    def retire(self, identifier: str) -> MaterializedTable | None:
        """The first step of a DROP, one write: the table is gone for every reader of the store,
        and its record stays (marked) until its data is deleted. Returns the record."""
        with self._records.locked(identifier):
            doc = self._records.read(identifier)
            if doc is None:
                return None
            self._records.write({**doc, _DROPPING: True})
        return MaterializedTable.from_document(_strip(doc))

    def forget(self, identifier: str) -> None:
        """The last step of a DROP: the retired record goes (a new table of that name stays)."""
        with self._records.locked(identifier):
            doc = self._records.read(identifier)
            if doc is not None and doc.get(_DROPPING):
                self._records.remove(identifier)


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
