"""The catalog store: the records of every materialized table, safe across threads, processes and
kills. The store file (`catalog.json`) names the store and its layout; everything else of the store
is in its own folder beside it (`catalog.json.d`), each table's record a file of its own
(catalog/records.py), so a statement on one table costs one table, not the store."""

from __future__ import annotations

import os
from collections.abc import Callable

from filelock import FileLock
from tinydb import TinyDB

from mt_magic.catalog import layout
from mt_magic.catalog.history import HISTORY_DIR, history_file_name
from mt_magic.catalog.jsonfile import read_json, store_home
from mt_magic.catalog.model import MaterializedTable
from mt_magic.catalog.records import AtomicJSONStorage, NamedLocks, RecordFiles
from mt_magic.errors import MaterializedTableError

_DROPPING = "dropping"          # a record's mark while its DROP deletes the data


class CatalogStore:
    """Materialized-table records by identifier; every read sees the latest write of any process."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.home = store_home(self.path)
        os.makedirs(self.home, exist_ok=True)
        self._records = RecordFiles(self.home, parse=_parsed)
        self._table_locks = NamedLocks(self.home, ".lock", length=16)
        self.warnings: list[str] = []       # what opening could not do: tables it could not attribute
        with FileLock(self.path + ".lock"):
            _check_ours(self.path)
            self._open_layout()

    def _open_layout(self) -> None:
        """Write the layout on a new store; move a store of an earlier layout into its folder (each
        record first, the store file last: a kill in between moves the rest at the next open)."""
        db = TinyDB(self.path, storage=AtomicJSONStorage)
        try:
            meta = db.table(layout.META, cache_size=0).get(doc_id=1)
            version = meta["schema_version"] if meta is not None else None
            if version is not None and version > layout.LAYOUT:
                raise MaterializedTableError(
                    f"The catalog store {self.path} was written by a newer mt_magic (schema version "
                    f"{version}, this one reads {layout.LAYOUT}).")
            if version == layout.LAYOUT:
                shared = bool(meta.get("shared"))
            elif version == layout.SHARED_LAYOUT:
                shared = bool(layout.sharing(self.path))
                if not shared:
                    layout.move_beside_into(self.path, self.home)
            else:
                shared = False
                for document in db.table(layout.RECORDS, cache_size=0).all():
                    self._records.write(dict(document))
            if version != layout.LAYOUT:
                new_meta = {"schema_version": layout.LAYOUT, **({"shared": True} if shared else {})}
                db.storage.write({layout.META: {"1": new_meta}})
        finally:
            db.close()
        if shared:
            self._warn_unattributed()

    def _legacy(self) -> RecordFiles | None:
        """The records folder an earlier layout shared among the stores beside this one, if any."""
        shared = os.path.isdir(layout.legacy_records_folder(self.path))
        return RecordFiles(os.path.dirname(self.path), parse=_parsed) if shared else None

    def _warn_unattributed(self) -> None:
        legacy = self._legacy()
        names = sorted(table.identifier for _, table in legacy.all()) if legacy else []
        if names:
            folder = layout.legacy_records_folder(self.path)
            self.warnings.append(
                f"The catalog stores in {os.path.dirname(self.path)} shared one folder of records "
                f"({folder}), which does not say which store each table belongs to: "
                f"{', '.join(names)} could not be attributed and stay there. Move each into its store "
                "with `mt-magic adopt --store <store file> <table> ...`.")

    def adopt(self, names: list[str]) -> list[str]:
        """Records left unattributed in the shared folder of an earlier layout, moved into this store
        (with their history). A name matches an identifier's last parts. Returns the identifiers moved."""
        legacy = self._legacy()
        found = {table.identifier for _, table in legacy.all()} if legacy else set()
        moved = []
        for name in names:
            matches = sorted(i for i in found if f".{i}".endswith(f".{name}"))
            if len(matches) != 1:
                raise MaterializedTableError(
                    f"{name}: {'no' if not matches else 'more than one'} unattributed table of that name "
                    f"in {layout.legacy_records_folder(self.path)}"
                    f"{'' if not matches else ' (' + ', '.join(matches) + ')'}.")
            identifier = matches[0]
            assert legacy is not None
            with self._records.locked(identifier), legacy.locked(identifier):
                if self._records.read(identifier) is not None:
                    raise MaterializedTableError(f"{identifier}: this store has a table of that name already.")
                self._records.write(legacy.read(identifier))
                legacy.remove(identifier)
            history = history_file_name(identifier)
            old_history = os.path.join(os.path.dirname(self.path), HISTORY_DIR, history)
            if os.path.exists(old_history):
                os.makedirs(os.path.join(self.home, HISTORY_DIR), exist_ok=True)
                layout.merge_file(old_history, os.path.join(self.home, HISTORY_DIR, history))
            found.discard(identifier)
            moved.append(identifier)
        return moved

    def table_lock(self, identifier: str) -> FileLock:
        """One table's lock in the store's folder: one refresh or publish of a table at a time, whichever
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

    def names(self) -> list[tuple[str, str, str]]:
        """(catalog, database, name) of every table, without parsing the records: what SHOW needs."""
        return sorted((d["catalog"], d["database"], d["name"]) for d in self._records.documents()
                      if not d.get(_DROPPING))

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
    if document is not None and not (isinstance(document, dict) and layout.META in document
                                     and set(document) <= {layout.META, layout.RECORDS}):
        raise MaterializedTableError(f"{path} is not an mt_magic catalog store; it was left as it is. Name "
                                     "a new file or the catalog.json of an existing store.")


def _parsed(document: dict) -> tuple[bool, MaterializedTable]:
    return bool(document.get(_DROPPING)), MaterializedTable.from_document(_strip(document))


def _strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("identifier", _DROPPING)}
