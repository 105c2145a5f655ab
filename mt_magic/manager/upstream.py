"""Dependency order for scheduled fires: when the materialized tables a table reads fire at the same
schedule time (or refresh now), their refreshes finish before its own starts — bounded by its
freshness, at most UPSTREAM_WAIT_S. The scheduler asks `ready` and re-queues a fire that must wait,
so that a waiting table never holds one of its workers; a direct call waits in its own thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

from mt_magic.catalog.model import ACTIVATED, MaterializedTable, Outcome
from mt_magic.manager.refresh_runs import Runs, freshness_s
from mt_magic.manager.workspace import Workspace
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT
from mt_magic.refresh.scheduler import next_fire
from mt_magic.sql.freshness import FULL, IntervalFreshness

UPSTREAM_WAIT_S = 300.0      # how long a refresh waits for the tables it reads to finish theirs
POLL_S = 0.1


class UpstreamWait:
    def __init__(self, ws: Workspace, runs: Runs, scheduled: Callable[[str], bool]) -> None:
        self.ws = ws
        self.runs = runs
        self._scheduled = scheduled          # the table has a job in this process's scheduler
        self._deadlines: dict[tuple[str, str], float] = {}    # (table, schedule time) → monotonic end
        self._guard = threading.Lock()

    def ready(self, identifier: str, schedule_time: str) -> bool:
        """The fire of the table at `schedule_time` may run now: nothing it reads is still due for that
        fire, or it waited as long as it may (then a refresh of it does not wait again)."""
        table = self.ws.store.get(identifier)
        if table is None or table.refresh_mode != FULL or not self._upstream(table):
            return True         # nothing to wait for, and nothing kept for the refresh to take
        if self._pending(table, schedule_time) and time.monotonic() < self._deadline(table, schedule_time):
            return False
        with self._guard:
            self._deadlines[(table.identifier, schedule_time)] = float("-inf")
        return True

    def wait(self, table: MaterializedTable, schedule_time: str) -> None:
        """Block until the fire may run (a call that did not come through the scheduler)."""
        try:
            while time.monotonic() < self._deadline(table, schedule_time) and self._pending(table, schedule_time):
                time.sleep(POLL_S)
        finally:
            with self._guard:
                self._deadlines.pop((table.identifier, schedule_time), None)

    def _deadline(self, table: MaterializedTable, schedule_time: str) -> float:
        with self._guard:
            return self._deadlines.setdefault((table.identifier, schedule_time),
                                              time.monotonic() + min(freshness_s(table), UPSTREAM_WAIT_S))

    def _upstream(self, table: MaterializedTable) -> list[MaterializedTable]:
        return [u for u in map(self.ws.store.get, table.source_tables) if u is not None]

    def _pending(self, table: MaterializedTable, schedule_time: str) -> list[str]:
        """The tables this one reads that refresh now, or fire at `schedule_time` and have not run it (a
        fire merged into a later one has not)."""
        zone = self.ws.zone()
        moment = datetime.strptime(schedule_time, SCHEDULE_TIME_FORMAT).replace(tzinfo=zone)
        runs = self.runs
        return [u.identifier for u in self._upstream(table) if u.identifier in runs.running or (
            u.refresh_mode == FULL and u.refresh_status == ACTIVATED and self._scheduled(u.identifier)
            and next_fire(IntervalFreshness.parse(u.freshness), zone, moment) == moment     # a fire time of its own
            and not any(e.get("schedule_time") == schedule_time and e["outcome"] != Outcome.COALESCED
                        for e in runs.history.entries(u.identifier, 20)))]
