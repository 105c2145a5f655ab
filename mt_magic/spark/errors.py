"""One translation of Spark's errors (PySpark, py4j, gRPC) into MaterializedTableError."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import TypeVar

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from mt_magic.errors import MaterializedTableError, SparkError

R = TypeVar("R")


def _grpc_error() -> tuple[type[BaseException], ...]:
    try:
        import grpc
    except ImportError:     # classic-only installs have no gRPC
        return ()
    return (grpc.RpcError,)


# Everything Spark or its bridges raise for a statement a user wrote.
SPARK_ERRORS: tuple[type[BaseException], ...] = (PySparkException, Py4JError) + _grpc_error()

_BRIDGE_TEXT = re.compile(r"An error occurred while calling [\w.$]+\.\s*(:\s*)?")
# A JVM exception's class before its message: "java.x.FooException: …" (py4j), "(org.x.FooException) …" (Connect)
_JAVA_CLASS = re.compile(r"^(?:(?:[a-z]+\.)+[A-Za-z]+(?:Exception|Error): |\((?:[a-z]+\.)+[A-Za-z]+(?:Exception|Error)\) )")
_POSITION = re.compile(r";\s*line \d+ pos \d+$")


def spark_message(error: BaseException | str) -> str:
    """Spark's own first lines: no JVM trace, no logical plan, no py4j or gRPC wrapping (of an error,
    or of the text a stream's exception reports)."""
    if isinstance(error, PySparkException):
        text = error.getMessage() if hasattr(error, "getMessage") else str(error)
    else:
        text = str(error)
    text = text.split("\n\tat ", 1)[0].split("\nJVM stacktrace:", 1)[0]
    text = re.split(r";\n'|\n== SQL|\n\s*debug_error_string", text, maxsplit=1)[0]
    text = _BRIDGE_TEXT.sub("", text.strip())
    # Connect's analysis errors end with "; line 1 pos 14", classic ones do not: one text in both.
    lines = [_POSITION.sub("", _JAVA_CLASS.sub("", line)) for line in text.splitlines() if line.strip()]
    text = "\n".join(lines).strip()
    if isinstance(error, Py4JError) and not text:
        return "Spark's JVM did not answer."
    if _NO_PYTHON_WORKER.search(text):
        text += _python_worker_hint()
    return text or type(error).__name__


def error_text(error: BaseException) -> str:
    """What a user reads of an error: ours as written, Spark's first lines (`spark_message`)."""
    return str(error) if isinstance(error, MaterializedTableError) else spark_message(error)


# What Spark says when it cannot start a Python worker (a UDF's, a foreachBatch sink's).
_NO_PYTHON_WORKER = re.compile(r"Python worker (failed to connect back|exited unexpectedly)|"
                               r"Cannot run program \"python|No module named '?mt_magic", re.IGNORECASE)


def _python_worker_hint() -> str:
    worker = os.environ.get("PYSPARK_PYTHON") or "python3"
    return (f"\nSpark's Python workers run '{worker}', which must have mt_magic installed: set PYSPARK_PYTHON "
            f"(e.g. to {sys.executable}) where the Spark application starts, then restart it.")


_LINE_POS = re.compile(r"\(?line (\d+),? pos (\d+)\)?")


def query_position(error: BaseException, query: str) -> int | None:
    """Where in `query` Spark's error points (0-based): its query context, else the 'line L, pos P'
    its parser and analyser write into the message."""
    if isinstance(error, PySparkException):
        try:
            contexts = error.getQueryContext()
        except Exception:   # noqa: BLE001 - an error without contexts
            contexts = []
        for context in contexts:
            start = context.startIndex()
            if 0 <= start < len(query):
                return start
    found = _LINE_POS.search(str(error))
    if not found:
        return None
    line, pos = int(found.group(1)), int(found.group(2))
    lines = query.split("\n")
    if not 0 < line <= len(lines):
        return None
    return sum(len(text) + 1 for text in lines[:line - 1]) + min(pos, len(lines[line - 1]))


def error_class(error: BaseException) -> str | None:
    """Spark's error condition ('TABLE_OR_VIEW_NOT_FOUND', ...), when it has one."""
    if isinstance(error, PySparkException):
        return error.getCondition()
    return None


def spark_call(action: Callable[[], R], what: str) -> R:
    """Run a Spark call; its error becomes a SparkError that starts with `what`."""
    try:
        return action()
    except SPARK_ERRORS as error:
        raise SparkError(f"{what}: {spark_message(error)}") from None


# Classes that only wrap the error that matters (a Python worker's, a stream's).
_WRAPPERS = ("[PYTHON_EXCEPTION]", "[FOREACH_BATCH_USER_FUNCTION_ERROR]", "[STREAM_FAILED]",
             "[STREAMING_PYTHON_RUNNER_INITIALIZATION_FAILURE]")


def error_sentence(error: BaseException | str) -> str:
    """Spark's own sentence: from its error class to the end of that line; of nested errors (a
    traceback from a Python worker), the innermost."""
    text = spark_message(error)
    sentences = [m.group(0).strip() for m in re.finditer(r"\[[A-Z_.]+\][^\n]*", text)]
    inner = [s for s in sentences if not s.startswith(_WRAPPERS)]
    hint = _python_worker_hint() if _NO_PYTHON_WORKER.search(text) else ""
    if inner or sentences:
        return re.sub(r"\s*SQLSTATE: \w+\s*$", "", (inner or sentences)[-1]) + hint
    return (text.splitlines()[0] if text else "unknown error").strip() + hint
