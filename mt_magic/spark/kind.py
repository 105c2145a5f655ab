"""Which kind of session a SparkSession is — classic (a JVM in this process) or Spark Connect. Only
spark/ asks: elsewhere code asks what a session can do."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


def is_connect(spark: Any) -> bool:
    """A Spark Connect session: no JVM in this process, everything goes over gRPC."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def is_session(candidate: Any) -> bool:
    """A SparkSession of either kind (Connect sessions do not subclass the classic one)."""
    return isinstance(candidate, SparkSession) or (
        is_connect(candidate) and type(candidate).__name__ == "SparkSession")
