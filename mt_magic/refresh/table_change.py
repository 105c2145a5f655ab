"""What a refresh did to the table: the rows it inserted and deleted, and the rows it holds after —
so that one refresh shows its cost followed the change (a day rewritten: that day's rows out and in,
not the table's).

Counted from the files, as the table changed: the rows inserted are those written, counted as they
were written; the rows deleted are those of the published files the new version no longer has (a
file carried, linked, into the new version keeps its name from its version folder on, so it is not
one of them). Those are counted from their footers (a Parquet or ORC file's row count, read by this
process where the files are on a local disk; else with a Spark job), but where the new version holds
none of the old files: then the rows deleted are the rows the table held, which the history knew.
Files compacted (their rows written again into fewer files, unchanged) count in neither.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mt_magic.catalog.model import MaterializedTable
from mt_magic.errors import SparkError
from mt_magic.refresh.choice import table_reading
from mt_magic.spark.errors import spark_call
from mt_magic.spark.files import Listing
from mt_magic.spark.footers import footer_rows
from mt_magic.spark.frames import files_frame, listed_by_driver
from mt_magic.storage.linked import version_relative

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableChange:
    inserted: int | None
    deleted: int | None
    rows: int | None            # the table's rows after (None: not known)

    def measures(self) -> dict[str, int | None]:
        return {"inserted": self.inserted, "deleted": self.deleted, "table_rows": self.rows}


def unchanged(rows: int | None) -> TableChange:
    """A skip: the table as it was."""
    return TableChange(0, 0, rows)


def table_change(spark: Any, table: MaterializedTable, before: Listing, after: Listing, inserted: int | None,
                 compacted: frozenset[str], rows_before: int | None) -> TableChange:
    """`table` as it was published before, with `before` its files then and `after` the new version's;
    `compacted`: files of `before` whose rows the new version holds again, unchanged."""
    relative = version_relative(table.storage.root)
    kept = {relative(path) for path in after} | {relative(path) for path in compacted}
    removed = {path: facts for path, facts in before.items() if relative(path) not in kept}
    whole = len(removed) == len(before)
    if whole and before and rows_before is not None:
        deleted: int | None = rows_before           # the whole table rewritten: all it held
    else:
        deleted = rows_of(spark, table, tuple(removed)) if removed else 0
    if inserted is None or not whole and (rows_before is None or deleted is None):
        return TableChange(inserted, deleted, None)
    return TableChange(inserted, deleted, inserted if whole else rows_before - deleted + inserted)


def rows_of(spark: Any, table: MaterializedTable, files: Sequence[str]) -> int | None:
    """The rows of these files of the table; None where they cannot be counted (the refresh is
    published: a count's failure is no failure of it)."""
    reading = table_reading(table)
    counted = footer_rows(reading.format, files)
    if counted is not None:
        return counted
    try:
        with listed_by_driver(spark, files):
            frame = files_frame(spark, reading.format, reading.schema, reading.options, tuple(sorted(files)),
                                reading.partition_columns)
            return spark_call(frame.count, f"Counting the rows a refresh of {table.identifier} deleted")
    except SparkError as error:
        log.warning("%s", error)
        return None
