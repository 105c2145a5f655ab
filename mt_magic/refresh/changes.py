"""What changed in a table's sources since the table last matched them: snapshots of their files.

A source's snapshot is a digest of its data files (path, size, modification time): for a
materialized table, the files of its published versions as the catalog store names them; for any
other table, the files under its folder. A source whose state cannot be told from files (a view, a
JDBC table) has no digest, and a table reading it is recomputed at every trigger. Where Spark's
optimizer proves that an output partition reads only the same partition of a source, the snapshot
keeps a digest per source partition too, so that only changed partitions are recomputed. Against
the manifest of the files behind the published data, each source is unchanged, appended (every old
file still there, unchanged, plus new ones) or rewritten (anything else: a file gone or changed, an
INSERT OVERWRITE, a compaction).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import unquote

from mt_magic.catalog.model import MaterializedTable
from mt_magic.catalog.store import CatalogStore
from mt_magic.errors import MaterializedTableError
from mt_magic.spark.analysis import QueryAnalyzer
from mt_magic.spark.tables import TableFacts, table_facts, tables_facts
from mt_magic.spark.commands import alongside
from mt_magic.spark.files import WRITE_WAIT_S, Files, Listing
from mt_magic.storage.linked import version_relative
from mt_magic.sql.statements import quote_identifier
from mt_magic.sql.volatile import volatile_calls

FACTS_TTL_S = 30.0                 # how long a plain table's folder is taken as known
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"

Snapshot = dict[str, dict[str, Any]]     # source → {"digest", "column", "partitions"}


class Change(Enum):
    NONE = "none"
    PARTITIONS = "partitions"
    ALL = "all"


@dataclass(frozen=True)
class Comparison:
    change: Change
    key: str | None = None                 # the table's partition key of the changed values
    values: tuple[str, ...] = ()


@dataclass
class _Lineage:
    definition_query: str
    key: str | None = None
    columns: dict[str, str] = field(default_factory=dict)     # source → its partition column


def digest(listing: Listing) -> str:
    text = "\n".join(f"{path}\t{size}\t{mtime}" for path, (size, mtime) in sorted(listing.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def partition_digests(listing: Listing, column: str) -> dict[str, str]:
    """A digest per value of `column`, from the `column=value` folder each file lies in. Paths count
    from that folder on: a partition carried into a new version unchanged (linked) keeps its digest."""
    segment = re.compile(rf"/{re.escape(column)}=([^/]*)/", re.IGNORECASE)
    groups: dict[str, Listing] = {}
    for path, facts in listing.items():
        found = list(segment.finditer(path))
        value = unquote(found[-1].group(1)) if found else ""
        groups.setdefault(value, {})[path[found[-1].end():] if found else path] = facts
    return {value: digest(files) for value, files in groups.items()}


def compare(previous: Snapshot, current: Snapshot, volatile: bool) -> Comparison:
    """NONE when nothing changed; PARTITIONS with the changed values when every changed source is
    partitioned like the table; ALL otherwise (and whenever a state is unknown)."""
    if volatile or not previous or set(previous) != set(current) or \
            any(s["digest"] is None for s in current.values()):
        return Comparison(Change.ALL)
    changed = [name for name in current if current[name]["digest"] != previous[name]["digest"]]
    if not changed:
        return Comparison(Change.NONE)
    keys = {current[name].get("key") for name in changed}
    values: set[str] = set()
    for name in changed:
        before, now = previous[name].get("partitions") or {}, current[name].get("partitions") or {}
        if not now and not before:
            return Comparison(Change.ALL)
        values |= {v for v in before.keys() | now.keys() if before.get(v) != now.get(v)}
    if len(keys) != 1 or None in keys or not values or "" in values or NULL_PARTITION in values:
        return Comparison(Change.ALL)
    return Comparison(Change.PARTITIONS, keys.pop(), tuple(sorted(values)))


class SourceChange(Enum):
    UNCHANGED = "unchanged"
    APPENDED = "appended"
    REWRITTEN = "rewritten"
    UNKNOWN = "unknown"          # no manifest to compare with, or a source files cannot tell


@dataclass(frozen=True)
class SourceDelta:
    """One source since the published data was computed."""

    change: SourceChange
    added: tuple[str, ...] = ()     # the appended files
    kept: tuple[str, ...] = ()      # the files the published data read, where they are now
    added_bytes: int = 0
    total_bytes: int = 0            # the source's files now
    files: tuple[str, ...] = ()     # the source's files now
    replaced: tuple[int, int, int] = (0, 0, 0)    # a rewrite's files removed, files written, bytes written

    def describe(self) -> str:
        if self.change is SourceChange.APPENDED:
            return f"appended {_files(len(self.added))} ({self.added_bytes} bytes)"
        if self.change is SourceChange.REWRITTEN:
            removed, written, size = self.replaced
            return f"rewritten: {_files(removed)} removed, {written} written ({size} bytes)"
        return self.change.value


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


Relative = Callable[[str], str]


def classify(before: Listing | None, now: Listing | None, relative: Relative | None = None) -> SourceDelta:
    """`relative`: a materialized table's files are named from its version folder on, and only their
    sizes count (an incremental publish carries them, linked, into a new folder)."""
    if before is None or now is None:
        return SourceDelta(SourceChange.UNKNOWN, total_bytes=_bytes(now), files=tuple(sorted(now or ())))
    files = tuple(sorted(now))
    where = {path: path for path in now}
    if relative is not None:
        before = {relative(p): (size, 0) for p, (size, _) in before.items()}
        where = {relative(p): p for p in now}
        now = {relative(p): (size, 0) for p, (size, _) in now.items()}
    if any(now.get(path) != facts for path, facts in before.items()):
        removed = sum(1 for path, facts in before.items() if now.get(path) != facts)
        written = [facts[0] for path, facts in now.items() if before.get(path) != facts]
        return SourceDelta(SourceChange.REWRITTEN, total_bytes=_bytes(now), files=files,
                           replaced=(removed, len(written), sum(written)))
    kept = tuple(sorted(where[p] for p in before))
    added = sorted(set(now) - set(before))
    if not added:
        return SourceDelta(SourceChange.UNCHANGED, kept=kept, total_bytes=_bytes(now), files=files)
    return SourceDelta(SourceChange.APPENDED, tuple(where[p] for p in added), kept,
                       sum(now[p][0] for p in added), _bytes(now), files)


def _bytes(listing: Listing | None) -> int:
    return sum(size for size, _ in (listing or {}).values())


def deltas(before: dict[str, Listing | None] | None, now: dict[str, Listing | None],
           relatives: dict[str, Relative] | None = None) -> dict[str, SourceDelta]:
    """Each source's change from the manifest to the listings taken now."""
    return {source: classify(None if before is None else before.get(source), listing,
                             (relatives or {}).get(source))
            for source, listing in now.items()}


def _quoted(identifier: str) -> str:
    return ".".join(quote_identifier(p) for p in identifier.split(".", 2))


def volatile(table: MaterializedTable) -> list[str]:
    return volatile_calls(table.definition_query)


def undeterminable(table: MaterializedTable) -> list[str]:
    """The sources whose state the last snapshot could not determine."""
    return [name for name, s in table.source_snapshot.items() if s.get("digest") is None]


class Snapshots:
    """Takes the snapshots of a table's sources; remembers plain tables' folders for a while and each
    definition's partition lineage for as long as the definition holds."""

    def __init__(self, spark: Any, files: Files, store: CatalogStore, analyzer: QueryAnalyzer) -> None:
        self.spark = spark
        self.files = files
        self.store = store
        self.analyzer = analyzer
        self._folders: dict[str, tuple[float, TableFacts | None]] = {}
        self._lineage: dict[str, _Lineage] = {}
        self._asking: tuple[frozenset[str], Future[dict[str, TableFacts]]] | None = None

    def begin(self, sources: Sequence[str]) -> None:
        """Send the catalog question of the next snapshot of these sources now, not waiting (a
        CREATE sends it as soon as it knows them; the files are still listed when the snapshot is
        taken). Asked already, it is not sent again."""
        asked = frozenset(source for source in sources if self._looks_up(source))
        pending = self._asking
        if asked and (pending is None or pending[0] != asked):
            self._asking = (asked, alongside(self.spark, tables_facts, self.spark, sorted(asked)))

    def _facts(self, asked: tuple[str, ...]) -> dict[str, TableFacts]:
        """Where the sources live: the question `begin` sent, else one asked now."""
        pending, self._asking = self._asking, None
        if pending is not None and pending[0] == frozenset(asked):
            return pending[1].result()
        return tables_facts(self.spark, asked)

    def take(self, table: MaterializedTable) -> tuple[Snapshot, dict[str, Listing | None]]:
        """The sources' snapshot (digests, for the record) and the listings it was taken from (for
        the manifest beside the data)."""
        lineage = self.lineage(table)
        snapshot: Snapshot = {}
        listings: dict[str, Listing | None] = {}
        # Where the sources live: one catalog request per database, not one per source.
        asked = tuple(source for source in table.source_tables if self._looks_up(source))
        try:
            facts: dict[str, TableFacts | None] = dict(self._facts(asked)) if asked else {}
        except MaterializedTableError:      # a source gone: each is looked up alone, and says so
            facts = {}
        for source in table.source_tables:
            # When a plain source's folders last changed, taken before its files are listed: a job
            # writing into them starts and ends by changing them (`unsteady`, and a check that finds
            # the same files twice, between two overwrites of one day, tells that it was written between).
            changed = None if self.store.get(source) else self._changed(self.folders(source, facts.get(source)))
            listing = listings[source] = self.listing(source, facts.get(source))
            if listing is None:
                snapshot[source] = {"digest": None}
                continue
            column = lineage.columns.get(source.lower())
            snapshot[source] = {"digest": digest(listing), **({"folders": changed} if changed else {})}
            if column:
                snapshot[source].update(key=lineage.key, column=column,
                                        partitions=partition_digests(listing, column))
        return snapshot, listings

    def listing(self, source: str, facts: TableFacts | None = None) -> Listing | None:
        """The source's data files, or None when its state cannot be told from files (or the source
        is gone: the refresh that reads it says what is wrong). `facts`: the catalog's answer on
        where it lives, asked already."""
        locations = self.folders(source, facts)
        if locations is None:
            return None
        listing: Listing = {}
        for location in locations:
            listing.update(self.files.listing(location))
        return listing

    def writing(self, table: MaterializedTable) -> list[str]:
        """The sources a Spark job is writing into now (a materialized source publishes atomically)."""
        return [source for source in self._plain(table.source_tables)
                if any(map(self.files.writing, self.folders(source) or []))]

    def unsteady(self, table: MaterializedTable, snapshot: Snapshot) -> list[str]:
        """The plain sources a Spark job writes into now, or whose folders changed since `snapshot`
        began (a job started, or ended, as it was taken)."""
        writing = self.writing(table)
        return writing + [source for source in self._plain(table.source_tables) if source not in writing
                          and snapshot.get(source, {}).get("folders", []) != self._changed(self.folders(source))]

    def _changed(self, folders: list[str] | None) -> list[int | None]:
        return [self.files.modified(folder) for folder in folders or []]

    def await_writes(self, sources: Sequence[str]) -> None:
        """Wait while a Spark job writes into one of the sources (see Files.await_writes)."""
        folders = [folder for source in self._plain(sources) for folder in self.folders(source) or []]
        self.files.await_writes(folders, WRITE_WAIT_S)

    def _plain(self, sources: Sequence[str]) -> list[str]:
        return [source for source in sources if self.store.get(source) is None]

    def folders(self, source: str, facts: TableFacts | None = None) -> list[str] | None:
        """Where a source's files are (None: its state cannot be told from files)."""
        try:
            return self._locations(source, facts)
        except MaterializedTableError:
            return None

    def looks_up(self, table: MaterializedTable) -> bool:
        """The next snapshot asks Spark's catalog where a source lives (a round trip each)."""
        return any(map(self._looks_up, table.source_tables))

    def _looks_up(self, source: str) -> bool:
        return self.store.get(source) is None and \
            time.monotonic() - self._folders.get(source, (0.0, None))[0] > FACTS_TTL_S

    def facts(self, source: str) -> TableFacts | None:
        """What the last snapshot learnt of a plain source (its data source, partition columns)."""
        return self._folders.get(source, (0.0, None))[1]

    def relatives(self, table: MaterializedTable) -> dict[str, Relative]:
        """How the files of each materialized source are named across its versions."""
        found = {}
        for source in table.source_tables:
            upstream = self.store.get(source)
            if upstream is not None:
                found[source] = version_relative(upstream.storage.root)
        return found

    def forget(self, table: MaterializedTable) -> None:
        """A source changed: its folder is looked up again at the next snapshot (it may have moved).
        What was learnt stays until then: another table's refresh over the same source may be choosing
        by the facts its own snapshot took."""
        for source in table.source_tables:
            if source in self._folders:
                self._folders[source] = (0.0, self._folders[source][1])

    def lineage(self, table: MaterializedTable) -> _Lineage:
        known = self._lineage.get(table.identifier)
        if known is not None and known.definition_query == table.definition_query:
            return known
        lineage = _Lineage(table.definition_query)
        for key in table.partition_keys:
            column = table.column(key)
            if column is None or column.type != "string":
                continue
            columns = self.analyzer.partition_lineage(table.definition_query, key)
            if columns:
                lineage.key, lineage.columns = key, columns
                break
        self._lineage[table.identifier] = lineage
        return lineage

    def _locations(self, source: str, asked: TableFacts | None) -> list[str] | None:
        upstream = self.store.get(source)
        if upstream is not None:       # a materialized table: its published versions
            storage = upstream.storage
            return [storage.location] + [p.location for p in storage.partitions]
        stamp, facts = self._folders.get(source, (0.0, None))
        if time.monotonic() - stamp > FACTS_TTL_S:
            try:
                facts = asked or table_facts(self.spark, _quoted(source))
            except MaterializedTableError:
                self._folders.pop(source, None)     # gone: nothing learnt of it holds
                raise
            self._folders[source] = (time.monotonic(), facts)
        folder = None if facts is None or facts.kind == "VIEW" else facts.location
        return [folder] if folder else None
