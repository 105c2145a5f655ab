"""Whether the rows a refresh computed again for rewritten source partitions are the rows it had.

A compaction rewrites a source's files with the same rows; so does a reprocess that changed nothing.
The refresh then publishes nothing: the table's files stay, and the tables reading it see no change.
The rows are compared exactly (a multiset difference, each row with the partition it was kept by),
and only where their counts, read from the files' footers without a job, are equal: a rewrite that
changed the count pays no comparison. Where a count cannot be read so (files off the local disk, a
format with no count in its footer), the rows count as changed and the refresh publishes as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mt_magic.spark.errors import spark_call
from mt_magic.spark.footers import footer_rows


def same_rows(fmt: str, written: Sequence[str], replaced: Sequence[str],
              frames: Callable[[], tuple[Any, Any]], what: str) -> bool:
    """`written` (the refresh's files) hold the rows `replaced` (the files they would replace) hold;
    `frames` builds both files' rows, each with its partition, for the comparison."""
    counts = footer_rows(fmt, written), footer_rows(fmt, replaced)
    if counts[0] is None or counts[0] != counts[1]:
        return False
    if counts[0] == 0:
        return True
    new, old = frames()
    return spark_call(lambda: new.exceptAll(old).isEmpty(), what)     # equal counts: one way suffices
