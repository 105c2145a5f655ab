"""Option keys the gateway understands, their defaults, and duration parsing."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta

from mt_magic.errors import ValidationError

FRESHNESS_THRESHOLD = "materialized-table.refresh-mode.freshness-threshold"
DEFAULT_FRESHNESS_CONTINUOUS = "materialized-table.default-freshness.continuous"
DEFAULT_FRESHNESS_FULL = "materialized-table.default-freshness.full"
FULL_INITIALIZE = "materialized-table.full.initialize"
DATA_DIR = "materialized-table.data-dir"
VERSION_RETENTION = "materialized-table.storage.version-retention"
SAVEPOINT_DIR = "execution.checkpointing.savepoint-dir"
CHECKPOINT_INTERVAL = "execution.checkpointing.interval"
CHECKPOINT_DIR = "execution.checkpointing.dir"
STATIC_SOURCES = "materialized-table.continuous.static-sources"
CONTINUOUS_SHUFFLE_PARTITIONS = "materialized-table.continuous.shuffle-partitions"
CLIENT_TIMEOUT = "materialized-table.client.timeout"
OPEN_WAIT = "materialized-table.open.wait"     # how long opening a store waits for its tables in Spark
HISTORY_RETENTION = "materialized-table.history.retention"
RESULT_ROWS = "materialized-table.result.max-rows"
REFRESH_RETRIES = "materialized-table.refresh.retries"
MAX_CONSECUTIVE_FAILURES = "materialized-table.refresh.max-consecutive-failures"
MISSED_RUNS = "materialized-table.missed-runs"
MISSED_RUNS_POLICIES = ("latest", "all", "skip")
# A table option: how refreshes bring the table up to date (auto: incremental where it is exact).
REFRESH_POLICY = "refresh.policy"
REFRESH_POLICIES = ("auto", "incremental", "full")
# A table option: a source up to this size, joined with the source partitions a table keeps its state
# by, keeps its previous content beside the state, to be diffed with its files when rewritten.
SMALL_SOURCE_SIZE = "refresh.small-source.max-size"
SMALL_SOURCE_DEFAULT = "64 mb"

DEFAULTS: dict[str, str] = {
    FRESHNESS_THRESHOLD: "30 min",
    DEFAULT_FRESHNESS_CONTINUOUS: "3 min",
    DEFAULT_FRESHNESS_FULL: "1 h",
    FULL_INITIALIZE: "on-create",
    VERSION_RETENTION: "10 min",
    CLIENT_TIMEOUT: "30 s",
    OPEN_WAIT: "500 ms",
    HISTORY_RETENTION: "10000",
    RESULT_ROWS: "1000",
    REFRESH_RETRIES: "2",
    MAX_CONSECUTIVE_FAILURES: "5",
    MISSED_RUNS: "latest",
}
# Options whose value is a count, and its bounds.
_COUNTS = {HISTORY_RETENTION: (1, 10_000_000), REFRESH_RETRIES: (0, 10), MAX_CONSECUTIVE_FAILURES: (1, 1000),
           RESULT_ROWS: (1, 10_000_000)}

CATALOG_STORE_ENV = "MT_MAGIC_CATALOG_STORE"
DEFAULT_CATALOG_STORE = os.path.join(".mt_magic", "catalog.json")
# The Spark conf in which a refresh service names its store: every Spark Connect session of the
# service's application inherits it, so a client's Gateway(spark) finds the service's store.
CATALOG_STORE_CONF = "spark.mt_magic.catalog-store"

_UNITS = {
    "ms": 0.001, "milli": 0.001, "millis": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_duration(text: str, key: str = "duration") -> timedelta:
    """Parse Flink's duration syntax ('30 min', '3 m', '1 h', '500 ms'; no unit means ms)."""
    match = _DURATION.match(str(text))
    unit = match.group(2).lower() if match else ""
    if not match or (unit and unit not in _UNITS):
        raise ValidationError(
            f"Option '{key}' = '{text}' is not a duration; use a number and a unit such as "
            "'30 s', '3 min', '1 h' or '1 d'.")
    try:
        return timedelta(seconds=int(match.group(1)) * _UNITS[unit or "ms"])
    except OverflowError:
        raise ValidationError(f"Option '{key}' = '{text}' is longer than any duration can be.") from None


_SIZE_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1024, "kb": 1024, "kibibytes": 1024, "m": 1024**2, "mb": 1024**2,
               "mebibytes": 1024**2, "g": 1024**3, "gb": 1024**3, "gibibytes": 1024**3}


def parse_size(text: str, key: str) -> int:
    """Flink's memory size syntax ('64 mb', '512 kb', '1 gb'; no unit means bytes)."""
    match = _DURATION.match(str(text))
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ValidationError(f"Option '{key}' = '{text}' is not a size; use a number and a unit such as "
                              "'512 kb', '64 mb' or '1 gb'.")
    return int(match.group(1)) * _SIZE_UNITS[unit]


def catalog_store_path(explicit: str | None, advertised: str | None = None) -> str:
    """Where the catalog store lives: the argument, else the environment, else the store the Spark
    application's service advertises, else ./.mt_magic."""
    return explicit or os.environ.get(CATALOG_STORE_ENV) or advertised or DEFAULT_CATALOG_STORE


class Options:
    """Gateway options: defaults < constructor config < session SET, undone by RESET."""

    def __init__(self, config: Mapping[str, str] | None = None) -> None:
        self._base = {**DEFAULTS, **{k: str(v) for k, v in (config or {}).items()}}
        self._session: dict[str, str] = {}
        self._local = threading.local()

    def get(self, key: str, default: str | None = None) -> str | None:
        overlay = getattr(self._local, "overlay", None)
        if overlay and key in overlay:
            return overlay[key]
        return self._session.get(key, self._base.get(key, default))

    def explicit(self) -> dict[str, str]:
        """What this gateway sets beyond the defaults: sent with a statement another process runs."""
        return {k: v for k, v in {**self._base, **self._session}.items() if DEFAULTS.get(k) != v}

    @contextmanager
    def overlay(self, values: Mapping[str, str]) -> Iterator[None]:
        """Another gateway's options, for the statements this thread runs meanwhile."""
        previous = getattr(self._local, "overlay", None)
        self._local.overlay = dict(values)
        try:
            yield
        finally:
            self._local.overlay = previous

    def duration(self, key: str) -> timedelta:
        value = self.get(key)
        if value is None:
            raise ValidationError(f"Option '{key}' is not set.")
        return parse_duration(value, key)

    @staticmethod
    def check(key: str, value: str) -> None:
        """A value SET may give the key: durations must parse, counts be whole numbers, policies known."""
        if key in (FRESHNESS_THRESHOLD, DEFAULT_FRESHNESS_CONTINUOUS, DEFAULT_FRESHNESS_FULL,
                   VERSION_RETENTION, CLIENT_TIMEOUT, OPEN_WAIT):
            parse_duration(value, key)
        if key in _COUNTS:
            low, high = _COUNTS[key]
            text = str(value).strip()
            if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
                raise ValidationError(f"Option '{key}' = '{value}' is not a count from {low} to {high}.")
        if key == MISSED_RUNS and value not in MISSED_RUNS_POLICIES:
            raise ValidationError(f"Option '{key}' = '{value}' is not a policy; use one of "
                                  f"{', '.join(MISSED_RUNS_POLICIES)}.")

    def set(self, key: str, value: str) -> None:
        self.check(key, value)
        self._session[key] = value

    def reset(self, key: str | None = None) -> None:
        if key is None:
            self._session.clear()
        else:
            self._session.pop(key, None)
