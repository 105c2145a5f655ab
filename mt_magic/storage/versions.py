"""A materialized table's data: versioned folders, atomic publishing, the Spark catalog entry.

A refresh never writes where readers read. It writes a new version folder, then publishes it with
one catalog change: the table's location, or (partitioned tables) all affected partition locations
in one call of Spark's catalog. Readers therefore see the old data or the new, never a mix, and a
crash before the publish leaves the old version in place.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from mt_magic.catalog.model import MaterializedTable, PartitionLocation, Storage, Target
from mt_magic.errors import SparkError
from mt_magic.spark.tables import (partition_clause, partition_locations, partition_metadata, set_table_location,
                                    switch_partition_locations, switches_partitions_at_once, table_facts)
from mt_magic.spark.errors import spark_call
from mt_magic.spark.files import Listing, files_for
from mt_magic.spark.jobs import uninterrupted
from mt_magic.spark.types import type_from_json, type_sql
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.ddl import add_partitions_sql, create_table_sql, partitions_apart
from mt_magic.storage.manifests import MANIFESTS_DIR
from mt_magic.storage.writers import Writers, note_of

VERSION_PREFIX = "v-"
EMPTY_DIR = "_empty"
SUPERSEDED_MARKER = "_SUPERSEDED"


def version_folder(root: str) -> str:
    """A new version's folder under `root`: named by time, so versions list in the order written."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    return f"{root.rstrip('/')}/{VERSION_PREFIX}{stamp}-{uuid.uuid4().hex[:8]}"


class TableStorage:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.files = files_for(spark)
        self._deferred: set[str] = set()      # tables whose first publish creates the Spark table

    # ------------------------------------------------------------- catalog
    def exists(self, table: MaterializedTable) -> bool:
        return bool(self.spark.catalog.tableExists(table.quoted))

    def first_storage(self, root: str, fmt: str, owns_root: bool) -> Storage:
        """Where a new table's data is: an empty folder until the first refresh publishes."""
        root = self.files.qualify(root)
        return Storage(root, fmt, f"{root}/{EMPTY_DIR}", (), owns_root,
                       catalog_partitions=switches_partitions_at_once(self.spark))

    def create(self, table: MaterializedTable, filled_next: bool = False) -> None:
        """The Spark table, external, on its empty first version. `filled_next`: a refresh follows at
        once, and its publish creates the table on the version it wrote (one catalog call instead of
        two; readers find no table, then the full one). A table whose partitions live in the catalog
        is created at once: its location must not be a version that later refreshes supersede."""
        if filled_next and not (table.partition_keys and table.storage.catalog_partitions):
            self.files.mkdirs(table.storage.root)      # where the refresh notes its version
            self._deferred.add(table.identifier)
            return
        self.files.mkdirs(table.storage.location)
        self._create_table(table, table.storage)

    def forget_deferred(self, table: MaterializedTable) -> None:
        """The refresh that was to create the table did not publish (a failed CREATE)."""
        self._deferred.discard(table.identifier)

    def register(self, table: MaterializedTable) -> None:
        """Put a table back into a fresh Spark catalog (a new kernel) at its published versions."""
        if self.exists(table):
            return
        self._create_table(table, table.storage)
        if table.storage.catalog_partitions:
            self._add_partitions(table, {tuple(p.spec.items()): p.location for p in table.storage.partitions})

    def follow(self, table: MaterializedTable) -> None:
        """Make this session's Spark catalog agree with the record: register a table another process
        created, move to the version another process published (old versions outlive the switch)."""
        if not self.exists(table):
            self.register(table)
            return
        storage = table.storage
        if table.partition_keys and storage.catalog_partitions:
            registered = {k: same_path(v) for k, v in
                          partition_locations(self.spark, table.quoted, table.partition_keys).items()}
            wanted = {tuple(p.spec.items()): p.location for p in storage.partitions}
            self._add_partitions(table, {k: v for k, v in wanted.items() if k not in registered})
            switch_partition_locations(self.spark, table.quoted, {
                k: v for k, v in wanted.items() if k in registered and registered[k] != same_path(v)})
            self._drop_partitions(table, [k for k in registered if k not in wanted])
        elif same_path(table_facts(self.spark, table.quoted).location or "") != same_path(storage.location):
            set_table_location(self.spark, table.quoted, storage.location,
                               f"Following the published version of {table.identifier}")

    def forget(self, quoted: str) -> None:
        """The Spark table of a materialized table another process dropped (its data is gone)."""
        spark_call(lambda: self.spark.sql(f"DROP TABLE IF EXISTS {quoted}"), f"Dropping {quoted}")

    def _create_table(self, table: MaterializedTable, storage: Storage) -> None:
        # Only a partitioned table's DDL reads the setting (three round trips over Connect).
        with partition_metadata(self.spark, not partitions_apart(table, storage)):
            spark_call(lambda: self.spark.sql(create_table_sql(table, storage)),
                       f"Creating the Spark table {table.identifier}")

    def add_columns(self, table: MaterializedTable, count: int) -> None:
        """ALTER AS appends nullable columns: the Spark table gets them too."""
        added = table.columns[-count:]
        columns = ", ".join(f"{quote_identifier(c.name)} {type_sql(type_from_json(c.type_json))}"
                            for c in added)
        spark_call(lambda: self.spark.sql(f"ALTER TABLE {table.quoted} ADD COLUMNS ({columns})"),
                   f"Adding columns to {table.identifier}")

    def drop(self, table: MaterializedTable, settle_s: float = 0.0) -> None:
        """Remove the Spark table and every folder this table's refreshes wrote. Tasks of a
        micro-batch cancelled a moment ago may still create their folders: for `settle_s`, what
        reappears is deleted again."""
        spark_call(lambda: self.spark.sql(f"DROP TABLE IF EXISTS {table.quoted}"),
                   f"Dropping the Spark table {table.identifier}")
        self._delete_data(table)
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
            self._delete_data(table)

    def _delete_data(self, table: MaterializedTable) -> None:
        root = table.storage.root
        if table.storage.owns_root:
            self.files.delete(root)
            return
        for entry in self.files.list(root):
            if entry.name.startswith(VERSION_PREFIX) or entry.name in (EMPTY_DIR, MANIFESTS_DIR):
                self.files.delete(entry.path)

    # ----------------------------------------------------------- versions
    def new_version(self, table: MaterializedTable, noted: bool = True) -> str:
        """A new version's folder; `noted`: noted as written by this process until `written` is
        called (a stream's run folder is not: it is published at its first batch and lives on)."""
        version = self.files.qualify(version_folder(table.storage.root))
        if noted:
            self.files.touch(note_of(version))
        return version

    def written(self, version: str | None) -> None:
        """The write of `version` is over (published, or failed and discarded; None: none begun)."""
        if version is not None:
            self.files.delete(note_of(version))

    def published_files(self, table: MaterializedTable) -> Listing:
        """The data files readers read now."""
        listing: Listing = {}
        for location in data_locations(table.storage):
            listing.update(self.files.listing(location))
        return listing

    def publish(self, table: MaterializedTable, version: str, target: Target) -> Storage:
        """Make `version` what readers see: the whole table, or the partitions the target matches. A
        cancel of the refresh's jobs does not reach it (`uninterrupted`): the caller discards `version`
        when this raises, which must mean nothing points at it."""
        with uninterrupted(self.spark):
            return self._publish(table, version, target)

    def _publish(self, table: MaterializedTable, version: str, target: Target) -> Storage:
        storage = table.storage
        if table.identifier in self._deferred:
            self._deferred.discard(table.identifier)
            if self._created_at(table, version):
                return replace(storage, location=version, partitions=())
        if not table.partition_keys or not storage.catalog_partitions:
            if table.partition_keys and not target.whole:   # the partitions not rewritten come along
                for key, path in self.written_partitions(storage.location, table.partition_keys):
                    if not target.matches(dict(key)):
                        self.files.link_tree(path, version.rstrip("/") + path[len(storage.location.rstrip("/")):])
            set_table_location(self.spark, table.quoted, version, f"Publishing a new version of {table.identifier}")
            return Storage(storage.root, storage.format, version, (), storage.owns_root,
                           storage.catalog_partitions)
        written = dict(self.written_partitions(version, table.partition_keys))
        replaced = {tuple(p.spec.items()): p.location for p in storage.partitions if target.matches(p.spec)}
        kept = {tuple(p.spec.items()): p.location for p in storage.partitions
                if tuple(p.spec.items()) not in replaced}
        empty = f"{storage.root}/{EMPTY_DIR}"
        self.files.mkdirs(empty)
        # 1. new partitions appear empty; 2. one catalog call switches every affected partition;
        # 3. vanished partitions, empty since step 2, are removed.
        self._add_partitions(table, {key: empty for key in written if key not in replaced and key not in kept})
        switch = {**{key: empty for key in replaced if key not in written}, **written}
        switch_partition_locations(self.spark, table.quoted, switch)
        self._drop_partitions(table, [key for key in replaced if key not in written])
        partitions = {**kept, **written}
        return Storage(storage.root, storage.format, storage.location,
                       tuple(PartitionLocation(dict(k), v) for k, v in sorted(partitions.items())),
                       storage.owns_root)

    def _created_at(self, table: MaterializedTable, version: str) -> bool:
        """The Spark table created on `version`; False when it exists already (another gateway of the
        same application registered the new record first): it is published like any refresh."""
        try:
            self._create_table(table, replace(table.storage, location=version, partitions=()))
        except SparkError as error:
            if "ALREADY_EXISTS" not in str(error):
                raise
            return False
        return True

    def written_partitions(self, version: str, keys: tuple[str, ...]) -> Iterable[tuple[tuple, str]]:
        """The partition folders a write produced: key=value/... down to the last key."""
        level = [((), version)]
        for key in keys:
            next_level = []
            for spec, path in level:
                for entry in self.files.list(path):
                    name, _, value = entry.name.partition("=")
                    if entry.is_dir and name.lower() == key.lower():
                        next_level.append((spec + ((key, unquote(value)),), entry.path))
            level = next_level
        return level

    def _add_partitions(self, table: MaterializedTable, partitions: dict[tuple, str]) -> None:
        ddl = add_partitions_sql(table, partitions)
        if ddl:
            spark_call(lambda: self.spark.sql(ddl), f"Adding partitions to {table.identifier}")

    def _drop_partitions(self, table: MaterializedTable, specs: list[tuple]) -> None:
        if not specs:
            return
        clauses = ", ".join(partition_clause(dict(spec)) for spec in specs)
        spark_call(lambda: self.spark.sql(f"ALTER TABLE {table.quoted} DROP IF EXISTS {clauses}"),
                   f"Dropping partitions of {table.identifier}")

    # -------------------------------------------------------------- sweep
    def sweep(self, table: MaterializedTable, retention_s: float, just_published: bool = False) -> None:
        """Delete versions no longer referenced, once they have been unreferenced for a while.

        The first sweep that finds a version unreferenced marks it; a later one deletes it when
        the mark is older than the retention, so a reader planned before the switch can finish.
        Referenced: what the record publishes, and what Spark's entry reads (they differ after a
        kill between a publish and its record, until the next owner puts Spark back). Right after
        this session published the record's version (`just_published`), under the table's lock,
        Spark's entry is the record's: it is not read again (a refresh saves those round trips).
        """
        referenced = self._referenced(table, read_spark=not just_published)
        entries = self.files.list(table.storage.root)
        writers = Writers(table.storage.root, entries)
        gone = {n for n in writers.versions() if not any(e.name == n for e in entries) and not writers.writing(n)}
        for entry in entries:
            if not (entry.is_dir and entry.name.startswith(VERSION_PREFIX)):
                continue
            if _within(entry.path, referenced):
                continue
            if writers.writing(entry.name):
                continue      # a write in flight; a killed writer's folder goes by age like any other
            marker = f"{entry.path}/{SUPERSEDED_MARKER}"
            age = self.files.age(marker)
            if age is None:
                self.files.touch(marker)
            elif age >= retention_s:
                self.files.delete(entry.path)
                gone.add(entry.name)
        for note in (note for name in gone for note in writers.notes(name)):   # and what killed writers noted
            self.files.delete(note)

    def discard_version(self, table: MaterializedTable, version: str, settle_s: float = 0.0) -> None:
        """What a failed refresh wrote, deleted at once (unless Spark's entry reads it already)."""
        if not _within(version, self._referenced(table)):
            self.remove(version, settle_s)
        else:
            self.written(version)

    def remove(self, folder: str | None, settle_s: float = 0.0) -> None:
        """A folder no reader reads (a staging folder, a failed write; None: none), deleted with its
        note. A task of a failed job that Spark is still killing may write into it after the error
        reached us: `settle_s` later, in the background, what reappeared is deleted again."""
        if folder is None:
            return
        if self.files.exists(folder):
            self.files.delete(folder)
        if settle_s:
            again = threading.Timer(settle_s, self._delete_quietly, (folder,))
            again.daemon = True
            again.start()
        self.written(folder)

    def _delete_quietly(self, path: str) -> None:
        with contextlib.suppress(Exception):     # a closed session: the next sweep removes it
            if self.files.exists(path):
                self.files.delete(path)

    def _referenced(self, table: MaterializedTable, read_spark: bool = True) -> set[str]:
        storage = table.storage
        locations = {storage.location} | {p.location for p in storage.partitions}
        if read_spark and self.exists(table):
            locations.add(table_facts(self.spark, table.quoted).location or "")
            if table.partition_keys and storage.catalog_partitions:
                locations |= set(partition_locations(self.spark, table.quoted, table.partition_keys).values())
        return {same_path(location) for location in locations if location}


def _within(path: str, referenced: set[str]) -> bool:
    """A version folder some reference points at or into."""
    path = same_path(path)
    return any(ref == path or ref.startswith(path + "/") for ref in referenced)


def same_path(location: str) -> str:
    """A location as Spark and Hadoop spell it alike (file:/x, file:///x/ → file:/x)."""
    return location.replace("file:///", "file:/").rstrip("/")


def data_locations(storage: Storage) -> tuple[str, ...]:
    """The folders a table's published data files lie in: its version's, and its partitions' elsewhere."""
    return (storage.location, *(p.location for p in storage.partitions))
