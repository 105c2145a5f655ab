"""Small helpers shared by the tests."""

from __future__ import annotations

import os
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


def published_partitions(spark, table: str) -> list[str]:
    """The partitions readers find ('ds=…'): the catalog's, or, where Spark discovers them (tables
    created over Spark Connect), the folders under the table's location."""
    from pyspark.errors import AnalysisException
    try:
        return sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect())
    except AnalysisException as error:
        if "partition metadata is not stored" not in str(error):
            raise
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()[1]
    return sorted(name for name in os.listdir(location.removeprefix("file:")) if "=" in name)
