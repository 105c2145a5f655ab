"""Builds the class-data archive the tests' JVMs start from (`make test` runs it once, before the suite):
`python tests/spark_classes.py build/spark-classes.jsa`.

A JVM that starts Spark loads and verifies some 17,000 classes from its jars: 13–14 s of CPU on this
2-core machine for each session, service and kernel the tests start — most of the process tests'
CPU, taken from the two passes running beside them. From an archive of those classes (Java's
application class-data sharing, made once from the classes a small workload loads) a start takes
6–7 s. The archive is bound to the Java build and the class path it was made with: a JVM for which it
does not fit — another Java, another environment — runs without it, silently (tests/conftest.py
names it only where it exists)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

WORKLOAD = """
import tempfile
from pyspark import SparkContext
from mt_magic import Gateway
from mt_magic.session import local_session
spark = local_session("mt_magic-classes", warehouse=tempfile.mkdtemp(dir="."))
spark.sql("CREATE TABLE sales (k INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
spark.sql("INSERT INTO sales VALUES (1, 2.0, 'a'), (2, 3.0, 'b')")
gateway = Gateway(spark, catalog_store=tempfile.mkdtemp(dir=".") + "/catalog.json")
gateway.execute("CREATE MATERIALIZED TABLE per_k FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL "
                "AS SELECT k, COUNT(*) AS n, SUM(amount) AS total FROM sales GROUP BY k")
spark.sql("INSERT INTO sales VALUES (1, 4.0, 'a')")
gateway.refresh("per_k")
gateway.close()
print(spark.sparkContext._jvm.System.getProperty("java.class.path"))
spark.stop()
gateway_process = SparkContext._gateway.proc       # its class list is written when it exits
gateway_process.stdin.close()
gateway_process.wait(timeout=120)
"""


def build(archive: str) -> None:
    folder = tempfile.mkdtemp(prefix="mt_magic-classes-")
    classes = os.path.join(folder, "classes.lst")
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} "
                                             f"-XX:DumpLoadedClassList={classes}".strip())
    try:
        run = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True,
                             timeout=600, cwd=folder)
        if run.returncode != 0:
            sys.exit(f"The workload that lists Spark's classes failed:\n{run.stderr[-3000:]}")
        class_path = run.stdout.strip().splitlines()[-1]
        os.makedirs(os.path.dirname(os.path.abspath(archive)), exist_ok=True)
        dump = subprocess.run(["java", "-Xshare:dump", f"-XX:SharedClassListFile={classes}",
                               f"-XX:SharedArchiveFile={archive}", "-cp", class_path],
                              capture_output=True, text=True, timeout=600)
        if dump.returncode != 0 or not os.path.exists(archive):
            sys.exit(f"Java could not make the class-data archive:\n{dump.stdout[-3000:]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    build(sys.argv[1])
