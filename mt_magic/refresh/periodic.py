"""The partition a scheduled refresh at time T rewrites: T − freshness, in each date format."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from mt_magic.errors import ValidationError
from mt_magic.sql.date_format import format_datetime
from mt_magic.sql.freshness import IntervalFreshness

SCHEDULE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
SCHEDULE_TIME_PATTERN = "yyyy-MM-dd HH:mm:ss"


def parse_schedule_time(schedule_time: str, zone: ZoneInfo, identifier: str, field: str) -> datetime:
    try:
        return datetime.strptime(schedule_time, SCHEDULE_TIME_FORMAT).replace(tzinfo=zone)
    except (TypeError, ValueError):
        raise ValidationError(
            f"Failed to parse a valid partition value for the field '{field}' in materialized table "
            f"{identifier} using the scheduler time '{schedule_time}' based on the date format "
            f"'{SCHEDULE_TIME_PATTERN}'.") from None


def periodic_partition(schedule_time: str | None, freshness: IntervalFreshness,
                       formatters: dict[str, str], zone: ZoneInfo, identifier: str) -> dict[str, str]:
    """Spec §4.4: the partition holding the start of the interval [T − freshness, T) that just ended.

    The subtraction is in absolute time, as Flink does it in milliseconds, so DST shifts show.
    """
    if schedule_time is None:
        raise ValidationError(f"The scheduler time must not be null during the periodic refresh of "
                              f"the materialized table {identifier}.")
    spec = {}
    for column, pattern in formatters.items():
        moment = parse_schedule_time(schedule_time, zone, identifier, column)
        start = datetime.fromtimestamp(moment.timestamp() - freshness.duration.total_seconds(), zone)
        spec[column] = format_datetime(start, pattern)
    return spec
