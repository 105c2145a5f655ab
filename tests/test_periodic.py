"""Spec §4.4: the partition a scheduled refresh at T rewrites, and Java date patterns."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from pyspark.sql import functions as F

from mt_magic import ValidationError
from mt_magic.refresh.periodic import periodic_partition
from mt_magic.sql.date_format import format_datetime
from mt_magic.sql.freshness import IntervalFreshness

UTC = ZoneInfo("UTC")
DAY = {"day": "yyyy-MM-dd"}
DAY_HOUR = {"day": "yyyy-MM-dd", "hour": "HH"}
DAY_HOUR_MINUTE = {"day": "yyyy-MM-dd", "hour": "HH", "minute": "mm"}


def expand(rows):
    for time, freshness, formatters, expected in rows:
        for f, e in zip(freshness, expected) if isinstance(freshness, list) else [(freshness, expected)]:
            yield time, f, formatters, e


WORKED = [
    ("2024-01-01 00:00:00", "1 DAY", DAY, ("2023-12-31",)),
    ("2024-01-02 00:00:00", "1 DAY", DAY, ("2024-01-01",)),
    ("2024-01-02 00:00:00", "1 HOUR", DAY_HOUR, ("2024-01-01", "23")),
    ("2024-01-02 01:00:00", "1 HOUR", DAY_HOUR, ("2024-01-02", "00")),
    ("2024-01-01 00:00:00", "2 HOUR", DAY_HOUR, ("2023-12-31", "22")),
    ("2024-01-01 00:00:00", "4 HOUR", DAY_HOUR, ("2023-12-31", "20")),
    ("2024-01-01 00:00:00", "8 HOUR", DAY_HOUR, ("2023-12-31", "16")),
    ("2024-01-01 00:00:00", "12 HOUR", DAY_HOUR, ("2023-12-31", "12")),
    ("2024-01-01 12:00:00", "12 HOUR", DAY_HOUR, ("2024-01-01", "00")),
    ("2024-01-01 00:00:00", "1 MINUTE", DAY_HOUR_MINUTE, ("2023-12-31", "23", "59")),
    ("2024-01-01 00:00:00", ["2 MINUTE", "4 MINUTE", "5 MINUTE", "6 MINUTE", "10 MINUTE", "12 MINUTE",
                             "15 MINUTE", "30 MINUTE"], DAY_HOUR_MINUTE,
     [("2023-12-31", "23", m) for m in ("58", "56", "55", "54", "50", "48", "45", "30")]),
    ("2024-01-01 00:30:00", "30 MINUTE", DAY_HOUR_MINUTE, ("2024-01-01", "00", "00")),
    ("2024-01-01 00:00:00", "1 DAY", DAY_HOUR, ("2023-12-31", "00")),
    ("2024-01-01 00:00:00", "1 DAY", DAY_HOUR_MINUTE, ("2023-12-31", "00", "00")),
    ("2024-01-01 00:00:00", "1 HOUR", DAY_HOUR_MINUTE, ("2023-12-31", "23", "00")),
    ("2024-01-01 01:00:00", "1 HOUR", DAY_HOUR_MINUTE, ("2024-01-01", "00", "00")),
    ("2024-01-01 00:00:00", ["1 HOUR", "2 HOUR", "4 HOUR"], DAY, [("2023-12-31",)] * 3),
    ("2024-01-01 01:00:00", "1 HOUR", DAY, ("2024-01-01",)),
    ("2024-01-01 02:00:00", "2 HOUR", DAY, ("2024-01-01",)),
    ("2024-01-01 04:00:00", "4 HOUR", DAY, ("2024-01-01",)),
    ("2024-01-01 00:00:00", ["1 MINUTE", "2 MINUTE", "4 MINUTE", "15 MINUTE"], DAY_HOUR,
     [("2023-12-31", "23")] * 4),
    ("2024-01-01 00:00:00", "1 MINUTE", DAY, ("2023-12-31",)),
    ("2024-01-01 00:01:00", "1 MINUTE", DAY, ("2024-01-01",)),
    ("2024-03-01 00:00:00", "1 DAY", {"day": "yyyyMMdd"}, ("20240229",)),
]


@pytest.mark.parametrize("schedule_time, freshness, formatters, expected", list(expand(WORKED)))
def test_worked_examples(schedule_time, freshness, formatters, expected):
    spec = periodic_partition(schedule_time, IntervalFreshness.parse(freshness), formatters, UTC, "t")
    assert tuple(spec.values()) == expected and list(spec) == list(formatters)


def test_no_formatter_means_the_whole_table():
    assert periodic_partition("2024-01-01 00:00:00", IntervalFreshness(1, "DAY"), {}, UTC, "t") == {}


@pytest.mark.parametrize("bad", ["2024-01-01", "20240103 00:00:00.000", "tomorrow"])
def test_unparsable_schedule_time(bad):
    with pytest.raises(ValidationError, match="Failed to parse a valid partition value for the field 'day' "
                                              "in materialized table t using the scheduler time"):
        periodic_partition(bad, IntervalFreshness(1, "DAY"), DAY, UTC, "t")


def test_missing_schedule_time():
    with pytest.raises(ValidationError, match="scheduler time must not be null"):
        periodic_partition(None, IntervalFreshness(1, "DAY"), DAY, UTC, "t")


def test_subtraction_is_in_absolute_time_across_dst():
    zone = ZoneInfo("America/New_York")   # 2024-03-10 02:00 jumps to 03:00
    spec = periodic_partition("2024-03-10 04:00:00", IntervalFreshness(2, "HOUR"), DAY_HOUR, zone, "t")
    assert spec == {"day": "2024-03-10", "hour": "01"}


def test_unsupported_pattern_letters_are_refused():
    with pytest.raises(ValidationError, match="uses 'EEE'"):
        format_datetime(datetime(2024, 1, 1), "EEE")
    with pytest.raises(ValidationError, match="unclosed quote"):
        format_datetime(datetime(2024, 1, 1), "yyyy'T")


PATTERNS = ["yyyy-MM-dd", "yyyyMMdd", "HH", "mm", "yyyy-MM-dd HH", "yyyy-MM-dd'T'HH:mm:ss", "yy/M/d H:m:s",
            "'day='yyyy''MM", "yyyy-MM-dd HH:mm"]


def test_patterns_match_sparks_date_format(spark):
    """Formatting in Python must agree with Spark's own date_format for the supported letters."""
    start = datetime(2023, 12, 30, 21, 5, 7, tzinfo=timezone.utc)
    moments = [start + timedelta(minutes=37 * i, seconds=13 * i) for i in range(200)]
    frame = spark.createDataFrame([(m.replace(tzinfo=None),) for m in moments], "ts timestamp_ntz")
    expected = frame.select(*[F.date_format("ts", p).alias(str(i)) for i, p in enumerate(PATTERNS)]).collect()
    for moment, row in zip(moments, expected):
        assert [format_datetime(moment, p) for p in PATTERNS] == list(row)
