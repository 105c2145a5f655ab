"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable


def table_rows(spark, table: str) -> set[tuple]:
    """The table's rows as a set of tuples, columns in the table's own order."""
    return {tuple(r) for r in spark.table(table).collect()}


def wait_for(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.2):
    """Poll until `condition()` is truthy; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    value = condition()
    while not value:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        time.sleep(interval)
        value = condition()
    return value
