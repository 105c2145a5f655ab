"""The failure rule, one for scheduled refreshes and streaming jobs alike: a pipeline's run is retried
with backoff, failed runs in a row are counted on the record, a success clears the count, and at
`max-consecutive-failures` the table is suspended with the reason (a table that keeps failing should
stop costing a cluster, and say why)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from mt_magic import config as cfg
from mt_magic.catalog.model import ACTIVATED, SUSPENDED, MaterializedTable
from mt_magic.errors import MaterializedTableError, TableNotFoundError
from mt_magic.manager.workspace import Workspace
from mt_magic.spark.tables import TableLookup, lookup_table
from mt_magic.spark.errors import SPARK_ERRORS, error_text

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 1.0        # before a pipeline's refresh is tried again: 1 s, 2 s, 4 s …
T = TypeVar("T")
Change = Callable[[MaterializedTable], MaterializedTable]


def _unchanged(table: MaterializedTable) -> MaterializedTable:
    return table


def clear_failures(table: MaterializedTable) -> MaterializedTable:
    """The record after a run that worked: earlier failures are no longer in a row."""
    return table.evolve(consecutive_failures=0)


class FailureRule:
    def __init__(self, ws: Workspace) -> None:
        self.ws = ws

    def retried(self, identifier: str, attempt: Callable[[], T], on_suspend: Callable[[], None]) -> T:
        """`attempt`, tried again with backoff after a failure; when every try failed, one failed run.
        A table dropped meanwhile is not tried again."""
        retries = int(self.ws.options.get(cfg.REFRESH_RETRIES))
        for number in range(retries + 1):
            try:
                return attempt()
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                gone = self._gone_sources(identifier, error)
                if gone:
                    self.suspend(identifier, f"its source {', '.join(gone)} does not exist (dropped, or not "
                                             "in this application's catalog); the last refresh: "
                                             f"{error_text(error)}", on_suspend)
                    raise
                if isinstance(error, TableNotFoundError) or number == retries:
                    self.failed(identifier, "failed refreshes", error_text(error), on_suspend)
                    raise
                time.sleep(RETRY_BACKOFF_S * 2 ** number)
        raise AssertionError("unreachable")

    def failed(self, identifier: str, what: str, message: str, on_suspend: Callable[[], None],
               noted: Change = _unchanged, suspended: Change = _unchanged) -> MaterializedTable | None:
        """One more failed run of an ACTIVATED table (`noted` adds what the caller keeps of it). At the
        limit, the pipeline stops (`on_suspend`) and the table is SUSPENDED with the reason (`suspended`
        adds what a RESUME needs); returns the record when the pipeline goes on, else None."""
        table = self.ws.store.update(identifier, lambda t: noted(t).evolve(
            consecutive_failures=t.consecutive_failures + 1))
        if table is None or table.refresh_status != ACTIVATED:
            return None
        failures = table.consecutive_failures
        if failures < int(self.ws.options.get(cfg.MAX_CONSECUTIVE_FAILURES)):
            return table
        self.suspend(identifier, f"{failures} consecutive {what}; the last: {message}", on_suspend, suspended)
        return None

    def suspend(self, identifier: str, reason: str, on_suspend: Callable[[], None],
                suspended: Change = _unchanged) -> None:
        log.warning("Suspended %s: %s", identifier, reason)
        on_suspend()
        self.ws.store.update(identifier, lambda t: suspended(t).evolve(refresh_status=SUSPENDED,
                                                                      suspend_reason=reason))

    def _gone_sources(self, identifier: str, error: BaseException) -> list[str]:
        """The table's sources that do not exist, when its refresh failed for want of one: trying again
        cannot help, so the table is suspended at once, not after a storm of retries. A source missing
        only for an instant (a CREATE OR REPLACE between its renames) is back when asked, and retried."""
        table = self.ws.store.get(identifier)
        if table is None or "TABLE_OR_VIEW_NOT_FOUND" not in error_text(error):
            return []
        return [source for source in table.source_tables
                if len(parts := source.split(".")) == 3 and lookup_table(self.ws.spark, *parts) is not TableLookup.EXISTS]

    def succeeded(self, identifier: str) -> None:
        """A run worked (a streaming job's batch): the count starts again."""
        table = self.ws.store.get(identifier)
        if table is not None and table.consecutive_failures:
            self.ws.store.update(identifier, clear_failures)

