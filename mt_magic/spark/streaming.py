"""Which output modes Spark's streaming allows for a query, asked before any job starts."""

from __future__ import annotations

import shutil
import tempfile
import threading
from typing import Any

from mt_magic.spark.errors import SPARK_ERRORS, error_sentence
from mt_magic.spark.session import is_connect


def unsupported_reason(spark: Any, frame: Any, mode: str) -> str | None:
    """Spark's reason why `frame` cannot stream in output `mode`, or None when it can.

    A classic session asks Spark's UnsupportedOperationChecker directly. A Spark Connect session
    has no such call: the check runs when a query starts, so a query to the no-op sink is started
    and stopped at once.
    """
    if not is_connect(spark):
        jvm = spark._jvm
        checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
        modes = jvm.org.apache.spark.sql.streaming.OutputMode
        jmode = modes.Append() if mode == "append" else modes.Complete()
        try:
            checker.checkForStreaming(frame._jdf.queryExecution().analyzed(), jmode)
        except Exception as error:   # noqa: BLE001 - py4j wraps Spark's AnalysisException
            return error_sentence(error)
        return None
    checkpoint = tempfile.mkdtemp(prefix="mt_magic-check-")
    try:
        query = (frame.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="1 day").start())
        query.stop()
    except SPARK_ERRORS as error:
        return error_sentence(error)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return None


def add_listener(spark: Any, listener: Any) -> None:
    """Register a StreamingQueryListener. Over Spark Connect PySpark starts a thread that reads the
    server's events for as long as the listener lives, and a thread inherits its creator's daemon
    flag: registering from a daemon thread lets a script or kernel exit without removing it
    (removing can deadlock with that thread in PySpark 4.3)."""
    if not is_connect(spark):
        spark.streams.addListener(listener)
        return
    failure: list[BaseException] = []

    def register() -> None:
        try:
            spark.streams.addListener(listener)
        except BaseException as error:   # noqa: BLE001 - raised again in the caller's thread
            failure.append(error)

    thread = threading.Thread(target=register, name="mt_magic-listener", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
