"""A client's session follows the store that another process owns: the tables it created, published
and dropped become visible here, as Spark tables at their published versions. When the client opens
the store, the tables its Spark catalog lacks are put back in the background (manager/takeover_tables.py),
as a new owner does."""

from __future__ import annotations

import logging
import threading

from mt_magic.catalog.model import INITIALIZING, MaterializedTable
from mt_magic.errors import MaterializedTableError
from mt_magic.manager.takeover_tables import TakeoverTables
from mt_magic.manager.workspace import Workspace
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.registry import Registration

log = logging.getLogger(__name__)


class Follower:
    def __init__(self, ws: Workspace, tables: TakeoverTables) -> None:
        self.ws = ws
        self._takeover_tables = tables
        self._followed: dict[str, tuple | None] = {}     # table → what this session's readers see
        self._following = threading.Lock()

    def open(self) -> None:
        """A client's first look at the store: every table is put back at the version listed now, in
        the background; what another process publishes or drops meanwhile is followed after that
        table's batch (see `follow`)."""
        with self._following:
            tables = [t for t in self.ws.store.list() if t.refresh_status != INITIALIZING]
            self._followed = {t.identifier: _published(t) for t in tables}
            self._takeover_tables.start(tables, owner=False)

    def follow(self) -> None:
        """Every table whose published version changed since the last call, switched here; tables
        gone from the store, forgotten."""
        with self._following:
            seen: dict[str, tuple | None] = {}
            failed = self._takeover_tables.failed()          # tried again at each change, until they agree
            tables = [t for t in self.ws.store.list() if t.refresh_status != INITIALIZING]
            for table in self._created_in_bulk(tables):
                seen[table.identifier] = _published(table)
            for table in tables:
                if table.identifier in seen:
                    continue
                seen[table.identifier] = _published(table)
                if self._followed.get(table.identifier) == seen[table.identifier] and table.identifier not in failed:
                    continue
                self._takeover_tables.ensure([table.identifier])     # its batch, if any, first
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
                        self._takeover_tables.recovered(table.identifier)
                    except (MaterializedTableError, *SPARK_ERRORS) as error:
                        log.warning("Following %s: %s", table.identifier, spark_message(error))
                        seen[table.identifier] = None        # tried again at the next change
            for identifier in set(self._followed) - set(seen):
                self._takeover_tables.ensure([identifier])
                self.ws.storage.forget(".".join(quote_identifier(p) for p in identifier.split(".", 2)))
            self._followed = seen

    def _created_in_bulk(self, tables: list[MaterializedTable]) -> list[MaterializedTable]:
        """Many tables another process created at once (or a store this client follows again after
        owning it): those its Spark catalog lacks, created by a few scripts instead of one call each
        (a table another process publishes meanwhile changes the store again, and is followed then)."""
        new = [t for t in tables if t.identifier not in self._followed]
        if len(new) < 2:
            return []
        try:
            registration = Registration(self.ws.storage, new)
            missing = registration.missing(new)
            failures = registration.create(missing)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            log.warning("Registering the store's tables: %s", spark_message(error))
            return []
        return [t for t in missing if t.identifier not in failures]


def _published(table: MaterializedTable) -> tuple:
    """What readers of the table see: its location and its partitions' locations."""
    storage = table.storage
    return storage.location, tuple((tuple(p.spec.items()), p.location) for p in storage.partitions)
