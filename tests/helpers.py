"""Small helpers shared by the tests."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from jupyter_client.manager import start_new_kernel

# What no user ever reads: py4j, gRPC and JVM text.
BRIDGE_TEXT = re.compile(r"py4j|grpc|JVM|An error occurred while calling|\bo\d+\.\w+|Traceback|\tat |"
                         r"java\.|org\.apache\.|_MultiThreadedRendezvous|debug_error_string|StatusCode", re.I)


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


def run(client, code: str) -> tuple[str, str, dict | None]:
    """The streams' text, the text/plain result and the error (ename, evalue) of one cell."""
    out, result, error = [], "", None

    def collect(message: dict) -> None:
        nonlocal result, error
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "execute_result":
            result = content["data"].get("text/plain", "")
        elif kind == "error":
            error = {"ename": content["ename"], "evalue": content["evalue"]}

    client.execute_interactive(code, timeout=180, output_hook=collect)
    return "".join(out), result, error


@contextmanager
def kernels(folder: Path) -> Iterator[Callable[..., object]]:
    """`start(**env)`: a real kernel with the installed autoload, its IPython folder and catalog store
    in `folder`; every one started is shut down at the end."""
    started = []

    def start(**env: str):
        inherited = {k: v for k, v in os.environ.items() if k != "MT_MAGIC_NO_AUTOLOAD"}
        environment = {**inherited, "IPYTHONDIR": str(folder / "ipython"), "SPARK_LOCAL_IP": "127.0.0.1",
                       "MT_MAGIC_CATALOG_STORE": str(folder / "store" / "catalog.json"),
                       "PYSPARK_PYTHON": sys.executable, **env}
        manager, client = start_new_kernel(kernel_name="python3", env=environment, cwd=str(folder))
        started.append((manager, client))
        return client

    try:
        yield start
    finally:
        for manager, client in started:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


@contextmanager
def cancelled_throughout(spark, group: str) -> Iterator[set[str]]:
    """Runs the block while another thread cancels `group` without pause, as a user's cancel landing
    on that very step; yields the job groups (Connect: tags) the block's thread has at its start."""
    from mt_magic.spark.jobs import cancel_jobs
    from mt_magic.spark.kind import is_connect
    active = set(spark.getTags()) if is_connect(spark) else (
        {spark.sparkContext.getLocalProperty("spark.jobGroup.id")} - {None})
    stop = threading.Event()
    canceller = threading.Thread(target=lambda: [cancel_jobs(spark, group) for _ in iter(stop.is_set, True)])
    canceller.start()
    try:
        yield active
    finally:
        stop.set()
        canceller.join(30)
