"""The rows of data files counted from their footers by this process, without a Spark job, and the
bytes a read of some key range scans in them.

A Parquet or ORC file says its row count in its footer. Reading the footers of a few files on a local
disk takes about a millisecond each; a Spark job counting them takes 0.1 s of a 2-core machine, and
beside a refresh's own job it slows that job by as much. Where a file is not on a local disk, its
format keeps no count, or pyarrow (which PySpark's Connect client and pandas support bring) is not
installed, the caller counts with Spark.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from mt_magic.spark.files import is_local, local_path

_READERS = {"parquet", "orc"}


Summary = tuple[int, dict[str, tuple[Any, Any, int]]]     # rows; per column: min, max and NULLs


def footer_rows(fmt: str, files: Sequence[str]) -> int | None:
    """The rows of these files from their footers; None where one cannot be read so."""
    found = _footers(fmt, files, statistics=False)
    return None if found is None else found[0]


def footer_summary(fmt: str, files: Sequence[str]) -> Summary | None:
    """The rows of these files and, of a Parquet file's columns, their least and greatest value and
    their NULLs, from the footers (a column whose statistics are missing in one row group, or whose
    values do not compare, is left out); None where the rows cannot be counted so."""
    return _footers(fmt, files, statistics=True)


def _footers(fmt: str, files: Sequence[str], statistics: bool) -> Summary | None:
    fmt = fmt.lower()
    if fmt not in _READERS or not all(map(is_local, files)):
        return None
    columns: dict[str, tuple[Any, Any, int] | None] = {}
    try:
        if fmt == "orc":
            from pyarrow import orc
            return sum(orc.ORCFile(local_path(path)).nrows for path in files), {}
        rows = 0
        for path in files:
            found = os.stat(local_path(path))
            counted, of_file = _summary_of(path, (found.st_mtime_ns, found.st_size))
            rows += counted
            for name, stats in of_file.items() if statistics else ():
                _gather(columns, name, stats)
    except (ImportError, OSError, ValueError):    # no pyarrow; a file it cannot read (ArrowIOError, ArrowInvalid)
        return None
    return rows, {name: found for name, found in columns.items() if found is not None}


@functools.lru_cache(maxsize=4096)
def _summary_of(path: str, stamp: tuple[int, int]) -> tuple[int, dict[str, tuple[Any, Any, int] | None]]:
    """A file's rows and its columns' least and greatest value and NULLs over its row groups (None:
    not known), kept for the process as `_footer` is."""
    meta = _footer(path, stamp)
    columns: dict[str, tuple[Any, Any, int] | None] = {}
    for group in range(meta.num_row_groups):
        for index in range(meta.num_columns):
            chunk = meta.row_group(group).column(index)
            stats = chunk.statistics
            known = stats is not None and stats.has_min_max and stats.null_count is not None
            _gather(columns, chunk.path_in_schema, (stats.min, stats.max, stats.null_count) if known else None)
    return meta.num_rows, columns


def _gather(columns: dict[str, tuple[Any, Any, int] | None], name: str, stats: tuple[Any, Any, int] | None) -> None:
    """A column's least and greatest value and NULLs in one more row group or file, into `columns`."""
    if stats is None:
        columns[name] = None
    elif name not in columns:
        columns[name] = stats
    elif columns[name] is not None:
        low, high, nulls = columns[name]
        try:
            columns[name] = (min(low, stats[0]), max(high, stats[1]), nulls + stats[2])
        except TypeError:       # values that do not compare
            columns[name] = None


def footer_bytes_within(fmt: str, files: Sequence[str], column: str, low: Any, high: Any) -> int | None:
    """The compressed bytes of the Parquet row groups of these files whose statistics say `column` may
    hold a value from `low` to `high` (a row group without them counts whole): what a read filtered
    to that range scans; None where a footer cannot be read so."""
    if fmt.lower() != "parquet" or not all(map(is_local, files)):
        return None
    total = 0
    try:
        for path in files:
            total += sum(size for least, greatest, size in _row_groups(path, column)
                         if _may_hold(least, greatest, low, high))
    except (ImportError, OSError, ValueError, TypeError):   # as above; values that do not compare
        return None
    return total


def files_within(fmt: str, files: Sequence[str], ranges: Sequence[tuple[str, Any, Any]]) -> tuple[str, ...]:
    """These files but those whose footers say no row group holds a value of each range (column,
    least, greatest) — the ones a read filtered to the ranges would only open to skip. A file whose
    footer cannot be read so (not Parquet, not on a local disk, values that do not compare) is kept."""
    if fmt.lower() != "parquet" or not ranges:
        return tuple(files)

    def may_hold(path: str) -> bool:
        try:
            return not is_local(path) or all(any(_may_hold(least, greatest, low, high)
                                                 for least, greatest, _ in _row_groups(path, column))
                                             for column, low, high in ranges)
        except (ImportError, OSError, ValueError, TypeError):
            return True
    return tuple(filter(may_hold, files))


def _may_hold(least: Any, greatest: Any, low: Any, high: Any) -> bool:
    """A row group from `least` to `greatest` (None: not known) may hold a value from `low` to `high`."""
    return least is None or not (greatest < low or least > high)


def footer(path: str) -> Any:
    """A local Parquet file's footer (pyarrow's FileMetaData) as the file holds now."""
    found = os.stat(local_path(path))
    return _footer(path, (found.st_mtime_ns, found.st_size))


@functools.lru_cache(maxsize=4096)
def _footer(path: str, stamp: tuple[int, int]) -> Any:
    """`footer`, kept for the process by the file's modification time and size (`stamp`; a file written
    again under its name is read again): the files one append adds are read by every table over
    the source, by the bounds, the pruning and the read of one refresh each."""
    from pyarrow import parquet
    return parquet.read_metadata(local_path(path))


def _row_groups(path: str, column: str) -> tuple[tuple[Any, Any, int], ...]:
    """Each row group's least and greatest value of `column` (None, None: not known) and its compressed
    bytes, as the file holds now."""
    found = os.stat(local_path(path))
    return _row_groups_of(path, column, (found.st_mtime_ns, found.st_size))


@functools.lru_cache(maxsize=4096)
def _row_groups_of(path: str, column: str, stamp: tuple[int, int]) -> tuple[tuple[Any, Any, int], ...]:
    """`_row_groups`, kept for the process as `_footer` is (what a refresh reads is pruned by them)."""
    meta = _footer(path, stamp)
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    at = names.index(column) if column in names else None
    groups = []
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        stats = row_group.column(at).statistics if at is not None else None
        known = stats is not None and stats.has_min_max
        groups.append((stats.min if known else None, stats.max if known else None,
                       sum(row_group.column(i).total_compressed_size for i in range(meta.num_columns))))
    return tuple(groups)
