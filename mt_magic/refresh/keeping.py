"""Which source partitions a table keeps what it derives by: an aggregate's partials (a COUNT(DISTINCT …)'s
pairs, a top-N's rows) or a linear query's rows per partition of one source — two, for an aggregate
over two partitioned sources —, so that a rewritten partition is retracted instead of recomputing the
table; and whether what a manifest kept still fits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from mt_magic.incremental.below_join import below, kept_columns
from mt_magic.incremental.provenance import FILE, Provenance, by_file, keepable
from mt_magic.incremental.rules import Aggregate, DistinctCount, Linear, Rule, TopN
from mt_magic.refresh.provenance_state import Keeping
from mt_magic.storage.manifests import CARRIED, KeptRows, KeptState, Manifest

if TYPE_CHECKING:
    from mt_magic.refresh.choice import Reading

PARTITION_TYPES = (T.StringType, T.IntegerType, T.LongType, T.ShortType, T.ByteType, T.DateType)


def keeping_of(rule: Rule, readings: dict[str, Reading | str],
               materialized: Callable[[str], Any]) -> Keeping | None:
    """An aggregate (a COUNT(DISTINCT …), a top-N) over a partitioned plain source (read once) keeps its
    partials per partition of the first such source, and a linear query its rows (those of UNION ALL
    branches not reading it apart), so that a rewritten partition can be retracted. The partition's
    folder text is the column's value as text for string, whole-number and date columns. Over no such source, an unpartitioned materialized source (whose files keep their
    names in every version they are carried into) keeps them by its file: a retracted file's rows."""
    if type(rule) not in (Aggregate, DistinctCount, TopN, Linear):
        return None
    read = _aggregated(rule)
    once = {source: not isinstance(readings.get(source, ""), str) and read.count(source) == 1 for source in read}
    for index, source in enumerate(read):
        provenance = _partitioned(rule, index, readings, materialized) if once[source] else None
        if provenance is not None:
            return Keeping(source, provenance)
    if not all(map(by_file, rule.branches if isinstance(rule, Linear) else
                   [rule.ranked if isinstance(rule, TopN) else rule.select])):
        return None
    for index, source in enumerate(read):
        reading = readings.get(source)
        if once[source] and materialized(source) is not None and not reading.partition_columns and \
                FILE not in (name.lower() for name in reading.schema.fieldNames()) and keepable(rule, index):
            return Keeping(source, Provenance(index, FILE))
    return None


def _aggregated(rule: Rule) -> tuple[str, ...]:
    """The occurrences whose rows the rule keeps something of: an aggregate's own, not those the query
    above it reads whole (`beside`)."""
    return rule.aggregated if isinstance(rule, Aggregate) else rule.sources


def _partitioned(rule: Rule, index: int, readings: dict[str, Reading | str],
                 materialized: Callable[[str], Any]) -> Provenance | None:
    """Occurrence i's partition column, where what the rule derives can be kept by it: a plain source
    partitioned by a string, whole-number or date column."""
    reading, source = readings.get(rule.sources[index]), rule.sources[index]
    if reading is None or isinstance(reading, str) or not reading.partition_columns or \
            materialized(source) is not None or not (keepable(rule, index) or _padded_below(rule, index)):
        return None
    column = reading.partition_columns[0]
    field = next((f for f in reading.schema.fields if f.name.lower() == column.lower()), None)
    return Provenance(index, field.name) if field is not None and isinstance(field.dataType, PARTITION_TYPES) else None


def _padded_below(rule: Rule, index: int) -> bool:
    """The padded side of an aggregate's LEFT JOIN, its partials kept below the join (`below_join`)."""
    kept = below(rule, index) if type(rule) is Aggregate else None
    return kept is not None and kept.padded


def paired(keeping: Keeping, rule: Rule, readings: dict[str, Reading | str],
           materialized: Callable[[str], Any]) -> Keeping:
    """An aggregate over two partitioned sources (each read once) keeps its partials per pair of their
    partitions: both rewritten at once retract by partition (`Retraction.paired`). Not where the
    partials are kept below the joins (another source's change joins them again)."""
    if type(rule) is not Aggregate or below(rule, keeping.provenance.occurrence) is not None:
        return keeping
    read = _aggregated(rule)
    for index, source in enumerate(read):
        provenance = _partitioned(rule, index, readings, materialized) \
            if source != keeping.source and read.count(source) == 1 else None
        if provenance is not None:
            return Keeping(keeping.source, dataclasses.replace(keeping.provenance, paired=provenance), source)
    return keeping


def fits(rule: Rule, manifest: Manifest, keeping: Keeping | None) -> bool:
    """The kept state has the columns the rule's state has now (a rule's state may gain columns), and
    what is kept by source partition is kept by the partitions the table keeps it by now."""
    if isinstance(rule, Linear):
        return keeping is None or isinstance(manifest.kept, KeptRows) and \
            manifest.kept.fits(keeping.source, keeping.provenance)
    if isinstance(rule, TopN):
        return keeping is None or isinstance(manifest.kept, KeptState) and \
            manifest.kept.fits(keeping.source, keeping.provenance, rule.state_names)
    if not isinstance(rule, Aggregate):
        return True
    columns = [c[len(CARRIED):] if c.startswith(CARRIED) else c for c in manifest.state_columns]
    if columns != rule.state_columns:
        return False
    return keeping is None or isinstance(manifest.kept, KeptState) and \
        manifest.kept.fits(keeping.source, keeping.provenance, kept_columns(rule, keeping.provenance.occurrence))
