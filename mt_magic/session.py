"""A local SparkSession for the demo, tests and benchmarks: quiet, small and fair (see mt_magic.spark)."""

from mt_magic.spark.sessions import local_session

__all__ = ["local_session"]
