"""The rows of a SQL command (SHOW, DESCRIBE, …) in one round trip over either kind of session.

Over Spark Connect, `spark.sql` runs a command at once and the answer already carries its rows as
Arrow data; `collect()` would send them back to the server and run them again (a second round trip,
about 30 ms on a local server). Reading them from the answer keeps catalog lookups cheap.
"""

from __future__ import annotations

from typing import Any

from mt_magic.spark.session import is_connect


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
