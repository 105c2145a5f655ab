"""Every refresh of every table, in a JSON-lines file beside the store.

An append per refresh: the store's records do not grow and are not rewritten for it, and the
history survives restarts. A line a crash cut short is skipped when read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from mt_magic.catalog.jsonfile import beside_store

HISTORY_FILE = "history.jsonl"


class Trigger(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    INITIAL = "initial"
    CATCH_UP = "catch-up"
    CHANGE = "change"               # a CONTINUOUS table's sources changed: recomputed


@dataclass(frozen=True)
class Runner:
    """The process that ran a refresh."""

    host: str
    pid: int
    application_id: str


@dataclass(frozen=True)
class RefreshEntry:
    table: str
    trigger: Trigger
    schedule_time: str | None
    started: str
    finished: str
    outcome: str                    # catalog.model.Outcome
    rows: int | None
    runner: Runner
    partitions: dict[str, str] = field(default_factory=dict)
    error: str | None = None


class RefreshHistory:
    def __init__(self, store_path: str) -> None:
        self.path, self._lock = beside_store(store_path, HISTORY_FILE)

    def record(self, entry: RefreshEntry) -> None:
        line = json.dumps(asdict(entry), sort_keys=True) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)

    def entries(self, table: str | None = None, limit: int | None = None) -> list[dict]:
        """Newest first; of one table (its identifier) or of all."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                lines = handle.readlines()
        except FileNotFoundError:
            return []
        found: list[dict] = []
        for line in reversed(lines):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if table is None or entry.get("table") == table:
                found.append(entry)
                if limit is not None and len(found) >= limit:
                    break
        return found
