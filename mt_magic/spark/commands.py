"""Requests to Spark that cost one round trip each over Spark Connect, and requests side by side.

Over Spark Connect, `spark.sql` runs a command at once and the answer already carries its rows as
Arrow data; `collect()` would send them back to the server and run them again (a second round trip,
about 30 ms on a local server). Reading them from the answer keeps catalog lookups cheap. Requests
that do not depend on each other can travel together (`alongside`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from mt_magic.spark.kind import is_connect

_T = TypeVar("_T")


def alongside(spark: Any, request: Callable[..., _T], *args: Any) -> Future[_T]:
    """`request(*args)` in a thread of its own over Connect, where waiting for the server dominates
    (the client is thread-safe); on a classic session, at once (py4j calls cost microseconds). The
    thread ends with the request: nothing lingers after the statement."""
    result: Future[_T] = Future()
    if not is_connect(spark):
        settle(result, request, *args)
        return result
    threading.Thread(target=lambda: settle(result, request, *args), name="mt_magic-request", daemon=True).start()
    return result


def settle(result: Future[_T], request: Callable[..., _T], *args: Any) -> None:
    """`result` holds what `request(*args)` returned, or raised."""
    try:
        result.set_result(request(*args))
    except BaseException as error:   # noqa: BLE001 - handed to whoever asks for the result
        result.set_exception(error)


def command_rows(spark: Any, text: str) -> list[tuple]:
    frame = spark.sql(text)
    if is_connect(spark):
        relation = getattr(getattr(frame, "_plan", None), "_plan", None)
        if relation is not None and relation.WhichOneof("rel_type") == "local_relation":
            data = relation.local_relation.data
            if not data:
                return []     # an empty result comes back as its schema alone
            import pyarrow

            table = pyarrow.ipc.open_stream(data).read_all()
            return list(zip(*(column.to_pylist() for column in table.columns)))
    return [tuple(row) for row in frame.collect()]
