"""A linear table's rows kept by the source partition they came from, so that a rewritten partition's
rows can be found once its old files are gone.

A table of a one-branch filter, projection or join over a partitioned plain source (`choice._keeping`)
writes its rows split by the source partition each came from (`incremental.provenance.tagged_rows`):
every data file holds one partition's rows, and the manifest names each partition's files
(`KeptRows`). A refresh after some partitions were rewritten drops their files and writes the query
over their files now: its cost follows the rewritten partitions, not the table. The files lie flat in
the version's folder, as any unpartitioned table's (a `column=value` folder would read as a column):
a write split by partition is moved up, each file's name prefixed by its partition's place in the write.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.provenance import PARTITION
from mt_magic.refresh.choice import table_reading
from mt_magic.refresh.full import FAILED_TASKS_SETTLE_S
from mt_magic.refresh.provenance_state import partitions
from mt_magic.refresh.same_rows import same_rows
from mt_magic.spark.errors import spark_call
from mt_magic.spark.files import Listing
from mt_magic.spark.frames import files_frame, listed_by_driver, unsorted_partition_writes
from mt_magic.storage.compaction import SMALL_FILE_BYTES, SMALL_FILES_KEPT, files_for
from mt_magic.storage.formats import data_source_options, folder_writer
from mt_magic.storage.manifests import KeptRows
from mt_magic.storage.versions import TableStorage

Files = dict[str, tuple[str, ...]]      # a source partition → the names of the data files its rows are in
FILE_NAME = "mt_file"


class RowsByPartition:
    def __init__(self, spark: Any, storage: TableStorage) -> None:
        self.spark = spark
        self.storage = storage

    def write(self, table: MaterializedTable, frame: Any, folder: str, only: str | None = None) -> Files:
        """The frame's rows (with their partition in its last column) written into `folder`, one
        partition's rows to a file, flat; the files of each partition. `only`: every row is of that
        partition (a write split by partition costs more than a plain one)."""
        fmt, options = table.storage.format, data_source_options(table.options)
        try:
            if only is not None:
                spark_call(lambda: folder_writer(frame.drop(PARTITION), fmt, options, ()).save(folder),
                           f"Refreshing {table.identifier}")
                names = tuple(sorted(path.rsplit("/", 1)[1] for path in self.storage.files.listing(folder)))
                return {only: names} if names else {}
            with unsorted_partition_writes(self.spark):
                spark_call(lambda: folder_writer(frame, fmt, options, (PARTITION,)).save(folder),
                           f"Refreshing {table.identifier}")
            return self._flattened(folder)
        except BaseException:
            self.storage.remove(folder, settle_s=FAILED_TASKS_SETTLE_S)
            raise

    def _flattened(self, folder: str) -> Files:
        files = self.storage.files
        written: Files = {}
        for index, (partition, listing) in enumerate(sorted(partitions(files.listing(folder), PARTITION).items())):
            names = []
            for path in sorted(listing):
                names.append(f"{index:05d}-{path.rsplit('/', 1)[1]}")
                files.rename(path, f"{folder}/{names[-1]}")
            files.delete(f"{folder}/{PARTITION}={partition}")
            written[partition] = tuple(names)
        return written

    def crowded(self, listing: Listing, kept: KeptRows, appended: Files) -> Files:
        """The partitions whose published small files an append rewrites into one: an appended partition
        holding more than SMALL_FILES_KEPT, and — once the table holds more small files than four a
        partition (and SMALL_FILES_KEPT) — every partition holding two or more. A table's files then
        stay bounded by its source's partitions, not by the refreshes that ran."""
        sizes = {path.rsplit("/", 1)[1]: facts[0] for path, facts in listing.items()}
        small = {partition: tuple(n for n in names if sizes.get(n, 0) < SMALL_FILE_BYTES)
                 for partition, names in kept.files.items()}
        count = sum(map(len, small.values())) + sum(map(len, appended.values()))
        if count > 4 * len(small.keys() | appended.keys()) + SMALL_FILES_KEPT:
            return {partition: names for partition, names in small.items() if len(names) >= 2}
        return {partition: small[partition] for partition in appended
                if len(small.get(partition, ())) + len(appended[partition]) > SMALL_FILES_KEPT}

    def compacted(self, table: MaterializedTable, crowded: Files, listing: Listing) -> Any:
        """The rows of the crowded partitions' files, each with its partition (by the file it is read
        from), in as few files as they need."""
        frame = self._tagged(table, table.storage.location.rstrip("/"), crowded)
        names = {name for names in crowded.values() for name in names}
        return frame.coalesce(files_for(sum(facts[0] for path, facts in listing.items()
                                            if path.rsplit("/", 1)[1] in names)))

    def same(self, table: MaterializedTable, written: Files, folder: str, replaced: Files) -> bool:
        """The rows `written` into `folder` for the rewritten partitions are those of the published
        files they replace, partition by partition (`same_rows`)."""
        location = table.storage.location.rstrip("/")
        return same_rows(table.storage.format, _paths(folder, written), _paths(location, replaced),
                         lambda: (self._tagged(table, folder, written), self._tagged(table, location, replaced)),
                         f"Refreshing {table.identifier}")

    def _tagged(self, table: MaterializedTable, folder: str, files: Files) -> Any:
        """The rows of these files of `folder`, each with the partition its file holds."""
        reading = table_reading(table)
        paths = tuple(sorted(_paths(folder, files)))
        with listed_by_driver(self.spark, paths):
            frame = files_frame(self.spark, reading.format, reading.schema, reading.options, paths, (), FILE_NAME)
        lookup = F.create_map(*[F.lit(value) for pair in sorted((name, partition) for partition, names in files.items()
                                                                for name in names) for value in pair])
        return frame.withColumn(PARTITION, F.element_at(lookup, F.col(FILE_NAME))).drop(FILE_NAME)


def _paths(folder: str, files: Files) -> list[str]:
    return [f"{folder}/{name}" for names in files.values() for name in names]


def merged(kept: Files, gone: set[str], *written: Files) -> Files:
    """The partitions' files after a refresh: the kept ones but those `gone`, and those written."""
    files = {partition: tuple(n for n in names if n not in gone) for partition, names in kept.items()}
    files = {partition: names for partition, names in files.items() if names}
    for more in written:
        for partition, names in more.items():
            files[partition] = files.get(partition, ()) + names
    return files
