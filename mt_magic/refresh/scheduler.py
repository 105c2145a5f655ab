"""The embedded workflow scheduler: one APScheduler cron job per FULL materialized table, one interval
job per CONTINUOUS table's change detector.

The catalog store, not APScheduler's job store, is what persists: a new gateway rebuilds the jobs
from the records. Cron fires at wall-clock multiples, as Flink's Quartz triggers do, and a fire calls
the same public refresh a user calls (as Flink's scheduler calls the gateway's REST API), with its
schedule time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from mt_magic.errors import MaterializedTableError
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT
from mt_magic.sql.freshness import IntervalFreshness

log = logging.getLogger(__name__)

WORKFLOW_GROUP = "default_group"


def workflow_name(quoted_identifier: str) -> str:
    return f"quartz_job_{quoted_identifier}"


def next_fire(freshness: IntervalFreshness, zone: tzinfo, after: datetime) -> datetime | None:
    """When a FULL table's cron fires next after `after` (for whoever does not run the scheduler)."""
    return CronTrigger(timezone=zone, **freshness.cron_fields()).get_next_fire_time(None, after)


WAIT_POLL_S = 0.2      # how often a fire that waits for its upstream tables asks again


class RefreshScheduler:
    """Cron jobs keyed by table identifier; a fire calls `refresh(identifier, schedule_time)` in a pool
    thread once `ready(identifier, schedule_time)` says it may (until then it is re-queued, holding no
    thread)."""

    def __init__(self, refresh: Callable[[str, str], object], coalesced: Callable[[str, str, str], None],
                 ready: Callable[[str, str], bool] = lambda identifier, schedule_time: True, workers: int = 4) -> None:
        self._refresh = refresh
        self._coalesced = coalesced
        self._ready = ready
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(workers, {"thread_name_prefix": "mt_magic-refresh"})},
            job_defaults={"coalesce": True, "max_instances": 2, "misfire_grace_time": None})
        self._scheduler.start()
        self._guard = threading.Lock()
        self._open = threading.Lock()          # held while a job is added or removed, and to close
        self._closing = False
        self._busy: set[str] = set()
        self._queued: dict[str, str] = {}      # table → the schedule time of its fire that waits
        self._waiting: set[str] = set()        # tables whose fire is re-queued until it is ready

    def schedule(self, identifier: str, freshness: IntervalFreshness, zone: tzinfo, paused: bool = False) -> None:
        """Create or replace the job; a paused one keeps its trigger for RESUME."""
        trigger = CronTrigger(timezone=zone, **freshness.cron_fields())
        first = None if paused else trigger.get_next_fire_time(None, datetime.now(zone))
        self._while_open(lambda: self._scheduler.add_job(
            self._fire, trigger, args=[identifier, freshness, zone], id=identifier, name=identifier,
            replace_existing=True, next_run_time=first))

    def _fire(self, identifier: str, freshness: IntervalFreshness, zone: tzinfo) -> None:
        """APScheduler does not tell a job its fire time: it is the cron time at or before now. A fire
        that finds the table's previous refresh still running is queued, once (a later fire replaces
        it, and the replaced one is reported to `coalesced`), and runs when that refresh ends."""
        schedule_time = freshness.floor(datetime.now(zone)).strftime(SCHEDULE_TIME_FORMAT)
        with self._guard:
            busy = identifier in self._busy
            replaced = self._queued.get(identifier) if busy else None
            if busy:
                self._queued[identifier] = schedule_time
            else:
                self._busy.add(identifier)
        if busy:
            if replaced is not None and replaced != schedule_time:
                self._coalesced(identifier, replaced, schedule_time)
            return
        self._drain(identifier, schedule_time)

    def _drain(self, identifier: str, schedule_time: str | None) -> None:
        """Run the fire, then the one queued behind it; a fire that is not ready yet comes back later."""
        while schedule_time is not None:
            if not self._asks_ready(identifier, schedule_time):
                with self._guard:
                    self._waiting.add(identifier)
                self.run_once(f"waiting:{identifier}", WAIT_POLL_S,
                              lambda at=schedule_time: self._drain(identifier, at))
                return
            with self._guard:
                self._waiting.discard(identifier)
            self._run(identifier, schedule_time)
            with self._guard:
                schedule_time = self._queued.pop(identifier, None)
                if schedule_time is None:
                    self._busy.discard(identifier)

    def _asks_ready(self, identifier: str, schedule_time: str) -> bool:
        try:
            return self._ready(identifier, schedule_time)
        except Exception:   # noqa: BLE001 - the refresh itself reports what is wrong
            return True

    def _run(self, identifier: str, schedule_time: str) -> None:
        try:
            self._refresh(identifier, schedule_time)
        except MaterializedTableError as error:     # recorded on the table; the pool thread goes on
            log.warning("Scheduled refresh of %s at %s: %s", identifier, schedule_time, error)
        except Exception:   # noqa: BLE001 - a dead scheduler thread helps nobody
            log.exception("Scheduled refresh of %s at %s failed", identifier, schedule_time)

    def every(self, job_id: str, seconds: float, action: Callable[[], None], paused: bool = False) -> None:
        """A job at a fixed interval (a CONTINUOUS table's change detector); a late run is not made up."""
        first = None if paused else datetime.now(timezone.utc) + timedelta(seconds=seconds)
        self._while_open(lambda: self._scheduler.add_job(
            action, IntervalTrigger(seconds=seconds), id=job_id, name=job_id, replace_existing=True,
            max_instances=1, next_run_time=first))

    def run_once(self, job_id: str, delay_s: float, action: Callable[[], None]) -> None:
        """A one-off job (a restart after a failure, with backoff)."""
        self._while_open(lambda: self._scheduler.add_job(
            action, DateTrigger(run_date=datetime.now(timezone.utc) + timedelta(seconds=delay_s)),
            id=job_id, name=job_id, replace_existing=True))

    def pause(self, identifier: str) -> None:
        """No more fires, nor the one queued behind a running refresh (a table suspended by its
        refresh's failure is not refreshed once more)."""
        with self._guard:
            self._queued.pop(identifier, None)
        self._while_open(lambda: self._scheduler.pause_job(identifier))

    def resume(self, identifier: str) -> None:
        self._while_open(lambda: self._scheduler.resume_job(identifier))

    def remove(self, identifier: str) -> None:
        try:
            self._while_open(lambda: self._scheduler.remove_job(identifier))
        except JobLookupError:
            pass      # deleting a workflow that is already gone is fine, as in Flink

    def _while_open(self, change: Callable[[], object]) -> None:
        """Add, change or remove a job unless the scheduler is closing. Jobs do this too (a stream's
        watcher restarts it, a waiting fire re-queues itself), and APScheduler's shutdown holds the
        lock such a call needs while it waits for those very jobs: closing here first, under a lock
        every change holds, lets a change in flight finish and turns later ones into nothing."""
        with self._open:
            if not self._closing:
                change()

    def has(self, identifier: str) -> bool:
        return self._job(identifier) is not None

    def next_fire_time(self, identifier: str) -> datetime | None:
        job = self._job(identifier)
        return job.next_run_time if job else None

    def _job(self, identifier: str):
        """A job, read as changes are (see `_while_open`): a waiting fire asks whether the tables it
        reads are scheduled, and a read that reached APScheduler while it shuts down would wait for the
        very job that asks. Once closing, there are no jobs."""
        with self._open:
            return None if self._closing else self._scheduler.get_job(identifier)

    def clear(self) -> None:
        """Every job gone (this process no longer owns the pipelines); the scheduler runs on."""
        self._while_open(self._scheduler.remove_all_jobs)
        with self._guard:       # fires that waited to be re-queued are gone with their jobs
            for name in self._waiting:
                self._busy.discard(name)
                self._queued.pop(name, None)
            self._waiting.clear()

    def shutdown(self) -> None:
        with self._open:
            self._closing = True
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
