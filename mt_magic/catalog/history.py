"""Every refresh, skip, failure and streaming batch of every table: one JSON-lines file per table in a
`history` folder in the store's folder.

An append per entry: the store's records do not grow and are not rewritten for it, a table's
history is read without reading the others', and it survives restarts. A table keeps its newest
`retention` entries (older ones are cut when the file has grown a tenth past that). A line a crash
cut short is skipped when read. File names are digests of the identifiers, never the names.

A table created again under a dropped one's name starts a history of its own: the earlier table's
file is kept beside it under the time it was set aside, and read only on request. Each entry also
names the incarnation it belongs to (`created`, when its table was created).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from filelock import FileLock

from mt_magic.catalog.jsonfile import beside_store

HISTORY_DIR = "history"
LEGACY_FILE = "history.jsonl"           # one file for all tables, as written before
DEFAULT_RETENTION = 10_000
_CHECK_EVERY = 100                      # appends between two looks at a file's length


class Trigger(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    INITIAL = "initial"
    CATCH_UP = "catch-up"
    CHANGE = "change"               # a CONTINUOUS table's sources changed: recomputed
    BATCH = "batch"                 # a streaming job's micro-batch
    BACKFILL = "backfill"


class Technique(StrEnum):
    """How a refresh brought the table up to date."""

    SKIP = "skip"                   # no source changed
    INCREMENTAL = "incremental"     # maintained from what the sources appended
    PARTITIONS = "partitions"       # the changed partitions, recomputed
    FULL = "full"                   # the whole query, recomputed
    STREAM = "stream"               # a streaming job's micro-batch


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
    lag_s: float | None = None      # the data's age when the entry ended (None: never refreshed)
    freshness_s: float | None = None
    reason: str | None = None       # why it ran as it did (a coalesced fire: into which)
    technique: Technique | None = None
    sources: dict[str, str] = field(default_factory=dict)   # source → what it did (appended 2 files, …)
    estimate: str | None = None     # what 'auto' weighed: each technique's expected bytes
    delta_rows: int | None = None   # an incremental refresh: rows read of the appended files
    delta_bytes: int | None = None  # … and their bytes
    jobs: int | None = None         # the Spark jobs the refresh ran (None over Spark Connect: not told)
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent deciding, running, recording
    created: str | None = None      # when the table was created: which of the tables of its name ran
    inserted: int | None = None     # rows the refresh put into the table (compactions aside) …
    deleted: int | None = None      # … and took out of it
    table_rows: int | None = None   # the rows the table holds after (None: not known)


class RefreshHistory:
    def __init__(self, store_path: str, retention: int = DEFAULT_RETENTION) -> None:
        self.folder, self._lock = beside_store(store_path, HISTORY_DIR)
        self.retention = retention
        self._appends: dict[str, int] = {}
        self._guard = threading.Lock()
        os.makedirs(self.folder, exist_ok=True)
        self._split_legacy(os.path.join(os.path.dirname(self.folder), LEGACY_FILE))

    def path(self, table: str) -> str:
        return os.path.join(self.folder, history_file_name(table))

    def record(self, entry: RefreshEntry) -> None:
        line = json.dumps(asdict(entry), sort_keys=True) + "\n"
        path = self.path(entry.table)
        with self._file_lock(path), open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
        with self._guard:
            count = self._appends.get(path, 0) + 1
            self._appends[path] = count % _CHECK_EVERY
        if count >= _CHECK_EVERY:
            self._trim(path)

    def set_aside(self, table: str) -> None:
        """A new table of the identifier starts: the history so far (a dropped table's) is kept apart."""
        path = self.path(table)
        with self._file_lock(path):
            if os.path.exists(path) and os.path.getsize(path):
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
                os.replace(path, f"{path.removesuffix('.jsonl')}.{stamp}.jsonl")

    def entries(self, table: str | None = None, limit: int | None = None, earlier: bool = False) -> list[dict]:
        """Newest first; of one table (its identifier) or of all tables, as they are now; `earlier` adds
        the histories of the tables dropped before."""
        if table is not None and not earlier:
            return _tail(self.path(table), limit)[::-1]
        digest = None if table is None else history_file_name(table).removesuffix(".jsonl")
        files = [os.path.join(self.folder, n) for n in os.listdir(self.folder) if n.endswith(".jsonl")
                 and (earlier or n.count(".") == 1) and (digest is None or n.split(".")[0] == digest)]
        merged = heapq.merge(*(_tail(f, limit)[::-1] for f in files), key=lambda e: e.get("finished", ""),
                             reverse=True)
        found = []
        for entry in merged:
            found.append(entry)
            if limit is not None and len(found) >= limit:
                break
        return found

    def _file_lock(self, path: str) -> FileLock:
        return FileLock(os.path.join(os.path.dirname(self.folder), ".locks",
                                     "history-" + os.path.basename(path) + ".lock"))

    def _trim(self, path: str) -> None:
        """Keep the newest `retention` entries once a tenth more have been written."""
        with self._file_lock(path):
            with open(path, encoding="utf-8") as handle:
                lines = handle.readlines()
            if len(lines) <= self.retention * 1.1:
                return
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.writelines(lines[-self.retention:])
            os.replace(tmp, path)

    def _split_legacy(self, legacy: str) -> None:
        """Entries of the one-file history, moved into each table's file once."""
        if not os.path.exists(legacy):
            return
        with self._lock:
            if not os.path.exists(legacy):
                return
            with open(legacy, encoding="utf-8") as handle:
                lines = handle.readlines()
            by_table: dict[str, list[str]] = {}
            for line in lines:
                entry = _parse(line)
                if entry is not None:
                    by_table.setdefault(entry.get("table", ""), []).append(line)
            for table, table_lines in by_table.items():
                with open(self.path(table), "a", encoding="utf-8") as handle:
                    handle.writelines(table_lines)
            os.unlink(legacy)


def matched_at(published_at: str | None, recent: Iterable[dict], checked: float | None = None) -> datetime | None:
    """When the table last matched its sources, the moment its data age counts from: its published
    version, or later the newest refresh or skip of the whole table (a skip found no source changed)
    or streaming batch in `recent` (newest first), or `checked` (epoch seconds: a running stream's, or
    this process's, last look that found nothing new)."""
    moments = [moment(published_at)] if published_at else []
    whole = next((e for e in recent if e.get("outcome") in ("SUCCEEDED", "SKIPPED")
                  and (e.get("trigger") == "batch" or not e.get("partitions"))), None)
    if whole is not None:
        moments.append(moment(whole["finished"]))
    if checked:
        moments.append(datetime.fromtimestamp(checked, UTC))
    return max(moments) if moments else None


def moment(text: str) -> datetime:
    """An entry's time, aware (entries written before times carried their offset are UTC)."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def history_file_name(table: str) -> str:
    """A table's history file, named by a digest of its identifier (never by the name itself)."""
    return hashlib.sha1(table.encode()).hexdigest()[:24] + ".jsonl"


def _parse(line: str) -> dict | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def _tail(path: str, limit: int | None) -> list[dict]:
    """The file's last `limit` entries (all without a limit), oldest first; with a limit only the
    file's end is read."""
    try:
        with open(path, "rb") as handle:
            if limit is None:
                data, partial = handle.read(), False
            else:
                handle.seek(0, os.SEEK_END)
                position, block, data = handle.tell(), 65536, b""
                while position > 0 and data.count(b"\n") <= limit:
                    step = min(block, position)
                    position -= step
                    handle.seek(position)
                    data = handle.read(step) + data
                    block *= 2
                partial = position > 0           # the first line read may be cut
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()[1 if partial else 0:]
    found: list[dict] = []
    for line in reversed(lines):
        entry = _parse(line)
        if entry is not None:
            found.append(entry)
            if limit is not None and len(found) >= limit:
                break
    return found[::-1]
