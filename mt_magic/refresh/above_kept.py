"""Whether a change leaves the query above an aggregate as it was: it reads only which keys have rows
(`incremental.existence`), the tables beside it did not change, and no key gained its first rows or
lost its last. Counted as the new state is written (an observation: no pass of its own), with each
tested count as it was beside it, and the old state's rows from its files' footers: the new one holds
as many, none of them flipped. Then the table's data is carried into the new version as it is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.existence import flipping, tested_partials
from mt_magic.incremental.merging import retracted
from mt_magic.incremental.rules import Aggregate, TopN
from mt_magic.refresh.changes import SourceChange
from mt_magic.refresh.choice import Stateful
from mt_magic.refresh.maintained import STATE_FORMAT
from mt_magic.refresh.relations import Relations
from mt_magic.spark.files import Files
from mt_magic.spark.footers import footer_rows
from mt_magic.spark.frames import counting_where
from mt_magic.storage.manifests import Manifest


@dataclass(frozen=True)
class Signed:
    """A new state by group merged as the `old` one (a relation, of these `files`) with the partials
    `added` and `removed` (`merging.retracted`): what it was per group can be told beside it."""

    old: str
    added: str | None
    removed: str | None
    files: tuple[str, ...]


def signed_from(files: Files, table: MaterializedTable, rule: Aggregate | TopN, manifest: Manifest, old: str,
                added: str | None, removed: str | None) -> Signed | None:
    """The new state as the published one (`old`, read from the manifest's state) with these partials,
    where the query above the aggregate reads only which keys have rows (None elsewhere)."""
    if not isinstance(rule, Aggregate) or tested_partials(rule) is None:
        return None
    paths = (path for folder in manifest.state_paths(table.storage) for path in files.listing(folder))
    return Signed(old, added, removed, tuple(sorted(paths)))


@dataclass
class Flips:
    """The new state's SQL with each tested count as it was, and the keys that flipped as it is written."""

    sql: str
    condition: str
    columns: list[str]          # the state's own
    before: int                 # the old state's rows (a group each)
    counted: Callable[[], tuple[int | None, int | None]] | None = None

    def observed(self, frame: Any) -> Any:
        """The state to write, its rows and those that flipped counted as they are written."""
        frame, self.counted = counting_where(frame, self.condition)
        return frame.select(*self.columns)

    def none(self) -> bool:
        """No key flipped: as many keys as before (none lost its rows), none gained or flipped."""
        rows, flipped = self.counted() if self.counted is not None else (None, None)
        return rows == self.before and flipped == 0


def flips(table: MaterializedTable, rule: Stateful, signed: Signed | None, relations: Relations) -> Flips | None:
    """How the keys that flip are counted as the new state is written, where none flipping leaves the
    query above as it was; None where that is not known (not local footers: the query is computed)."""
    if not isinstance(rule, Aggregate) or signed is None or table.partition_keys or \
            any(relations.changes[s].change is not SourceChange.UNCHANGED for s in rule.sources[len(rule.aggregated):]):
        return None
    tested = tested_partials(rule)
    before = footer_rows(STATE_FORMAT, signed.files) if tested is not None and signed.files else None
    if before is None:
        return None
    return Flips(retracted(rule, signed.old, signed.added, signed.removed, tested), flipping(tested),
                 list(rule.state_columns), before)

