"""A local SparkSession for the demo, tests and benchmarks: quiet, small and fair."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession


def local_session(app_name: str = "mt_magic", warehouse: str | None = None) -> SparkSession:
    """FAIR scheduling so a notebook's own queries are not queued behind refreshes."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.scheduler.mode", "FAIR")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC"))
    if warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # Spark logs every failed query at ERROR with its plan; user errors are reported by us instead.
    jvm = spark._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "SQLQueryContextLogger", jvm.org.apache.logging.log4j.Level.OFF)
    return spark
