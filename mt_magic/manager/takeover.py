"""A new owner of the store takes over: unfinished CREATEs and DROPs finished and schedules set at
once; tables back into Spark, streams restarted and the fires nobody ran while the store had no owner
caught up in the background (manager/takeover_tables.py)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from mt_magic import config as cfg
from mt_magic.catalog.history import Trigger
from mt_magic.catalog.model import ACTIVATED, INITIALIZING, SUSPENDED, MaterializedTable
from mt_magic.errors import MaterializedTableError
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.takeover_tables import TakeoverTables
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT
from mt_magic.refresh.scheduler import next_fire
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.sql.freshness import FULL, IntervalFreshness

log = logging.getLogger(__name__)
MAX_CATCH_UPS = 1000         # missed fires run after one downtime, at most


class Takeover:
    def __init__(self, pipelines: Pipelines) -> None:
        self.pipelines = pipelines
        self.ws = pipelines.ws

    def restore(self, background: TakeoverTables) -> list[str]:
        """Unfinished CREATEs rolled back and DROPs finished, the schedules of FULL tables and change
        detectors set (SUSPENDED ones paused); the rest — tables back into Spark, streams restarted,
        sweeps, missed fires — goes on in the background (`background`). The warnings so far."""
        pipelines, warnings, tables = self.pipelines, [], []
        try:
            pipelines.finish_drops()
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            warnings.append(f"Finishing an interrupted DROP: {spark_message(error)}")
        for table in self.ws.store.list():
            if table.refresh_status != INITIALIZING:
                tables.append(table)
                continue
            warnings.append(f"{table.identifier}: rolled back an unfinished CREATE.")
            try:
                pipelines.discard(table)
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                warnings.append(f"{table.identifier}: {spark_message(error)}")
        background.start(tables)       # first: Spark's catalog is the long part
        zone = self.ws.zone()
        for table in tables:
            if not table.streams:
                try:
                    pipelines.start(table, fresh=False, paused=table.refresh_status == SUSPENDED, zone=zone)
                except (MaterializedTableError, *SPARK_ERRORS) as error:
                    warnings.append(f"{table.identifier}: {spark_message(error)}")
        return warnings

    def catch_up(self) -> None:
        """After downtime (a new owner, a takeover), the fires of ACTIVATED FULL tables that nobody ran,
        by `materialized-table.missed-runs`: `latest` (one run, for the most recent), `all` (one per
        fire, oldest first) or `skip`. Each runs with its own schedule time, so a date-formatted
        table refills the partition of that fire."""
        policy = self.ws.options.get(cfg.MISSED_RUNS)
        if policy == "skip":
            return
        now = datetime.now(self.ws.zone())
        for table in self.ws.store.list():
            if table.refresh_mode != FULL or table.refresh_status != ACTIVATED:
                continue
            missed = self.missed_fires(table, now)
            if policy == "latest":
                missed = missed[-1:]
            if missed:
                self.pipelines.once(f"catch-up:{table.identifier}",
                                    lambda t=table.identifier, m=tuple(missed): self._catch_up(t, m))

    def missed_fires(self, table: MaterializedTable, now: datetime) -> list[str]:
        """The table's fire times after the last one that ran (or its creation), up to `now` (in the
        session time zone)."""
        zone = now.tzinfo
        ran = [datetime.strptime(e["schedule_time"], SCHEDULE_TIME_FORMAT).replace(tzinfo=zone)
               for e in self.pipelines.history(table.identifier, 500)
               if e.get("schedule_time") and e["trigger"] in (Trigger.SCHEDULED, Trigger.CATCH_UP)]
        # Runs of an earlier table of the same name (dropped, created again) are in the history too.
        after = max([datetime.fromisoformat(table.created_at).astimezone(zone), *ran])
        freshness = IntervalFreshness.parse(table.freshness)
        fires: list[str] = []
        moment = next_fire(freshness, zone, after + timedelta(seconds=1))
        while moment is not None and moment <= now and len(fires) < MAX_CATCH_UPS:
            fires.append(moment.strftime(SCHEDULE_TIME_FORMAT))
            moment = next_fire(freshness, zone, moment + timedelta(seconds=1))
        return fires

    def _catch_up(self, identifier: str, schedule_times: tuple[str, ...]) -> None:
        for schedule_time in schedule_times:
            try:
                table = self.ws.store.get(identifier)
                if table is None or table.refresh_status != ACTIVATED:
                    return
                self.pipelines.refresh(table, {}, schedule_time, Trigger.CATCH_UP)
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                log.warning("Catch-up refresh of %s for %s: %s", identifier, schedule_time, spark_message(error))
