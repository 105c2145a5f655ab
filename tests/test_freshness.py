"""Spec §3.3 (freshness values), §3.4 (refresh-mode derivation) and §3.6 (the FULL cron grid)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from mt_magic import ValidationError
from mt_magic.config import parse_duration
from mt_magic.sql.freshness import FreshnessLiteral, IntervalFreshness, derive_refresh_mode


def freshness(value: str, unit: str, to_unit: str | None = None) -> IntervalFreshness:
    return IntervalFreshness.from_literal(FreshnessLiteral(value, unit, to_unit))


@pytest.mark.parametrize("value, unit, expected", [
    ("30", "SECOND", "30 SECOND"), ("5", "MINUTES", "5 MINUTE"), ("1", "HOUR", "1 HOUR"),
    ("1", "DAYS", "1 DAY"), ("30", "DAY", "30 DAY"),
])
def test_valid_freshness(value, unit, expected):
    assert str(freshness(value, unit)) == expected


@pytest.mark.parametrize("value, unit, to_unit, fragment", [
    ("-30", "SECOND", None, "only supports positive integer type values. But was: -30"),
    ("0", "SECOND", None, "But was: 0"),
    ("1.5", "SECOND", None, "But was: 1.5"),
    ("1", "MONTH", None, "only support SECOND, MINUTE, HOUR, DAY as the time unit"),
    ("1", "YEAR", None, "as the time unit"),
    ("30", "DAY", "HOUR", "as the time unit"),
])
def test_invalid_freshness(value, unit, to_unit, fragment):
    with pytest.raises(ValidationError) as info:
        freshness(value, unit, to_unit)
    assert fragment in str(info.value)


THRESHOLD, CONT, FULL_DEFAULT = timedelta(minutes=30), timedelta(minutes=3), timedelta(hours=1)


@pytest.mark.parametrize("declared, mode, logical, expected_freshness, physical", [
    (("30", "SECOND"), None, "AUTOMATIC", "30 SECOND", "CONTINUOUS"),
    (("29", "MINUTE"), None, "AUTOMATIC", "29 MINUTE", "CONTINUOUS"),
    (("30", "MINUTE"), None, "AUTOMATIC", "30 MINUTE", "FULL"),
    (("1", "HOUR"), None, "AUTOMATIC", "1 HOUR", "FULL"),
    (("1", "DAY"), None, "AUTOMATIC", "1 DAY", "FULL"),
    (("90", "SECOND"), None, "AUTOMATIC", "90 SECOND", "CONTINUOUS"),
    (("30", "DAY"), "CONTINUOUS", "CONTINUOUS", "30 DAY", "CONTINUOUS"),
    (("30", "SECOND"), "FULL", "FULL", "30 SECOND", "FULL"),
    (None, None, "AUTOMATIC", "3 MINUTE", "CONTINUOUS"),
    (None, "FULL", "FULL", "1 HOUR", "FULL"),
    (None, "CONTINUOUS", "CONTINUOUS", "3 MINUTE", "CONTINUOUS"),
])
def test_mode_derivation_rows_of_spec_3_4(declared, mode, logical, expected_freshness, physical):
    decision = derive_refresh_mode(freshness(*declared) if declared else None, mode or "AUTOMATIC",
                                   THRESHOLD, CONT, FULL_DEFAULT)
    assert (decision.logical_mode, str(decision.freshness), decision.refresh_mode) == (
        logical, expected_freshness, physical)


@pytest.mark.parametrize("declared, fragment", [
    (("40", "MINUTE"), "only freshness that are factors of 60 are currently supported when the time unit is MINUTE"),
    (("60", "MINUTE"), "freshness must be less than 60 when the time unit is MINUTE"),
])
def test_automatic_full_checks_the_cron_grid(declared, fragment):
    with pytest.raises(ValidationError) as info:
        derive_refresh_mode(freshness(*declared), "AUTOMATIC", THRESHOLD, CONT, FULL_DEFAULT)
    assert fragment in str(info.value)


def test_threshold_is_configurable():
    decision = derive_refresh_mode(freshness("1", "HOUR"), "AUTOMATIC", timedelta(hours=2), CONT, FULL_DEFAULT)
    assert decision.refresh_mode == "CONTINUOUS"


def test_default_durations_use_the_largest_exact_unit():
    assert str(IntervalFreshness.from_duration(timedelta(seconds=60))) == "1 MINUTE"
    assert str(IntervalFreshness.from_duration(timedelta(seconds=90))) == "90 SECOND"
    assert str(IntervalFreshness.from_duration(timedelta(hours=1))) == "1 HOUR"
    assert str(IntervalFreshness.from_duration(timedelta(days=1))) == "1 DAY"


ACCEPTED = [(n, "SECOND") for n in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)] + \
           [(n, "MINUTE") for n in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)] + \
           [(n, "HOUR") for n in (1, 2, 3, 4, 6, 8, 12)] + [(1, "DAY")]


@pytest.mark.parametrize("n, unit", ACCEPTED)
def test_cron_grid_accepts(n, unit):
    IntervalFreshness(n, unit).check_cron_grid()


@pytest.mark.parametrize("n, unit, fragment", [
    (90, "SECOND", "must be less than 60 when the time unit is SECOND"),
    (60, "SECOND", "must be less than 60 when the time unit is SECOND"),
    (32, "SECOND", "factors of 60 are currently supported when the time unit is SECOND"),
    (7, "MINUTE", "factors of 60 are currently supported when the time unit is MINUTE"),
    (24, "HOUR", "must be less than 24 when the time unit is HOUR"),
    (14, "HOUR", "factors of 24 are currently supported when the time unit is HOUR"),
    (5, "HOUR", "factors of 24"),
    (2, "DAY", "freshness must be 1 when the time unit is DAY"),
])
def test_cron_grid_rejects(n, unit, fragment):
    with pytest.raises(ValidationError) as info:
        IntervalFreshness(n, unit).check_cron_grid()
    assert "In full refresh mode" in str(info.value) and fragment in str(info.value)


@pytest.mark.parametrize("n, unit, cron", [
    (30, "SECOND", "0/30 * * * * ? *"), (5, "SECOND", "0/5 * * * * ? *"), (1, "MINUTE", "0 0/1 * * * ? *"),
    (30, "MINUTE", "0 0/30 * * * ? *"), (12, "HOUR", "0 0 0/12 * * ? *"), (4, "HOUR", "0 0 0/4 * * ? *"),
    (1, "HOUR", "0 0 0/1 * * ? *"), (1, "DAY", "0 0 0 * * ? *"),
])
def test_quartz_cron_expressions(n, unit, cron):
    assert IntervalFreshness(n, unit).quartz_cron() == cron


def test_floor_gives_the_fire_time_a_run_belongs_to():
    moment = datetime(2024, 1, 1, 13, 47, 38, 500)
    assert IntervalFreshness(15, "SECOND").floor(moment) == datetime(2024, 1, 1, 13, 47, 30)
    assert IntervalFreshness(20, "MINUTE").floor(moment) == datetime(2024, 1, 1, 13, 40)
    assert IntervalFreshness(6, "HOUR").floor(moment) == datetime(2024, 1, 1, 12)
    assert IntervalFreshness(1, "DAY").floor(moment) == datetime(2024, 1, 1)


@pytest.mark.parametrize("text, seconds", [("30 min", 1800), ("3 m", 180), ("1 h", 3600), ("90s", 90),
                                           ("1 d", 86400), ("500 ms", 0.5), ("1000", 1)])
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


def test_bad_duration_names_the_option():
    with pytest.raises(ValidationError, match="'materialized-table.x' = '3 fortnights'"):
        parse_duration("3 fortnights", "materialized-table.x")
