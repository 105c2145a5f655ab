"""What Spark's streaming asks of us: which output modes it allows for a query (asked before any job
starts), how a job with a foreachBatch function starts, and how that function ends when it fails."""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from typing import Any

from mt_magic.spark.errors import SPARK_ERRORS, error_sentence
from mt_magic.spark.kind import is_connect

# Spark's StreamExecution.PROXY_ERROR: how a stream being stopped tells that its foreachBatch
# function ended because the stop interrupted it. Spark matches `<prefix>((.|\r\n|\r|\n)*)(<name>)`
# against the function's whole Python traceback, one stack frame per character: a traceback that
# carries a Java stack (a Py4JJavaError's) overflows the stream thread's stack (StackOverflowError,
# ~1000 frames of java.util.regex.Pattern on the user's console) instead of stopping cleanly.
_PROXY_ERROR_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling"
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


# A Spark Connect server runs a client's foreachBatch function in a Python process of its own, which
# must connect back within a time Spark fixes at 10 s (PythonWorkerFactory.createSimpleWorker); on a
# loaded machine its imports alone can take longer. Nothing has started when that happens.
_WORKER_TIMED_OUT = re.compile(r"Python worker failed to connect back", re.IGNORECASE)
_START_ATTEMPTS = 3


def start_stream(writer: Any) -> Any:
    """`writer.start()`, tried again (three times in all) when the server's Python worker for the
    foreachBatch function timed out connecting back; any other failure is raised at once."""
    for _ in range(_START_ATTEMPTS - 1):
        try:
            return writer.start()
        except SPARK_ERRORS as error:
            if not _WORKER_TIMED_OUT.search(str(error)):
                raise
    return writer.start()


class BatchFailure(RuntimeError):
    """What a foreachBatch function raises for any failure: a line, not a traceback with Java text."""


def batch_failure(error: BaseException | None, stopping: bool = False) -> BatchFailure:
    """The short failure a foreachBatch function raises for `error`: Spark's sentence, or — when the
    stream is being stopped (`stopping`, or Java's interruption named in the error; None: the
    function ended at once for a stop) — the text Spark's stop recognises as an interruption."""
    text = "" if error is None else str(error)
    interruption = next((name for name in _INTERRUPTIONS if name in text), None)
    if error is None or stopping or interruption:
        return BatchFailure(f"{_PROXY_ERROR_PREFIX} the batch: {interruption or _INTERRUPTIONS[0]}")
    return BatchFailure(error_sentence(error))


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
