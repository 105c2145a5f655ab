"""Partials kept below an aggregate's joins (`incremental/below_join`), per source partition.

They are written before the data they make, as `kept_partials` writes partials per group, and joined
with the other sources into the state by group. The kept source's rows are read only where they
changed: appended rows add their partials, a rewritten partition's are taken out and written again;
a change of another source (a dimension corrected, appended to or rewritten whole) joins every kept
partial with it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.below_join import Below, below_partials, joined_partials
from mt_magic.incremental.occurrences import Version
from mt_magic.incremental.merging import retracted
from mt_magic.incremental.provenance import merged_partitions, subtracts
from mt_magic.incremental.rules import Aggregate
from mt_magic.refresh.provenance_state import Keeping, Retraction, Way, files_in, state_files
from mt_magic.refresh.relations import Relations
from mt_magic.storage.manifests import Manifest

if TYPE_CHECKING:
    from mt_magic.refresh.kept_partials import KeptPartials


class KeptBelow:
    """What `KeptPartials` does for partials kept below the joins (it writes and reads them)."""

    def __init__(self, partials: KeptPartials) -> None:
        self.partials = partials

    def whole(self, table: MaterializedTable, rule: Aggregate, kept: Below, keeping: Keeping,
              relations: Relations) -> tuple[str, str, str]:
        """A recompute: the kept source's partials staged; the state joined from them."""
        fact = relations.names.name(keeping.provenance.occurrence, Version.NEW)
        stage, schema, paths = self._write(table, rule, kept, keeping, relations, fact)
        return self._joined(rule, kept, relations, schema, paths), stage, schema

    def change(self, table: MaterializedTable, rule: Aggregate, kept: Below, keeping: Keeping, manifest: Manifest,
               old: str, appended: set[str], retraction: Retraction | None,
               relations: Relations) -> tuple[str | None, str | None, str, set[str]]:
        """The state after the change (None: the rewritten partitions' partials are what they were), the
        stage, its schema and the kept partitions it replaces: the
        kept source's appended rows' partials added (its rewritten partitions' taken out and written
        again), or — another source appended to or rewritten, or the kept source padded by a LEFT JOIN —
        every kept partial joined with the others again (the appended rows' partials among them)."""
        published = manifest.kept
        by_partition = state_files(self.partials.storage.files, published.folder)
        every = set(by_partition)
        if retraction is not None and retraction.way is Way.PARTITIONS:
            rewritten = set(retraction.partitions)
            changed = relations.add("kept_changed", relations.source_files(keeping.source, retraction.files))
            stage, schema, paths = self._write(table, rule, kept, keeping, relations, changed)
            replaced = files_in(by_partition, rewritten)
            if self.partials.same(table, rule, relations, stage, schema, published.schema, replaced):
                return None, stage, schema, rewritten
            if subtracts(rule) and not kept.padded:     # the partials now and, negated, before: joined once
                signed = relations.add("kept_signed", self.partials.signed_files(
                    relations, schema, paths, replaced, rule.partial_columns))
                state = retracted(rule, old, f"({self._joined_with(rule, kept, relations, signed, rows=True)}) AS signed",
                                  None)
            else:
                state = self._joined(rule, kept, relations, schema, files_in(by_partition, every - rewritten) + paths)
            return state, stage, schema, rewritten
        stage, schema, paths, crowded = None, published.schema, [], set()
        if keeping.source in appended:
            crowded, merging = self.partials.crowded(relations, published, by_partition)
            delta = relations.names.name(keeping.provenance.occurrence, Version.DELTA)
            stage, schema, paths = self._write(table, rule, kept, keeping, relations, delta, merging, split=True)
        if retraction is not None or appended - {keeping.source} or crowded or kept.padded:
            # (a merged day's are staged again; a padded side's change alone would leave padded rows)
            return self._joined(rule, kept, relations, schema, files_in(by_partition, every - crowded) + paths), \
                stage, schema, crowded
        columns = ", ".join(rule.state_columns)
        added = self._joined(rule, kept, relations, schema, paths, "kept_added")
        return merged_partitions(rule, f"(SELECT {columns} FROM {old} UNION ALL SELECT {columns} FROM ({added}) AS added) AS both"), \
            stage, schema, crowded

    def _write(self, table: MaterializedTable, rule: Aggregate, kept: Below, keeping: Keeping, relations: Relations,
               rows: str, merging: str | None = None, split: bool = False) -> tuple[str, str, list[str]]:
        """The partials of `rows` (the kept source's), merged with `merging`'s, staged: the stage, the
        partials' schema (JSON) and their files; `split`: an append's few rows of many partitions, split
        into their folders as they are placed (`KeptPartials.stage`)."""
        stage, schema = self.partials.stage(table, relations, below_partials(
            rule, kept, keeping.provenance.column, rows, merging), split=split)
        return stage, schema.json(), sorted(self.partials.storage.files.listing(stage))

    def _joined(self, rule: Aggregate, kept: Below, relations: Relations, schema: str, paths: list[str],
                what: str = "kept_every") -> str:
        """The state by group of the kept partials in `paths`, joined with the other sources now."""
        return self._joined_with(rule, kept, relations, relations.add(what, self.partials.kept_files(relations, schema, paths)))

    @staticmethod
    def _joined_with(rule: Aggregate, kept: Below, relations: Relations, partials: str, rows: bool = False) -> str:
        return joined_partials(rule, kept, partials, lambda i: relations.names.name(i, Version.NEW), rows)
