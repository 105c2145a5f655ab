"""Which output modes Spark's streaming allows for a query, asked before any job starts."""

from __future__ import annotations

import shutil
import tempfile
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
