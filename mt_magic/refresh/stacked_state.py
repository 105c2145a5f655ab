"""An aggregate's state by group kept as files stacked up, where an append brings only new groups.

Appended rows whose groups are none of the state's — keys that grow with time, TPC-H's new orders by
order key — leave every group of the state as it was: the new state is the old one's files and the
change's groups, written alone. They are linked into the new version's state beside the change's file
instead of merged with them and written again (TPC-H Q18 after 0.1 % new orders: its 1.5 million orders'
quantities, 1.4 s of a 2-core machine at scale 1). Told from the footers of the state's files and of the
change's partials: the range of the first key (a whole number, a date or a string) apart from the
state's, no NULL key among the new (NULL groups would meet). A state of FILES_KEPT files is merged into
one again by the next change, as kept partials are; on a disk this process cannot read, nothing is
stacked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from mt_magic.incremental.rules import Aggregate
from mt_magic.refresh.maintained import STATE_FORMAT
from mt_magic.refresh.provenance_state import FILES_KEPT
from mt_magic.spark.files import Files
from mt_magic.spark.footers import footer_summary
from mt_magic.storage.manifests import Manifest


@dataclass(frozen=True)
class Stacked:
    """The published state's files, linked into the new state beside the change's groups, and the
    first key's range in each (what the query above reads of them: `keyed_rows`)."""

    files: tuple[str, ...]
    key: T.StructField
    low: Any
    high: Any
    held: tuple[Any, Any]       # the published state's least and greatest key


def stacked_files(files: Files, rule: Aggregate, manifest: Manifest, added: list[str],
                  schema: T.StructType) -> Stacked | None:
    """The published state's files to link into the new state beside the change's groups (`added`:
    the change's partials' files; `schema`: the change's groups' as they would be written); None where
    they must be merged (a group of the change may be one of the state's, or their columns differ)."""
    if manifest.state is None or manifest.carried or manifest.state_format != STATE_FORMAT or not rule.key_columns \
            or _shape(schema) != _shape(T.StructType.fromJson(json.loads(manifest.state_schema))):
        return None
    old = sorted(path for path in files.listing(manifest.state) if path.endswith(".parquet"))
    if not old or len(old) >= FILES_KEPT:
        return None
    key = rule.key_columns[0]
    field = next((f for f in schema.fields if f.name == key), None)
    if field is None or not isinstance(field.dataType, _ORDERED) or \
            isinstance(field.dataType, T.StringType) and field.dataType.simpleString() != "string":
        return None
    now, then = _range([path for path in added if path.endswith(".parquet")], key), _range(old, key)
    if now is None or then is None or now[2] or not (now[1] < then[0] or now[0] > then[1]):
        return None
    return Stacked(tuple(old), field, now[0], now[1], (then[0], then[1]))


# Key types whose footer ranges tell groups apart: a float's NaN is no range's, an old timestamp's
# statistics are not kept, a collation's equal strings ('a', 'A') are bytes apart.
_ORDERED = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DateType, T.StringType)


def _shape(schema: T.StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _range(paths: list[str], column: str) -> tuple[Any, Any, int] | None:
    """A column's least and greatest value in these files and its NULLs; None where not known."""
    summary = footer_summary(STATE_FORMAT, paths)
    return None if summary is None else summary[1].get(column)
