"""Backfill: a FULL table's refreshes for every schedule time in [start, end), in order, as the
scheduler would have run them (each computes its partition from its schedule time)."""

from __future__ import annotations

from datetime import datetime, timedelta

from mt_magic.catalog.history import Trigger
from mt_magic.catalog.model import MaterializedTable
from mt_magic.errors import ExecutionError, MaterializedTableError, ValidationError
from mt_magic.manager.pipelines import Pipelines
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT
from mt_magic.refresh.scheduler import next_fire
from mt_magic.results import Result
from mt_magic.spark.errors import SPARK_ERRORS, error_text
from mt_magic.sql.freshness import CONTINUOUS, IntervalFreshness

MAX_RUNS = 10_000
_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d")


def schedule_times(pipelines: Pipelines, table: MaterializedTable, start: str, end: str) -> list[str]:
    """The table's fire times in [start, end), in the scheduler's zone."""
    if table.refresh_mode == CONTINUOUS:
        raise ValidationError(f"Materialized table {table.identifier} is CONTINUOUS: backfill replays a FULL "
                              "table's scheduled refreshes; a CONTINUOUS table is recomputed from its sources.")
    zone = pipelines.ws.zone()
    first, last = _moment(start, zone), _moment(end, zone)
    if last <= first:
        raise ValidationError(f"Backfill of {table.identifier}: the end '{end}' must come after the start '{start}'.")
    freshness = IntervalFreshness.parse(table.freshness)
    times: list[str] = []
    moment = next_fire(freshness, zone, first)
    while moment is not None and moment < last:
        if len(times) == MAX_RUNS:
            raise ValidationError(f"Backfill of {table.identifier}: more than {MAX_RUNS} schedule times between "
                                  f"'{start}' and '{end}'; backfill a shorter range.")
        times.append(moment.strftime(SCHEDULE_TIME_FORMAT))
        moment = next_fire(freshness, zone, moment + timedelta(seconds=1))
    return times


def backfill(pipelines: Pipelines, table: MaterializedTable, start: str, end: str) -> Result:
    """One refresh per schedule time, oldest first, each recorded with trigger `backfill`. Runs of one
    table hold its lock, so they run one at a time; the first failure stops the backfill and says where."""
    times = schedule_times(pipelines, table, start, end)
    rows = []
    for done, schedule_time in enumerate(times):
        try:
            result = pipelines.refresh(table, {}, schedule_time, Trigger.BACKFILL)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            detail = error_text(error)
            raise ExecutionError(f"Backfill of {table.identifier} stopped at schedule time {schedule_time} "
                                 f"({done} of {len(times)} done): {detail}") from None
        [(_, _, count, target)] = result.rows
        rows.append((schedule_time, target, count))
    return Result.table(["schedule time", "partition", "rows"], rows,
                        message=f"Backfilled {table.identifier}: {len(rows)} scheduled refreshes from "
                                f"{start} to {end}.")


def _moment(text: str, zone) -> datetime:
    for fmt in _FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=zone)
        except ValueError:
            continue
    raise ValidationError(f"'{text}' is not a time: use 'yyyy-MM-dd' or 'yyyy-MM-dd HH:mm:ss'.")
