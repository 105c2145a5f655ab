"""A client's session follows the store that another process owns: the tables it created, published
and dropped become visible here, as Spark tables at their published versions."""

from __future__ import annotations

import logging
import threading

from mt_magic.catalog.model import INITIALIZING, MaterializedTable
from mt_magic.errors import MaterializedTableError
from mt_magic.manager.workspace import Workspace
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.sql.statements import quote_identifier

log = logging.getLogger(__name__)


class Follower:
    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._followed: dict[str, tuple | None] = {}     # table → what this session's readers see
        self._following = threading.Lock()

    def follow(self) -> None:
        """Every table whose published version changed since the last call, switched here; tables
        gone from the store, forgotten."""
        with self._following:
            seen: dict[str, tuple | None] = {}
            for table in self.ws.store.list():
                if table.refresh_status == INITIALIZING:
                    continue
                seen[table.identifier] = _published(table)
                if self._followed.get(table.identifier) == seen[table.identifier]:
                    continue
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
                    except (MaterializedTableError, *SPARK_ERRORS) as error:
                        log.warning("Following %s: %s", table.identifier, spark_message(error))
                        seen[table.identifier] = None        # tried again at the next change
            for identifier in set(self._followed) - set(seen):
                self.ws.storage.forget(".".join(quote_identifier(p) for p in identifier.split(".", 2)))
            self._followed = seen


def _published(table: MaterializedTable) -> tuple:
    """What readers of the table see: its location and its partitions' locations."""
    storage = table.storage
    return storage.location, tuple((tuple(p.spec.items()), p.location) for p in storage.partitions)
