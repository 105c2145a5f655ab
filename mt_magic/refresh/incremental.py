"""Incremental refresh: a table brought up to date from what its sources appended, by the rule
`mt_magic.incremental` finds for its query. Every relation a rule's SQL reads is exactly a set of files the
snapshot listed (a source's old files, its new ones, or only the appended ones), read alone with the
source's schema: what the result is computed from is what the manifest beside it says, whatever is written
meanwhile (a recompute reads a source Spark reads as listed by its name, and publishes only if it held
still). A linear rule's change is written and published as a new version that links the old files and adds
the new ones (tables reading this one see an append). An aggregate's state (partials per group) or a
top-N's (the ranked rows within N) is merged with the change's, the data its final projection (or, where the
query above it reads no key that flipped, `above_kept`, the data as it was): both published together, or
neither. Where the data has a row per group, the state rides in the data's own files (`refresh/carried`);
elsewhere it is written first, beside the new version's data (`_state`, a folder readers skip) — unless it
is merged from small partials kept by source partition as they are read (`refresh/kept_partials`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from mt_magic.catalog.model import MaterializedTable, Storage, Target
from mt_magic.incremental import merging
from mt_magic.incremental.occurrences import Version
from mt_magic.incremental.provenance import OTHER_BRANCHES, Branches, tagged_change, tagged_rows
from mt_magic.incremental.rules import Aggregate, Linear, TopN, above_only, takes_rows_away
from mt_magic.refresh.above_kept import flips
from mt_magic.refresh.carried import carries_state, hidden, in_data, partitioning_key, read_state, state_schema
from mt_magic.refresh.changes import SourceChange, SourceDelta
from mt_magic.refresh.keyed_rows import KeyedRows, keyed_rows
from mt_magic.refresh.kept_partials import KeptPartials, Staged
from mt_magic.refresh.key_bounds import Bounds
from mt_magic.refresh.kept_rows import RowsByPartition, fingerprints, merged
from mt_magic.refresh.maintained import STATE_FORMAT, Maintained, as_published
from mt_magic.refresh.provenance_state import Keeping, Retraction, Way, partition_of
from mt_magic.refresh.relations import Relations
from mt_magic.refresh.choice import Reading, Stateful, table_reading
from mt_magic.refresh.full import FAILED_TASKS_SETTLE_S, RefreshResult, job_group, shaped, shaped_sql
from mt_magic.refresh.taken_rows import staged, without
from mt_magic.spark.tables import refresh_listings
from mt_magic.spark.commands import alongside
from mt_magic.spark.errors import spark_call
from mt_magic.spark.frames import counting_rows, files_frame, listed_by_driver, observing
from mt_magic.spark.sessions import default_parallelism
from mt_magic.spark.local_writes import MAX_ROWS, write_here
from mt_magic.spark.files import Listing
from mt_magic.storage.compaction import files_for, files_to_compact
from mt_magic.storage.manifests import KeptRows, Manifest
from mt_magic.storage.formats import data_source_options, folder_writer
from mt_magic.storage.linked import data_carried, extended
from mt_magic.storage.versions import TableStorage

STATE_FOLDER = "_state"


class Maintainer:
    """The incremental runs of this process's tables, and the full ones that keep a state."""

    def __init__(self, spark: Any, storage: TableStorage) -> None:
        self.spark = spark
        self.storage = storage
        self.partials = KeptPartials(spark, storage)
        self.rows = RowsByPartition(spark, storage)

    def maintain(self, table: MaterializedTable, rule: Linear | Stateful, changes: dict[str, SourceDelta],
                 readings: dict[str, Reading], manifest: Manifest | None, keeping: Keeping | None = None,
                 retraction: Retraction | None = None, bounds: Bounds | None = None) -> Maintained:
        """The refresh from the change: `changes` has every source unchanged or appended (or the kept
        source's `retraction` partitions rewritten, or a source `above_only` reads rewritten), and for an
        aggregate `manifest` names the state the published data was computed with (and kept partials)."""
        above = above_only(rule)        # (read as they are now by the query above: their change needs nothing)
        appended = {s for s, d in changes.items() if d.change is SourceChange.APPENDED} - above
        if not appended and retraction is None and all(changes[s].change is SourceChange.UNCHANGED for s in above):
            return as_published(table, manifest, RefreshResult(table.storage, 0, 0.0, job_group(table)))
        with Relations(self.spark, table, "incremental") as relations:
            names = relations.naming(rule.sources, changes, readings, bounds=bounds or Bounds())
            if isinstance(rule, Linear):
                if keeping is not None:
                    return self._kept_rows(table, rule, changes, relations, keeping, manifest.kept, retraction)
                return self._append(table, rule, changes, appended, relations)
            old = relations.add("old_state", read_state(self.spark, table, manifest, self.storage.files)) \
                if not manifest.merged_from_partials else None
            if keeping is not None and isinstance(rule, (Aggregate, TopN)):
                started = time.monotonic()
                staged = self.partials.change(table, rule, keeping, manifest, old, appended, retraction, relations)
                if staged.state_sql is None:        # the rewritten partitions' partials are what they were
                    self.storage.remove(staged.stage)
                    return as_published(table, manifest, RefreshResult(
                        table.storage, 0, time.monotonic() - started, relations.group), relations.delta_rows())
                return self._stateful(table, rule, staged.state_sql, relations, staged=staged)
            within = None if takes_rows_away(rule, appended) else partitioning_key(table, rule, manifest)
            merged = merging.merged(rule, old, appended, names.name, within) if isinstance(rule, Aggregate) else \
                rule.merged(old, appended, names.name)
            return self._stateful(table, rule, merged or f"SELECT * FROM {old}", relations, None not in (within, merged))

    def recompute(self, table: MaterializedTable, rule: Linear | Stateful, changes: dict[str, SourceDelta],
                  readings: dict[str, Reading], listings: Future | None, verify: Callable[[], None],
                  keeping: Keeping | None = None) -> Maintained:
        """A whole refresh of what the snapshot listed (an aggregate's keeps its state). A source Spark reads as
        listed is read by its name, as the query run directly reads it, and `verify` raises before the publish when
        one changed meanwhile; the others are read from the files listed. `listings`: cached listings forgotten."""
        with Relations(self.spark, table, "full, from the files listed") as relations:
            names = relations.naming(rule.sources, changes, readings, by_name=True)
            if names.tables:
                relations.verify = verify
                listings.result() if listings is not None else \
                    refresh_listings(self.spark, tuple(rule.sources[i] for i in names.tables))
            if isinstance(rule, Linear) and keeping is not None:
                return self._rewritten(table, shaped(table, tagged_rows(rule, keeping.provenance, lambda i: names.name(
                    i, Version.NEW)), keeping), relations, keeping)
            if isinstance(rule, Linear):
                return self._rewritten(table, shaped(table, rule.full(names.name), None), relations)
            if keeping is not None and isinstance(rule, (Aggregate, TopN)):
                staged = self.partials.whole(table, rule, keeping, relations)
                return self._stateful(table, rule, staged.state_sql, relations, staged=staged)
            return self._stateful(table, rule, rule.state(names.name), relations)

    def _rewritten(self, table: MaterializedTable, query: str, relations: Relations,
                   keeping: Keeping | None = None) -> Maintained:
        """The `query`'s rows (shaped) as the table's; `keeping`: tagged by source partition, split by it."""
        started = time.monotonic()
        with relations.query(query) as frame:
            frame, rows = counting_rows(frame)
            version = self.storage.new_version(table)
            if keeping is None:
                self._write(table, frame, version)
            else:
                files = self.rows.write(table, frame, version)
        self.storage.files.mkdirs(version)      # an empty result may leave no folder at all
        published = self._publish(table, version, check=relations.verify)
        return Maintained(RefreshResult(published, rows(), time.monotonic() - started, relations.group),
                          kept=None if keeping is None else KeptRows(keeping.source, keeping.provenance, files))

    def _kept_rows(self, table: MaterializedTable, rule: Linear, changes: dict[str, SourceDelta],
                   relations: Relations, keeping: Keeping, kept: KeptRows, retraction: Retraction | None) -> Maintained:
        """A linear table that keeps its rows by source partition: the appended rows, or the rewritten partitions'
        rows now in place of theirs before, split by partition (small files merged past SMALL_FILES_KEPT)."""
        started, names = time.monotonic(), relations.names
        dropped: set[str] = set()
        if retraction is None:
            appended = {s for s, d in changes.items() if d.change is SourceChange.APPENDED}
            added, lost = tagged_change(rule, keeping.provenance, appended, names.name)
            reached = {partition_of(path, keeping.provenance.column) for path in changes[keeping.source].added}
            only = next(iter(reached)) if appended == {keeping.source} and len(reached) == 1 and not lost else None
            gone, dropped = staged(self.storage, table, lost, keeping, relations) if lost else (None, set())
            query = without(table, self.rows.rows_of(table, kept, dropped, relations), added, gone, keeping)
        elif retraction.way is Way.BRANCHES:        # the branches not reading the kept source, over their files now
            only, dropped = OTHER_BRANCHES, {OTHER_BRANCHES}
            query = shaped(table, tagged_rows(rule, keeping.provenance, lambda i: names.name(i, Version.NEW),
                                              Branches.OTHERS), keeping)
        else:
            only = retraction.partitions[0] if len(retraction.partitions) == 1 else None
            occurrence, dropped = keeping.provenance.occurrence, set(retraction.partitions)
            changed = relations.add("kept_changed", relations.source_files(rule.sources[occurrence], retraction.files))
            query = shaped(table, tagged_rows(rule, keeping.provenance, lambda i: changed if i == occurrence else
                                              names.name(i, Version.NEW), Branches.KEPT), keeping)
        taken = {n for p in dropped for n in kept.files.get(p, ())}
        stages = [self.storage.new_version(table)]
        try:
            with relations.query(query) as frame:
                if not rule.joins:      # an append's rows: a file per partition it reaches
                    frame = frame.coalesce(files_for(sum(d.added_bytes for d in changes.values()))) \
                        if retraction is None else self._by_cores(frame, changes[keeping.source].replaced[2])
                # a fingerprint is kept of a retraction's rows or of one partition's (see `fingerprints`)
                frame, rows, fingerprint = observing(frame, retraction is not None or only is not None)
                written = [self.rows.write(table, frame, stages[0], only)]
            unchanged = rows() == 0 and not dropped if retraction is None else \
                self.rows.same(table, written[0], stages[0], kept, dropped, fingerprint())
            if unchanged:
                return Maintained(RefreshResult(table.storage, 0, time.monotonic() - started, relations.group),
                                  delta_rows=relations.delta_rows(), kept=kept)     # nothing to publish
            files = self.rows.published(table) if retraction is None else {}    # an append's: their sizes
            crowded = self.rows.crowded(files, kept, written[0]) if retraction is None and not dropped else {}
            if crowded:
                stages.append(self.storage.new_version(table))
                written.append(self.rows.write(table, self.rows.compacted(table, crowded, files), stages[1]))
            compacted = {files[n][0] for names in crowded.values() for n in names}
            gone = taken | {n for names in crowded.values() for n in names}
            paths = {n: path for n, (path, _) in files.items()} if retraction is None else self.rows.located(table, kept)
            published = self._publish(table, extended(self.storage, table, stages, [paths[n] for n in gone]))
        finally:
            for stage in stages:
                self.storage.remove(stage)
        return Maintained(RefreshResult(published, rows(), time.monotonic() - started, relations.group),
                          delta_rows=relations.delta_rows(),
                          kept=KeptRows(keeping.source, keeping.provenance, merged(kept.files, gone, *written),
                                        fingerprints(kept, dropped, written[0], only, fingerprint())),
                          compacted=frozenset(compacted))

    def _append(self, table: MaterializedTable, rule: Linear, changes: dict[str, SourceDelta], appended: set[str],
                relations: Relations) -> Maintained:
        """The change's rows written as new files beside the published ones; a folder of the table
        holding too many small files has them rewritten into one (`storage.compaction`)."""
        started = time.monotonic()
        delta, taken = rule.delta(appended, relations.names.name)
        if taken is not None:       # rows taken away: the table's rows written again without them
            files = self.storage.published_files(table)
            published = relations.add("published", self._compacted(table, files)) if files else None
            return self._rewritten(table, without(table, published, delta, shaped(table, taken, None), None), relations)
        if delta is None:
            return Maintained(RefreshResult(table.storage, 0, time.monotonic() - started, relations.group))
        stages = [self.storage.new_version(table)]
        try:
            with relations.query(shaped(table, delta, None)) as frame:
                if not rule.joins:
                    frame = self._by_cores(frame, sum(d.added_bytes for d in changes.values()))
                frame, rows = counting_rows(frame)
                self._write(table, frame, stages[0])
            read = relations.delta_rows()
            if rows() == 0:
                return Maintained(RefreshResult(table.storage, 0, time.monotonic() - started, relations.group), delta_rows=read)
            rewritten = files_to_compact(self.storage.published_files(table))
            if rewritten:
                stages.append(self.storage.new_version(table))
                self._write(table, self._compacted(table, rewritten), stages[1])
            published = self._publish(table, extended(self.storage, table, stages, rewritten))
        finally:
            for stage in stages:
                self.storage.remove(stage)
        return Maintained(RefreshResult(published, rows(), time.monotonic() - started, relations.group),
                          delta_rows=read, compacted=frozenset(rewritten))

    def _by_cores(self, frame: Any, read_bytes: int) -> Any:
        """A filter's rows in no more files than their size or the cores need, not one per file read."""
        return frame.coalesce(max(files_for(read_bytes), default_parallelism(self.spark)))

    def _compacted(self, table: MaterializedTable, files: Listing) -> Any:
        """The rows of the table's `files`, to be written again in as few files as they need."""
        reading = table_reading(table)
        with listed_by_driver(self.spark, files):
            frame = files_frame(self.spark, reading.format, reading.schema, reading.options, tuple(sorted(files)),
                                reading.partition_columns)
        return frame.coalesce(files_for(sum(size for size, _ in files.values())))

    def _stateful(self, table: MaterializedTable, rule: Stateful, state_sql: str, relations: Relations,
                  touched: bool = False, staged: Staged | None = None) -> Maintained:
        """`touched`: the state SQL holds only the groups of the partitions the change touches;
        `staged`: partials kept per source partition, moved into the new version as it is published."""
        try:
            return self._state_and_data(table, rule, state_sql, relations, touched, staged)
        finally:
            if staged is not None and staged.stage is not None:
                self.storage.remove(staged.stage)

    def _state_and_data(self, table: MaterializedTable, rule: Stateful, state_sql: str, relations: Relations,
                        touched: bool, staged: Staged | None) -> Maintained:
        started = time.monotonic()
        if carries_state(table, rule):
            return self._carrying(table, rule, state_sql, relations, started, touched, staged)
        # the state by group written apart, or (`Staged.apart`) merged from the partials as they are read
        stage = self.storage.new_version(table) if staged is None or staged.apart else None
        flipped = flips(table, rule, staged.signed, relations) if stage is not None and staged else None   # (`above_kept`)
        try:
            with relations.query(state_sql if flipped is None else flipped.sql) as state:
                state = state if flipped is None else flipped.observed(state)
                schema = spark_call(lambda: state.schema, f"Refreshing {table.identifier}")
                if stage is not None:
                    spark_call(lambda: state.write.format(STATE_FORMAT).mode("error").save(stage),
                               f"Refreshing {table.identifier}")
            stacked = staged.stacked if staged is not None and stage is not None else None
            keyed = None if stacked is None else keyed_rows(     # (the change's groups: the files written)
                table, rule, stacked, relations.add("groups", relations.files(STATE_FORMAT, schema, sorted(
                    self.storage.files.listing(stage)))), relations, self.storage.published_files(table),
                lambda files: self._compacted(table, files))
            for path in stacked.files if stacked is not None else ():
                self.storage.files.link_tree(path, f"{stage}/{path.rsplit('/', 1)[-1]}")
            if keyed is None and flipped is not None and flipped.none():
                version, written = data_carried(self.storage, table), 0     # (its data as it was)
            else:
                merged = f"({state_sql}) AS mt_state" if stage is None else \
                    relations.add("state", self.spark.read.format(STATE_FORMAT).schema(schema).load(stage))
                result = keyed.sql if keyed is not None else shaped_sql(rule.output(
                    merged, table.query_columns, reading=relations.names.name), table.columns, table.identifier)
                with relations.query(result) as output:
                    frame, rows = counting_rows(output)
                    version = self.storage.new_version(table)
                    written = self._write(table, frame, version, small=_few(rule, keyed))
            for path in keyed.carried if keyed is not None else ():
                self.storage.files.link_tree(path, f"{version}/{path.rsplit('/', 1)[-1]}")
            read = relations.delta_rows()
            self.storage.files.mkdirs(version)
            state_folder = None if stage is None else f"{version}/{STATE_FOLDER}"
            if stage is not None:
                self.storage.files.rename(stage, state_folder)
            published = self._publish(table, version, check=relations.verify, staged=staged)
        except BaseException:
            self.storage.remove(stage)
            raise
        self.storage.written(stage)
        return Maintained(RefreshResult(published, rows() if written is None else written, time.monotonic() - started,
                                        relations.group), state_folder, schema.json(), read, kept=staged.kept if staged else None)

    def _carrying(self, table: MaterializedTable, rule: Aggregate, state_sql: str, relations: Relations,
                  started: float, touched: bool, staged: Staged | None) -> Maintained:
        """One write: the result's columns and the state's, in the same files; `touched`: of the
        partitions written, the others published as they are."""
        held = in_data(table, rule)
        names = hidden(rule, held)
        output_sql = rule.output(f"({state_sql}) AS mt_state", table.query_columns, names)
        with relations.query(shaped_sql(output_sql, table.columns, table.identifier,
                                        carried=list(names.values()))) as output:
            frame, rows = counting_rows(output)
            version = self.storage.new_version(table)
            written = self._write(table, frame, version, small=staged is not None and not staged.apart)
            # Asked after the write, not beside it (over Connect two requests of one plan at once can
            # lose the relations it names on the server), and beside the publish: one round trip fewer.
            schema = alongside(self.spark, spark_call, lambda: frame.schema, f"Refreshing {table.identifier}")
        read = relations.delta_rows()
        self.storage.files.mkdirs(version)
        key = table.partition_keys[0] if touched else None
        target = Target() if key is None else Target(key=key, values=tuple(
            dict(spec)[key] for spec, _ in self.storage.written_partitions(version, table.partition_keys)))
        published = self._publish(table, version, target, relations.verify, staged)
        return Maintained(RefreshResult(published, rows() if written is None else written, time.monotonic() - started,
                                        relations.group), version, state_schema(rule, held, table, schema.result()), read,
                          table.storage.format.lower(), staged.kept if staged else None)

    def _write(self, table: MaterializedTable, frame: Any, folder: str, small: bool = False) -> int | None:
        """The rows written into `folder`; `small`: few, written here where they can be (`local_writes`): their count."""
        options, context = data_source_options(table.options), f"Refreshing {table.identifier}"
        fmt, keys = table.storage.format, table.partition_keys
        try:
            written = spark_call(lambda: write_here(self.spark, frame, folder, fmt, options, keys), context) if small else None
            if written is None:
                spark_call(lambda: folder_writer(frame, fmt, options, keys).save(folder), context)
        except BaseException:
            self.storage.remove(folder, settle_s=FAILED_TASKS_SETTLE_S)
            raise
        return written

    def _publish(self, table: MaterializedTable, version: str, target: Target = Target(),
                 check: Callable[[], None] | None = None, staged: Staged | None = None) -> Storage:
        """`check` raises when what was read must not be published; `staged` partials move in first."""
        try:
            if staged is not None:
                staged.place(self.storage.files, version)
            if check is not None:
                check()
            published = self.storage.publish(table, version, target)
        except BaseException:
            self.storage.discard_version(table, version)
            raise
        self.storage.written(version)
        return published


def _few(rule: Stateful, keyed: KeyedRows | None) -> bool:
    """A global top-N's result, of at most its LIMIT's rows, is few enough to write here."""
    limit = keyed.limit if keyed is not None else rule.limit if isinstance(rule, Aggregate) else None
    return limit is not None and limit.isdigit() and int(limit) <= MAX_ROWS
