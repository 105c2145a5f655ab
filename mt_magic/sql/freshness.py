"""Freshness: Flink's validation, refresh-mode derivation and the FULL-mode cron grid."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from datetime import datetime, timedelta

from mt_magic.errors import ValidationError

UNITS = ("SECOND", "MINUTE", "HOUR", "DAY")
_UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}
# FULL mode: the values allowed per unit, and the bound they must stay below (spec §3.6).
_CRON_BOUND = {"SECOND": 60, "MINUTE": 60, "HOUR": 24}

class RefreshMode(StrEnum):
    """Declared (logical) modes include AUTOMATIC; a table runs (physically) FULL or CONTINUOUS."""

    CONTINUOUS = "CONTINUOUS"
    FULL = "FULL"
    AUTOMATIC = "AUTOMATIC"


CONTINUOUS, FULL, AUTOMATIC = RefreshMode.CONTINUOUS, RefreshMode.FULL, RefreshMode.AUTOMATIC


@dataclass(frozen=True)
class FreshnessLiteral:
    """`INTERVAL '<value>' <unit> [TO <unit>]` as written; validated by IntervalFreshness."""

    value: str
    unit: str
    to_unit: str | None = None


MAX_FRESHNESS_S = 3650 * 86400          # ten years: longer is a typo, and overflows dates

@dataclass(frozen=True)
class IntervalFreshness:
    interval: int
    unit: str

    @classmethod
    def from_literal(cls, literal: FreshnessLiteral) -> IntervalFreshness:
        unit = literal.unit.upper().removesuffix("S")
        if literal.to_unit is not None or unit not in UNITS:
            raise ValidationError(
                "Materialized table freshness only support SECOND, MINUTE, HOUR, DAY as the time unit.")
        text = literal.value.strip()
        if not (text.isascii() and text.isdigit()) or int(text) <= 0:
            raise ValidationError(
                "The freshness interval currently only supports positive integer type values. "
                f"But was: {text}")
        if int(text) * _UNIT_SECONDS[unit] > MAX_FRESHNESS_S:
            raise ValidationError(f"The freshness interval {text} {unit} is longer than the longest "
                                  f"supported, {MAX_FRESHNESS_S // 86400} DAY.")
        return cls(int(text), unit)

    @classmethod
    def from_duration(cls, duration: timedelta) -> IntervalFreshness:
        """The largest unit that divides the duration exactly (90 s stays 90 SECOND)."""
        seconds = int(duration.total_seconds())
        if seconds <= 0 or seconds != duration.total_seconds():
            raise ValidationError(
                f"A default freshness must be a positive whole number of seconds, not {duration}.")
        for unit in reversed(UNITS):
            if seconds % _UNIT_SECONDS[unit] == 0:
                return cls(seconds // _UNIT_SECONDS[unit], unit)
        raise AssertionError("SECOND divides every whole number of seconds")

    @classmethod
    def parse(cls, text: str) -> IntervalFreshness:
        """Read back the stored form, e.g. '1 HOUR'."""
        value, unit = text.split()
        return cls(int(value), unit)

    @property
    def duration(self) -> timedelta:
        return timedelta(seconds=self.interval * _UNIT_SECONDS[self.unit])

    def __str__(self) -> str:
        return f"{self.interval} {self.unit}"

    def sql(self) -> str:
        return f"INTERVAL '{self.interval}' {self.unit}"

    def check_cron_grid(self) -> None:
        """FULL mode runs on a wall-clock cron, so only divisors of the next unit are allowed."""
        if self.unit == "DAY":
            if self.interval != 1:
                raise ValidationError(
                    "In full refresh mode, freshness must be 1 when the time unit is DAY.")
            return
        bound = _CRON_BOUND[self.unit]
        if self.interval >= bound:
            raise ValidationError(
                f"In full refresh mode, freshness must be less than {bound} when the time unit "
                f"is {self.unit}.")
        if bound % self.interval:
            raise ValidationError(
                f"In full refresh mode, only freshness that are factors of {bound} are currently "
                f"supported when the time unit is {self.unit}.")

    def quartz_cron(self) -> str:
        """Flink's 7-field Quartz expression, kept in the refresh handler for parity."""
        self.check_cron_grid()
        n = self.interval
        return {
            "SECOND": f"0/{n} * * * * ? *",
            "MINUTE": f"0 0/{n} * * * ? *",
            "HOUR": f"0 0 0/{n} * * ? *",
            "DAY": "0 0 0 * * ? *",
        }[self.unit]

    def cron_fields(self) -> dict[str, str]:
        """The same schedule as APScheduler CronTrigger fields."""
        self.check_cron_grid()
        n = self.interval
        return {
            "SECOND": {"second": f"*/{n}"},
            "MINUTE": {"second": "0", "minute": f"*/{n}"},
            "HOUR": {"second": "0", "minute": "0", "hour": f"*/{n}"},
            "DAY": {"second": "0", "minute": "0", "hour": "0"},
        }[self.unit]

    def floor(self, moment: datetime) -> datetime:
        """The latest cron fire time at or before `moment` (a run is not told its fire time)."""
        moment = moment.replace(microsecond=0)
        n = self.interval
        if self.unit == "SECOND":
            return moment.replace(second=moment.second - moment.second % n)
        if self.unit == "MINUTE":
            return moment.replace(second=0, minute=moment.minute - moment.minute % n)
        if self.unit == "HOUR":
            return moment.replace(second=0, minute=0, hour=moment.hour - moment.hour % n)
        return moment.replace(second=0, minute=0, hour=0)


@dataclass(frozen=True)
class ModeDecision:
    logical_mode: RefreshMode
    freshness: IntervalFreshness
    refresh_mode: RefreshMode


def derive_refresh_mode(declared: IntervalFreshness | None, logical_mode: str,
                        threshold: timedelta, default_continuous: timedelta,
                        default_full: timedelta) -> ModeDecision:
    """Spec §3.4: defaults per mode, strictly-below-threshold gives CONTINUOUS, FULL checks cron."""
    logical_mode = RefreshMode(logical_mode)
    if declared is not None:
        freshness = declared
    elif logical_mode == FULL:
        freshness = IntervalFreshness.from_duration(default_full)
    else:
        freshness = IntervalFreshness.from_duration(default_continuous)
    if logical_mode == AUTOMATIC:
        physical = CONTINUOUS if freshness.duration < threshold else FULL
    else:
        physical = logical_mode
    if physical == FULL:
        freshness.check_cron_grid()
    return ModeDecision(logical_mode, freshness, physical)
