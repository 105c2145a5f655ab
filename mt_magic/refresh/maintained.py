"""What an incremental run leaves: the data readers see, and the state and partials it keeps."""

from __future__ import annotations

from dataclasses import dataclass

from mt_magic.catalog.model import MaterializedTable
from mt_magic.refresh.full import RefreshResult
from mt_magic.storage.manifests import KeptRows, KeptState, Manifest

STATE_FORMAT = "parquet"


@dataclass(frozen=True)
class Maintained:
    """An incremental run: what readers see now (as before when no row was added), the state kept."""

    result: RefreshResult
    state: str | None = None
    state_schema: str | None = None
    delta_rows: int | None = None           # the rows read of the appended files
    state_format: str = STATE_FORMAT
    kept: KeptState | KeptRows | None = None    # the partials (the rows) kept by source partition
    compacted: frozenset[str] = frozenset()     # published files whose rows it wrote again into fewer

    def manifest(self, listings: dict) -> Manifest:
        return Manifest(listings, self.state, self.state_schema, self.state_format, self.kept)


def as_published(table: MaterializedTable, manifest: Manifest | None, result: RefreshResult,
                 delta_rows: int | None = None) -> Maintained:
    """A run that publishes nothing: the data, its state and the partials kept stay what they are."""
    if manifest is None:
        return Maintained(result, delta_rows=delta_rows)
    return Maintained(result, manifest.state, manifest.state_schema, delta_rows, manifest.state_format, manifest.kept)

