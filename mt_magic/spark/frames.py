"""DataFrames built without a round trip: over Spark Connect every question a DataFrame asks the
server (its schema, whether it streams) is one, and a refresh should cost what its job costs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import Observation
from pyspark.sql import functions as F

from mt_magic.spark.session import is_connect


def query_frame(spark: Any, query: str) -> Any:
    """A DataFrame of a query. `spark.sql` over Connect first sends the text to be run as a command
    (one round trip more than the query needs); a query's plan can be built here instead."""
    if not is_connect(spark):
        return spark.sql(query)
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL
    return DataFrame(SQL(query), spark)


def counting_rows(frame: Any) -> tuple[Any, Callable[[], int]]:
    """The frame, counting the rows that pass through it for free (an observation), and how to read
    the count once an action ran. Connect's `observe` asks the server whether the frame streams
    first: a batch frame is observed without that question."""
    observation = Observation(f"rows_{time.monotonic_ns()}")
    count = F.count(F.lit(1)).alias("rows")
    if not is_connect(frame.sparkSession):
        observed = frame.observe(observation, count)
    else:
        from pyspark.sql.connect import plan
        from pyspark.sql.connect.dataframe import DataFrame
        observation._result = {}          # what Connect's `observe` sets before the action fills it
        observed = DataFrame(plan.CollectMetrics(frame._plan, observation, [count]), frame.sparkSession)
    return observed, lambda: int(observation.get.get("rows", 0))
