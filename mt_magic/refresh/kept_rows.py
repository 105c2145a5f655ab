"""A linear table's rows kept by the source partition they came from, so that a rewritten partition's
rows can be found once its old files are gone.

A table of a one-branch filter, projection or join over a partitioned plain source (`keeping.keeping_of`)
writes its rows split by the source partition each came from (`incremental.provenance.tagged_rows`):
every data file holds one partition's rows, and the manifest names each partition's files
(`KeptRows`). A refresh after some partitions were rewritten drops their files and writes the query
over their files now: its cost follows the rewritten partitions, not the table. The files lie flat in
the version's folder, as any unpartitioned table's (a `column=value` folder would read as a column):
a write split by partition is moved up, each file's name prefixed by its partition's place in the write.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from pyspark.sql import functions as F

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.provenance import PARTITION
from mt_magic.refresh.choice import table_reading
from mt_magic.refresh.full import FAILED_TASKS_SETTLE_S
from mt_magic.refresh.provenance_state import partitions
from mt_magic.refresh.relations import Relations
from mt_magic.refresh.same_rows import same_rows
from mt_magic.spark.errors import spark_call
from mt_magic.spark.frames import Fingerprint, files_frame, listed_by_driver, unsorted_partition_writes
from mt_magic.spark.partition_folders import folder_value
from mt_magic.storage.compaction import SMALL_FILE_BYTES, SMALL_FILES_KEPT, files_for
from mt_magic.storage.formats import data_source_options, folder_writer
from mt_magic.storage.linked import version_relative
from mt_magic.storage.manifests import KeptRows
from mt_magic.storage.versions import TableStorage, same_path

Files = dict[str, tuple[str, ...]]      # a source partition → the names of the data files its rows are in
Published = dict[str, tuple[str, int]]  # a published data file's name in the version → its path and size
FILE_NAME = "mt_file"


class RowsByPartition:
    def __init__(self, spark: Any, storage: TableStorage) -> None:
        self.spark = spark
        self.storage = storage

    def write(self, table: MaterializedTable, frame: Any, folder: str, only: str | None = None) -> Files:
        """The frame's rows (with their partition in its last column) written into `folder` (in the
        table's own partition folders, if any), one partition's rows to a file; the files of each
        partition. `only`: every row is of that partition (a write split by partition costs more than a
        plain one)."""
        fmt, options = table.storage.format, data_source_options(table.options)
        try:
            if only is not None and not table.partition_keys:
                spark_call(lambda: folder_writer(frame.drop(PARTITION), fmt, options, ()).save(folder),
                           f"Refreshing {table.identifier}")
                names = tuple(sorted(path.rsplit("/", 1)[1] for path in self.storage.files.listing(folder)))
                return {only: names} if names else {}
            with unsorted_partition_writes(self.spark):
                spark_call(lambda: folder_writer(frame, fmt, options, (*table.partition_keys, PARTITION)).save(folder),
                           f"Refreshing {table.identifier}")
            return self._flattened(folder)
        except BaseException:
            self.storage.remove(folder, settle_s=FAILED_TASKS_SETTLE_S)
            raise

    def _flattened(self, folder: str) -> Files:
        """Each file moved up out of its source partition's folder, named by the partition's place in
        the write and its own: a name no other file of the write has (one task writes files of the same
        name into each of the table's partition folders)."""
        files, prefix = self.storage.files, same_path(folder) + "/"
        written: Files = {}
        number = itertools.count()
        for index, (partition, listing) in enumerate(sorted(partitions(files.listing(folder), PARTITION).items())):
            names, folders = [], set()
            for path in sorted(listing):
                inside, name = same_path(path)[len(prefix):].rsplit("/", 1)
                above = inside.rpartition("/")[0]       # the table's own partition folders, if any
                names.append(f"{above}/" * bool(above) + f"{index:05d}-{next(number):05d}-{name}")
                files.rename(path, f"{folder}/{names[-1]}")
                folders.add(f"{folder}/{inside}")
            for emptied in folders:
                files.delete(emptied)
            written[partition] = tuple(names)
        return written

    def published(self, table: MaterializedTable) -> Published:
        """The published data files (their paths and sizes) by their names in the version (those
        `KeptRows.files` holds), wherever the table's partitions lie."""
        relative = version_relative(table.storage.root)
        return {relative(path): (path, facts[0]) for path, facts in self.storage.published_files(table).items()}

    def located(self, table: MaterializedTable, kept: KeptRows) -> dict[str, str]:
        """Where the kept files lie, by their names in the version: an unpartitioned table's in its
        folder (no listing), a partitioned one's wherever its partitions lie."""
        if table.partition_keys:
            return {name: path for name, (path, _) in self.published(table).items()}
        location = table.storage.location.rstrip("/")
        return {name: f"{location}/{name}" for names in kept.files.values() for name in names}

    def rows_of(self, table: MaterializedTable, kept: KeptRows, partitions: set[str],
                relations: Relations) -> str | None:
        """A relation of these partitions' rows, each with its partition; None where they have none."""
        paths = self.located(table, kept)
        found = {paths[name]: partition for partition in partitions for name in kept.files.get(partition, ())}
        return relations.add("kept_taken_from", self._tagged(table, found)) if found else None

    def crowded(self, published: Published, kept: KeptRows, appended: Files) -> Files:
        """The partitions' published small files an append rewrites into one per folder of the table:
        a folder's files of an appended partition when more than SMALL_FILES_KEPT, and — once the table
        holds more small files than four a partition and folder (and SMALL_FILES_KEPT) — every
        partition's in a folder holding two or more. A table's files then stay bounded by its source's
        partitions (times its own), not by the refreshes that ran."""
        small, added = _by_folder(kept.files, lambda n: published.get(n, ("", 0))[1] < SMALL_FILE_BYTES), \
            _by_folder(appended)
        if sum(map(len, small.values())) + sum(map(len, added.values())) > 4 * len(small.keys() | added.keys()) + \
                SMALL_FILES_KEPT:
            chosen = [place for place, names in small.items() if len(names) >= 2]
        else:
            chosen = [place for place in added if len(small.get(place, ())) + len(added[place]) > SMALL_FILES_KEPT]
        crowded: dict[str, tuple[str, ...]] = {}
        for partition, folder in chosen:
            crowded[partition] = crowded.get(partition, ()) + small.get((partition, folder), ())
        return {partition: names for partition, names in crowded.items() if names}

    def compacted(self, table: MaterializedTable, crowded: Files, published: Published) -> Any:
        """The rows of the crowded partitions' files, each with its partition (by the file it is read
        from), in as few files as they need."""
        paths = {published[name][0]: partition for partition, names in crowded.items() for name in names}
        return self._tagged(table, paths).coalesce(files_for(sum(published[name][1] for names in crowded.values()
                                                                 for name in names)))

    def same(self, table: MaterializedTable, written: Files, folder: str, kept: KeptRows, dropped: set[str],
             now: Fingerprint | None) -> bool:
        """The rows `written` into `folder` for the `dropped` partitions (their fingerprint `now`) are
        those of the published files they replace: by the kept fingerprints where each is known (no
        file read again; different ones are different rows), else partition by partition (`same_rows`)."""
        before = [kept.fingerprints.get(partition) for partition in dropped]
        if now is not None and None not in before:
            return added(*before) == now
        new = {f"{folder}/{name}": partition for partition, names in written.items() for name in names}
        paths = self.located(table, kept)
        old = {paths[name]: partition for partition in dropped for name in kept.files.get(partition, ())}
        return same_rows(table.storage.format, list(new), list(old),
                         lambda: (self._tagged(table, new), self._tagged(table, old)), f"Refreshing {table.identifier}")

    def _tagged(self, table: MaterializedTable, paths: dict[str, str]) -> Any:
        """The rows of these files of the table, each with the partition its file holds (their names
        are unique: `_flattened`) as the rows written carried it: the source's value, not its folder's
        text (a NULL day's rows are NULL's, as the rows an append takes away are)."""
        reading = table_reading(table)
        listed = tuple(sorted(paths))
        with listed_by_driver(self.spark, listed):
            frame = files_frame(self.spark, reading.format, reading.schema, reading.options, listed,
                                reading.partition_columns, FILE_NAME)
        lookup = F.create_map(*[F.lit(value) for pair in sorted((path.rsplit("/", 1)[1], folder_value(partition))
                                                                for path, partition in paths.items()) for value in pair])
        return frame.withColumn(PARTITION, F.element_at(lookup, F.col(FILE_NAME)).cast("string")).drop(FILE_NAME)


def _by_folder(files: Files, keep: Callable[[str], bool] = lambda name: True) -> dict[tuple[str, str], tuple[str, ...]]:
    """The files of each partition by the table's folder they are in (one of its own partitions)."""
    found: dict[tuple[str, str], tuple[str, ...]] = {}
    for partition, names in files.items():
        for name in names:
            if keep(name):
                place = (partition, name.rpartition("/")[0])
                found[place] = found.get(place, ()) + (name,)
    return found


def merged(kept: Files, gone: set[str], *written: Files) -> Files:
    """The partitions' files after a refresh: the kept ones but those `gone`, and those written."""
    files = {partition: tuple(n for n in names if n not in gone) for partition, names in kept.items()}
    files = {partition: names for partition, names in files.items() if names}
    for more in written:
        for partition, names in more.items():
            files[partition] = files.get(partition, ()) + names
    return files


def fingerprints(kept: KeptRows, dropped: set[str], written: Files, only: str | None,
                 now: Fingerprint | None) -> dict[str, Fingerprint]:
    """The partitions' fingerprints after a refresh that dropped `dropped` and wrote `written` (its
    rows' fingerprint `now`): a write of one partition's rows gives it theirs (added to its kept
    one's, an append's); a write of several partitions' leaves theirs unknown until one of their own."""
    prints = {partition: found for partition, found in kept.fingerprints.items()
              if partition not in dropped and partition not in written}
    if only is not None and now is not None and set(written) <= {only}:
        earlier = (0, 0, 0) if only in dropped or only not in kept.files else kept.fingerprints.get(only)
        if earlier is not None:
            prints[only] = added(earlier, now)
    return prints


def added(*prints: Fingerprint) -> Fingerprint:
    """The fingerprint of the rows of all these."""
    return tuple(map(sum, zip((0, 0, 0), *prints)))       # type: ignore[return-value]
