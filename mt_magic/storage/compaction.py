"""A table's own files kept few while refreshes append to it.

An incremental refresh of a filter or a join adds the change's rows as new files beside the ones the
table has. Left alone, every refresh adds a few small files: the next refresh links them all again, and
a reader of the table opens them all (after 500 refreshes, thousands). So an append writes its change
in as few files as its size needs (one per core at least, so that its read keeps them busy), and where a
folder of the table holds more than `SMALL_FILES_KEPT` small files, the refresh that appends next also
rewrites them, the same rows in one file: what a refresh and a reader pay stays bounded by the data, not
by how many refreshes ran.
"""

from __future__ import annotations

from mt_magic.spark.files import Listing

TARGET_FILE_BYTES = 128 * 1024 * 1024      # what Spark reads in one task (spark.sql.files.maxPartitionBytes)
SMALL_FILE_BYTES = TARGET_FILE_BYTES // 8
SMALL_FILES_KEPT = 8                       # per folder; one more and the next append rewrites them


def files_to_compact(listing: Listing) -> Listing:
    """The small files of the folders that hold more than `SMALL_FILES_KEPT` of them."""
    small: dict[str, Listing] = {}
    for path, facts in listing.items():
        if facts[0] < SMALL_FILE_BYTES:
            small.setdefault(path.rsplit("/", 1)[0], {})[path] = facts
    return {path: facts for folder in small.values() if len(folder) > SMALL_FILES_KEPT
            for path, facts in folder.items()}


def files_for(read_bytes: int) -> int:
    """How many files a write of rows read from `read_bytes` of files needs (at least one)."""
    return max(1, -(-read_bytes // TARGET_FILE_BYTES))
