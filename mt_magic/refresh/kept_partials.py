"""The partials an aggregate keeps per source partition, written before the data they make.

A refresh of a table that keeps them first writes the partials of what it reads — the whole input
(a recompute), the appended rows, or the rewritten partitions' files now (a retraction) — per source
partition and group, into a staging folder; the table's state by group is then computed from them
(and, for a retraction, from the partials the rewritten partitions had, which it subtracts), and the
staged files are moved into the new version's state before it is published (`provenance_state`).

Where the partials are small (ONE_TASK_BYTES), an aggregate keeps no state by group beside them: it is
merged from all of them as they are read, in one task, as fast as the state itself would be read — and
the state's write, a third of the refresh, is saved (`Staged.apart`; TPC-H Q10: 38,000 customers' revenue
in 2 MB of partials, 0.3 s of a refresh after 0.1 % new orders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.below_join import below
from mt_magic.incremental.occurrences import Version
from mt_magic.config import SMALL_SOURCE_DEFAULT, SMALL_SOURCE_SIZE, parse_size
from mt_magic.incremental.merging import retracted
from mt_magic.incremental.provenance import (PARTITION, SIGN, appended_state, kept_state, merged_partitions,
                                             signed_state, subtracts)
from mt_magic.incremental.rules import Aggregate, TopN, above_only
from mt_magic.refresh.changes import SourceChange
from mt_magic.refresh.above_kept import Signed, signed_from
from mt_magic.refresh.relations import Relations
from mt_magic.refresh.same_rows import same_rows
from mt_magic.refresh.stacked_state import Stacked, stacked_files
from mt_magic.refresh.kept_below import KeptBelow
from mt_magic.refresh.provenance_state import (FILES_KEPT, Keeping, Retraction, Way, assemble, files_in,
                                             keep_previous, partition_of, state_files)
from mt_magic.spark.errors import spark_call
from mt_magic.spark.files import Files, Listing
from mt_magic.spark.frames import ONE_TASK_BYTES, in_one_task
from mt_magic.spark.local_writes import write_here
from mt_magic.spark.partition_folders import split_into_folders, splittable
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.manifests import KeptState, Manifest
from mt_magic.storage.versions import TableStorage

FORMAT = "parquet"


@dataclass
class Staged:
    """Partials written to `stage`, and the table's state by group to compute with them."""

    state_sql: str | None   # None: the partials written are those they replace (nothing to publish)
    stage: str | None       # None: no partials written (the kept ones all stay)
    schema: str
    keeping: Keeping
    previous: dict[str, tuple[str, ...]]    # the small sources' files read, kept beside the partials
    published: KeptState | None = None
    dropped: frozenset[str] = frozenset()
    dropped_paired: frozenset[str] = frozenset()    # kept by two sources: the second's partitions dropped
    kept: KeptState | None = None           # where they are, once placed
    apart: bool = True                      # the state by group written beside them (else merged as read)
    stacked: Stacked | None = None          # the published state's files the new one links (`stacked_state`)
    signed: Signed | None = None            # the new state as the old one with partials in and out


    def place(self, files: Files, version: str) -> None:
        """The staged partials moved into `version`, beside the published ones that still hold."""
        if self.stage is not None:
            unsplit = [path for path in files.listing(self.stage) if not partition_of(path, PARTITION)]
            if unsplit:
                split_into_folders(unsplit, self.keeping.provenance.columns)
        folder = assemble(files, self.published, version, self.stage, set(self.dropped), self.dropped_paired)
        self.kept = KeptState(self.keeping.source, self.keeping.provenance, folder, self.schema,
                              keep_previous(files, version, self.previous))


class KeptPartials:
    def __init__(self, spark: Any, storage: TableStorage) -> None:
        self.spark = spark
        self.storage = storage
        self.below = KeptBelow(self)

    def whole(self, table: MaterializedTable, rule: Aggregate | TopN, keeping: Keeping, relations: Relations) -> Staged:
        """A recompute: the whole input's partials, and the state merged from them."""
        kept = below(rule, keeping.provenance.occurrence)
        if kept is not None:
            return Staged(*self.below.whole(table, rule, kept, keeping, relations), keeping, {})
        names = relations.names
        stage, schema = self.stage(table, relations, kept_state(rule, keeping.provenance,
                                                                lambda i: names.name(i, Version.NEW)),
                                   keeping.provenance.columns)
        added = relations.add("kept_added", self.read(relations, stage, schema))
        return Staged(merged_partitions(rule, added), stage, schema.json(), keeping, _small(table, rule, keeping, relations),
                      apart=self._apart(rule, {}, [], stage))

    def change(self, table: MaterializedTable, rule: Aggregate | TopN, keeping: Keeping, manifest: Manifest,
               old: str | None, appended: set[str], retraction: Retraction | None, relations: Relations) -> Staged:
        """The state after the change: appended rows' partials added, or the rewritten partitions'
        partials before subtracted and their partials now added (`old`, the state by group; None where
        none was kept: merged again from the partials)."""
        names, published = relations.names, manifest.kept
        if not appended and retraction is None:     # only what the query above reads changed: it stays
            return self.kept(table, rule, keeping, published, old, relations)
        kept = below(rule, keeping.provenance.occurrence)
        if kept is not None:
            state_sql, stage, schema, dropped = self.below.change(table, rule, kept, keeping, manifest, old, appended,
                                                                  retraction, relations)
            if state_sql is None:
                return self._as_kept(table, rule, keeping, published, old, relations, stage, schema, {})
            return Staged(state_sql, stage, schema, keeping, {}, published, frozenset(dropped))
        by_partition = state_files(self.storage.files, published.folder)
        previous = _small(table, rule, keeping, relations)
        if retraction is not None and retraction.way is Way.DIFFED:
            return self._diffed(table, rule, keeping, old, published, retraction, relations, previous, by_partition)
        if retraction is None:
            crowded, merging = self.crowded(relations, published, by_partition)
            stage, schema = self.stage(table, relations, appended_state(rule, keeping.provenance, appended,
                                                                         names.name, merging), keeping.provenance.columns, split=True)
            added = relations.add("kept_added", self.read(relations, stage, schema))
            if not crowded and old is not None:     # (partials that subtract: an append may take rows away, `merging`)
                apart, stacked = self._apart(rule, by_partition, [], stage), None
                if apart and isinstance(rule, Aggregate):
                    alone = retracted(rule, added, None, None) if subtracts(rule) else merged_partitions(rule, added)
                    with relations.query(alone) as frame:
                        written = spark_call(lambda: frame.schema, f"Refreshing {table.identifier}")
                    stacked = stacked_files(self.storage.files, rule, manifest, sorted(self.storage.files.listing(stage)),
                                            written)
                columns = ", ".join(rule.state_columns)
                both = f"(SELECT {columns} FROM {old} UNION ALL SELECT {columns} FROM {added}) AS both"
                state_sql = alone if stacked is not None else \
                    retracted(rule, old, added, None) if subtracts(rule) else merged_partitions(rule, both)
                signed = None if stacked else signed_from(self.storage.files, table, rule, manifest, old, added, None)
                return Staged(state_sql, stage, schema.json(), keeping, previous, published, apart=apart,
                              stacked=stacked, signed=signed)
            rewritten, paired = crowded, frozenset[str]()
        else:
            rewritten, paired = set(retraction.partitions), frozenset(retraction.paired)
            terms = _retracted_terms(rule, keeping, retraction, relations)
            stage, schema = self.stage(table, relations, " UNION ALL ".join(terms), keeping.provenance.columns) \
                if terms else (None, _schema(published.schema))
            if stage is not None and self.same(table, rule, relations, stage, schema.json(), published.schema,
                                               files_in(by_partition, rewritten, paired), keeping.provenance.columns):
                return self._as_kept(table, rule, keeping, published, old, relations, stage, schema.json(), previous)
            added = relations.add("kept_added", self.read(relations, stage, schema)) if stage is not None else None
        gone = files_in(by_partition, rewritten, paired)
        if added is None and not gone:      # the partitions held no partials and hold none now
            return self._as_kept(table, rule, keeping, published, old, relations, None, published.schema, previous)
        if subtracts(rule) and old is not None:
            removed = relations.add("kept_removed", in_one_task(self.kept_files(relations, published.schema, gone),
                                                                _size(by_partition, gone)))
            state_sql = retracted(rule, old, added, removed)
            signed = signed_from(self.storage.files, table, rule, manifest, old, added, removed)
        else:
            state_sql, signed = self._merged(rule, relations, published, by_partition, gone, added), None
        return Staged(state_sql, stage, schema.json(), keeping, previous, published, frozenset(rewritten), paired,
                      apart=self._apart(rule, by_partition, gone, stage), signed=signed)

    def kept(self, table: MaterializedTable, rule: Aggregate | TopN, keeping: Keeping, published: KeptState,
             old: str | None, relations: Relations) -> Staged:
        """The state as it is, the partials all kept: only what the query above the aggregate reads
        changed (`rules.above_only`)."""
        state_sql = f"SELECT * FROM {old}" if old is not None else \
            self._merged(rule, relations, published, state_files(self.storage.files, published.folder), [], None)
        return Staged(state_sql, None, published.schema, keeping, _small(table, rule, keeping, relations), published,
                      apart=old is not None)

    def _merged(self, rule: Aggregate | TopN, relations: Relations, published: KeptState,
                by_partition: dict[str, Listing], gone: list[str], added: str | None) -> str:
        """The state by group merged from the kept partials but those `gone`, and those `added` (partials
        that subtract may hold rows taken away: a group whose rows reach zero is gone, `retracted`)."""
        paths = sorted({path for listing in by_partition.values() for path in listing} - set(gone))
        others = relations.add("kept_others", in_one_task(self.kept_files(relations, published.schema, paths),
                                                          _size(by_partition, paths)))
        if subtracts(rule):
            return retracted(rule, others, added, None)
        columns = ", ".join(rule.state_columns)
        union = f"SELECT {columns} FROM {others}" + (f" UNION ALL SELECT {columns} FROM {added}" if added else "")
        return merged_partitions(rule, f"({union}) AS partials")

    def _apart(self, rule: Aggregate | TopN, by_partition: dict[str, Listing], gone: list[str],
               stage: str | None) -> bool:
        """Whether the state by group is written beside the partials: not for an aggregate whose partials
        (the kept ones but those `gone`, and those staged) are small (see the module docstring)."""
        if not isinstance(rule, Aggregate):
            return True
        staged = sum(size for size, _ in self.storage.files.listing(stage).values()) if stage is not None else 0
        kept = _size(by_partition, [path for listing in by_partition.values() for path in listing if path not in gone])
        return staged + kept > ONE_TASK_BYTES

    def _as_kept(self, table: MaterializedTable, rule: Aggregate | TopN, keeping: Keeping, published: KeptState,
                 old: str, relations: Relations, stage: str | None, schema: str,
                 previous: dict[str, tuple[str, ...]]) -> Staged:
        """Partials staged equal to those they replace (or none staged, none replaced): nothing to publish
        — unless what the query above the aggregate reads changed, computed again over the state as kept
        (the stage unused)."""
        if all(relations.changes[s].change is SourceChange.UNCHANGED for s in above_only(rule)):
            return Staged(None, stage, schema, keeping, previous)
        self.storage.remove(stage)
        return self.kept(table, rule, keeping, published, old, relations)

    def same(self, table: MaterializedTable, rule: Aggregate | TopN, relations: Relations, stage: str, schema: str,
             kept_schema: str, replaced: list[str], by: Sequence[str] = (PARTITION,)) -> bool:
        """The partials staged for the rewritten partitions are the kept ones they replace (`same_rows`:
        an aggregate's floating partials within a rounding)."""
        written = sorted(self.storage.files.listing(stage))
        floating = [f.name for f in _schema(schema).fields if isinstance(f.dataType, (T.DoubleType, T.FloatType))]
        return same_rows(FORMAT, written, replaced, lambda: (
            self.kept_files(relations, schema, written, by),
            self.kept_files(relations, kept_schema, replaced, by)), f"Refreshing {table.identifier}",
            [c for c in floating if c in rule.partial_columns] if isinstance(rule, Aggregate) else ())

    def crowded(self, relations: Relations, published: KeptState,
                by_partition: dict[str, Any]) -> tuple[set[str], str | None]:
        """Appended rows add a file to each partition they reach; a partition's files past FILES_KEPT
        are merged into one as they are added to (the state does not grow with every append): those
        partitions, and their kept partials (with their partition) to merge, if any."""
        crowded = {partition for partition, listing in by_partition.items() if len(listing) >= FILES_KEPT}
        if not crowded:
            return crowded, None
        return crowded, relations.add("kept_crowded", self.kept_files(
            relations, published.schema, files_in(by_partition, crowded), published.provenance.columns))

    def _diffed(self, table: MaterializedTable, rule: Aggregate, keeping: Keeping, old: str | None, published: KeptState,
                retraction: Retraction, relations: Relations, previous: dict[str, tuple[str, ...]],
                by_partition: dict[str, Listing]) -> Staged:
        """A small source rewritten: the rows it gained and lost (its files now and its content kept,
        diffed), weighed +1 and -1, joined with the others in one pass; their partials per source
        partition are added to the partitions they reach as one more file each (partials are sums:
        a partition's are what its files add up to), and to the state."""
        source, names = retraction.source, relations.names
        occurrence = rule.sources.index(source)
        now = relations.source_files(source, retraction.files)
        then = relations.source_files(source, tuple(sorted(self.storage.files.listing(published.previous[source]))))
        changed = relations.add("kept_changed", now.exceptAll(then).withColumn(SIGN, F.lit(1)).unionByName(
            then.exceptAll(now).withColumn(SIGN, F.lit(-1))))
        reading = lambda i: changed if i == occurrence else names.name(i, Version.NEW)    # noqa: E731
        stage, schema = self.stage(table, relations, signed_state(rule, keeping.provenance, reading, occurrence),
                                   keeping.provenance.columns, split=True)
        added = relations.add("kept_added", self.read(relations, stage, schema))
        state_sql = retracted(rule, old, added, None) if old is not None else \
            self._merged(rule, relations, published, by_partition, [], added)
        return Staged(state_sql, stage, schema.json(), keeping, previous, published,
                      apart=self._apart(rule, by_partition, [], stage))

    def stage(self, table: MaterializedTable, relations: Relations, sql: str,
              by: Sequence[str] = (PARTITION,), split: bool = False) -> tuple[str, T.StructType]:
        """The partials written to a new staging folder, by source partition (`by`: the columns naming
        it); their schema but those columns. `split`: few rows of many partitions, written as they
        come — read back as one file — and split into the partitions' folders as they are placed."""
        stage = self.storage.new_version(table)
        try:
            with relations.query(sql) as frame:
                schema = spark_call(lambda: frame.schema, f"Refreshing {table.identifier}")
                split = split and splittable(schema, stage)
                if not split or relations.read_here_only() is None or spark_call(lambda: write_here(
                        self.spark, frame, stage, FORMAT, {}, ()), f"Refreshing {table.identifier}") is None:
                    writer = frame.write.format(FORMAT).mode("error")
                    writer = writer if split else writer.partitionBy(*by)
                    spark_call(lambda: writer.save(stage), f"Refreshing {table.identifier}")
        except BaseException:
            self.storage.remove(stage)
            raise
        return stage, T.StructType([f for f in schema.fields if f.name not in by])

    def read(self, relations: Relations, stage: str, schema: T.StructType) -> Any:
        listing = self.storage.files.listing(stage)
        return in_one_task(relations.files(FORMAT, schema, sorted(listing)), sum(size for size, _ in listing.values()))

    @staticmethod
    def kept_files(relations: Relations, kept_schema: str, paths: list[str], by: Sequence[str] = ()) -> Any:
        """Kept partials; `by`: with the partition each came from (the columns naming it)."""
        schema = _schema(kept_schema)
        if by:
            schema = T.StructType([*(T.StructField(c, T.StringType()) for c in by), *schema.fields])
        return relations.files(FORMAT, schema, sorted(paths), tuple(by))

    @staticmethod
    def signed_files(relations: Relations, kept_schema: str, added: list[str], removed: list[str],
                     partials: list[str]) -> Any:
        """Kept partials of the `added` files and, negated, of the `removed` ones, as one relation: the
        change's partials, joined with the other sources once (for a rule whose partials all subtract)."""
        negated = [f"-{quote_identifier(name)} AS {quote_identifier(name)}" if name in partials else
                   quote_identifier(name) for name in _schema(kept_schema).fieldNames()]
        return KeptPartials.kept_files(relations, kept_schema, added).unionByName(
            KeptPartials.kept_files(relations, kept_schema, removed).selectExpr(*negated))


def _retracted_terms(rule: Aggregate | TopN, keeping: Keeping, retraction: Retraction, relations: Relations) -> list[str]:
    """The partials now of the retracted partitions: the kept source's rewritten partitions' files with
    the others as they are now; kept by two sources, also the second's rewritten partitions' files with
    the first's other files now (the pairs of neither are kept). A side with no files now adds none
    (a partition rewritten empty: what it held is only taken out)."""
    names, provenance = relations.names, keeping.provenance
    sides = [(provenance.occurrence, retraction.files, None)]
    if provenance.paired is not None:
        first, retracted = relations.changes[keeping.source].files, set(retraction.files)
        sides.append((provenance.paired.occurrence, retraction.paired_files,
                      (provenance.occurrence, tuple(f for f in first if f not in retracted))))
    terms = []
    for number, (occurrence, files, other) in enumerate(sides):
        if not files or other is not None and not other[1]:
            continue
        read = {occurrence: relations.add(f"retracted_{number}", relations.source_files(rule.sources[occurrence], files))}
        if other is not None:
            read[other[0]] = relations.add(f"retracted_rest_{number}", relations.source_files(rule.sources[other[0]], other[1]))
        terms.append(kept_state(rule, provenance, lambda i, read=read: read.get(i) or names.name(i, Version.NEW)))
    return terms


def _small(table: MaterializedTable, rule: Aggregate | TopN, keeping: Keeping,
           relations: Relations) -> dict[str, tuple[str, ...]]:
    """The sources besides the kept one whose content is kept too: read once, unpartitioned, at most
    'refresh.small-source.max-size' (their files as this refresh read them); a top-N keeps none (its
    rows are not diffed)."""
    if isinstance(rule, TopN):
        return {}
    limit = parse_size(table.options.get(SMALL_SOURCE_SIZE, SMALL_SOURCE_DEFAULT), SMALL_SOURCE_SIZE)
    return {source: relations.changes[source].files for source in dict.fromkeys(rule.sources)
            if source != keeping.source and rule.sources.count(source) == 1
            and not relations.readings[source].partition_columns and relations.changes[source].total_bytes <= limit}


def _size(by_partition: dict[str, Listing], paths: list[str]) -> int:
    """The bytes of those kept files."""
    sizes = {path: size for listing in by_partition.values() for path, (size, _) in listing.items()}
    return sum(sizes[path] for path in paths)


def _schema(text: str) -> T.StructType:
    return T.StructType.fromJson(json.loads(text))
