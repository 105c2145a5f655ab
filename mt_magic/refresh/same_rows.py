"""Whether the rows a refresh computed again for rewritten source partitions are the rows it had.

A compaction rewrites a source's files with the same rows; so does a reprocess that changed nothing.
The refresh then publishes nothing: the table's files stay, and the tables reading it see no change.
The rows are compared exactly (a multiset difference, each row with the partition it was kept by),
and only where their counts, and in Parquet each column's least and greatest value and NULLs, read
from the files' footers without a job, are equal: a rewrite that changed them pays no comparison. Where a count cannot be read so (files off the local disk, a
format with no count in its footer), the rows count as changed and the refresh publishes as before.

An aggregate's floating-point partials (a SUM of DOUBLE) are computed again in another order, and
differ in their last bits: they are compared within a relative CLOSE, the rounding of a sum of many
terms in another order, far inside the 1e-9 incremental results are held to; the kept ones stay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import functions as F

from mt_magic.spark.errors import spark_call
from mt_magic.spark.footers import footer_summary

CLOSE = 1e-12


def same_rows(fmt: str, written: Sequence[str], replaced: Sequence[str],
              frames: Callable[[], tuple[Any, Any]], what: str, close: Sequence[str] = ()) -> bool:
    """`written` (the refresh's files) hold the rows `replaced` (the files they would replace) hold;
    `frames` builds both files' rows, each with its partition, for the comparison. `close`: floating
    columns compared within CLOSE, the others (unique together on each side) exactly."""
    ours, theirs = footer_summary(fmt, written), footer_summary(fmt, replaced)
    if ours is None or theirs is None or ours[0] != theirs[0] or not _alike(ours[1], theirs[1], set(close)):
        return False
    if ours[0] == 0:
        return True
    new, old = frames()
    return spark_call(lambda: _differing(new, old, set(close)).count(), what) == 0    # one job


def _alike(ours: dict, theirs: dict, close: set[str]) -> bool:
    """The columns both footers describe have the same least and greatest values and NULLs (a
    `close` column's within CLOSE): a rewrite that changed rows mostly changes one of them."""
    for name in ours.keys() & theirs.keys():
        (low, high, nulls), (other_low, other_high, other_nulls) = ours[name], theirs[name]
        if nulls != other_nulls:
            return False
        if name in close and all(isinstance(v, float) for v in (low, high, other_low, other_high)):
            if not (math.isclose(low, other_low, rel_tol=CLOSE) and math.isclose(high, other_high, rel_tol=CLOSE)):
                return False
        elif (low, high) != (other_low, other_high):
            return False
    return True


def _differing(new: Any, old: Any, close: set[str]) -> Any:
    """The rows of `new` not in `old` (as many rows each: none means the same rows)."""
    if not close:
        return new.exceptAll(old)
    # Positional names: the two sides' columns are the same, in the same order, whatever they are called.
    names = [f"c{i}" for i in range(len(new.columns))]
    near = {names[i] for i, column in enumerate(new.columns) if column in close}
    new, old = new.toDF(*names), old.toDF(*[f"o_{n}" for n in names]).withColumn("o_here", F.lit(True))
    keys = [new[n].eqNullSafe(old[f"o_{n}"]) for n in names if n not in near]
    agree = F.col("o_here").isNotNull()
    for n in near:
        a, b = new[n], old[f"o_{n}"]
        agree = agree & (a.eqNullSafe(b) | (F.abs(a - b) <= F.lit(CLOSE) * F.greatest(F.abs(a), F.abs(b))))
    return new.join(old, on=keys, how="left").where(~agree)
