"""The MaterializedTable record: FLIP-435's CatalogMaterializedTable plus storage and lineage."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

from mt_magic.catalog.handlers import JobHandler, RefreshHandler, handler_document, handler_from_document
from mt_magic.errors import ValidationError
from mt_magic.sql.freshness import RefreshMode

SCHEMA_VERSION = 1


class RefreshStatus(StrEnum):
    INITIALIZING = "INITIALIZING"
    ACTIVATED = "ACTIVATED"
    SUSPENDED = "SUSPENDED"


class Outcome(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"             # no source changed since the table last matched them
    COALESCED = "COALESCED"         # a fire that waited behind a running refresh, merged into a later one


class RefreshStrategy(StrEnum):
    """How a CONTINUOUS table keeps up: Spark's streaming where it maintains the query correctly,
    else a batch recompute whenever a source's snapshot changed."""

    STREAMING = "incremental streaming"
    RECOMPUTE = "recompute on change"


INITIALIZING, ACTIVATED, SUSPENDED = RefreshStatus.INITIALIZING, RefreshStatus.ACTIVATED, RefreshStatus.SUSPENDED


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Column:
    name: str
    type: str                       # Spark's simpleString, e.g. 'decimal(10,2)'
    nullable: bool = True
    comment: str | None = None
    type_json: Any = None           # Spark's JSON form of the type, to rebuild it exactly
    computed: str | None = None     # expression of a computed column (stored, see README)


@dataclass(frozen=True)
class PartitionLocation:
    spec: dict[str, str]
    location: str


@dataclass(frozen=True)
class Storage:
    """Where the published data is: the table's version, and each partition's version."""

    root: str
    format: str
    location: str = ""
    partitions: tuple[PartitionLocation, ...] = ()
    owns_root: bool = True          # False when WITH ('path' = ...) named an existing folder
    # False: Spark discovers the partitions under `location` (the catalog holds none), so one
    # location change publishes them all; set for tables created over Spark Connect.
    catalog_partitions: bool = True


@dataclass(frozen=True)
class RefreshOutcome:
    """The last refresh, for DESCRIBE and the dashboard (history lives elsewhere)."""

    started_at: str
    duration_s: float
    outcome: Outcome
    rows: int | None = None
    partition: dict[str, str] = field(default_factory=dict)
    schedule_time: str | None = None
    error: str | None = None
    jobs: int | None = None         # the Spark jobs it ran (None: not told, over Spark Connect)
    phases: dict[str, float] = field(default_factory=dict)   # seconds: decide, run (and, in the history, record)
    inserted: int | None = None     # rows it put into the table (refresh.table_change) …
    deleted: int | None = None      # … and took out of it (None: not counted)

    @classmethod
    def from_document(cls, doc: dict) -> RefreshOutcome:
        return cls(**{**doc, "outcome": Outcome(doc["outcome"])})


@dataclass(frozen=True)
class Target:
    """What a refresh rewrites: the whole table, the partitions of one spec, or the partitions whose
    `key` is one of `values` (the partitions whose sources changed)."""

    spec: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    values: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        return not self.spec and self.key is None

    def matches(self, partition: Mapping[str, str]) -> bool:
        lowered = {k.lower(): v for k, v in partition.items()}
        return all(lowered.get(k.lower()) == v for k, v in self.spec.items()) and (
            self.key is None or lowered.get(self.key.lower()) in self.values)

    def describe(self) -> dict[str, str]:
        """The target as history and DESCRIBE show it: a spec, or key → the changed values."""
        return dict(self.spec) if self.key is None else {self.key: ", ".join(self.values)}


@dataclass(frozen=True)
class MaterializedTable:
    catalog: str
    database: str
    name: str
    columns: tuple[Column, ...]
    query_columns: tuple[str, ...]       # the query's output names, in query order
    definition_query: str
    original_query: str
    freshness: str                       # IntervalFreshness text, e.g. '1 HOUR'
    logical_refresh_mode: RefreshMode
    refresh_mode: RefreshMode
    refresh_status: RefreshStatus
    storage: Storage
    primary_key: dict | None = None      # {'name': ..., 'columns': [...]}
    watermark: dict | None = None        # {'column': ..., 'expression': ...}
    partition_keys: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    comment: str | None = None
    refresh_handler: RefreshHandler | None = None
    source_tables: tuple[str, ...] = ()
    refresh_strategy: RefreshStrategy | None = None      # CONTINUOUS tables only
    strategy_reason: str | None = None                   # why not streaming
    # The sources' snapshots when the whole table last matched them: source → {"digest": str | None,
    # "partitions": {value: digest}} (a None digest: the source's state cannot be determined).
    source_snapshot: dict[str, Any] = field(default_factory=dict)
    last_refresh: RefreshOutcome | None = None
    published_at: str | None = None      # when the version readers see was published (data age)
    consecutive_failures: int = 0        # failed runs (after retries) since the last success
    suspend_reason: str | None = None    # why the pipeline suspended the table itself
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    schema_version: int = SCHEMA_VERSION

    @property
    def identifier(self) -> str:
        return f"{self.catalog}.{self.database}.{self.name}"

    @property
    def quoted(self) -> str:
        return ".".join("`" + p.replace("`", "``") + "`" for p in (self.catalog, self.database, self.name))

    @property
    def dynamic_options(self) -> dict[str, str]:
        """Options of RESUME WITH (...), kept for the pipeline's refreshes."""
        return dict(self.refresh_handler.dynamic_options) if self.refresh_handler else {}

    @property
    def streams(self) -> bool:
        """A CONTINUOUS table kept by a streaming job (tables stored before strategies existed did)."""
        return self.refresh_mode == RefreshMode.CONTINUOUS and \
            self.refresh_strategy in (None, RefreshStrategy.STREAMING)

    @property
    def job(self) -> JobHandler | None:
        handler = self.refresh_handler
        return handler if isinstance(handler, JobHandler) else None

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name.lower() == name.lower()), None)

    def check_partition_spec(self, spec: dict[str, str]) -> dict[str, str]:
        """The spec of a REFRESH … PARTITION, its keys as the table spells them. Spec §4.3, stricter:
        keys must be partition keys, and of a string type."""
        keys = {k.lower(): k for k in self.partition_keys}
        unknown = [k for k in spec if k.lower() not in keys]
        if unknown:
            raise ValidationError("The partition spec contains unknown partition keys:\n\n"
                                  + "\n".join(unknown) + "\n\nAll known partition keys are:\n\n"
                                  + "\n".join(self.partition_keys))
        wrong = [k for k in spec if self.column(k).type != "string"]
        if wrong:
            raise ValidationError("Currently, refreshing materialized table only supports referring to "
                                  "char, varchar and string type partition keys. All specified partition "
                                  "keys in partition specs with unsupported types are:\n\n" + "\n".join(wrong))
        return {keys[k.lower()]: v for k, v in spec.items()}

    def formatter_options(self) -> dict[str, str]:
        """partition.fields.<col>.date-formatter options, by column."""
        prefix, suffix = "partition.fields.", ".date-formatter"
        return {k[len(prefix):-len(suffix)]: v for k, v in self.options.items()
                if k.startswith(prefix) and k.endswith(suffix)}

    def with_refresh(self, outcome: RefreshOutcome, **changes: Any) -> MaterializedTable:
        return self.evolve(last_refresh=outcome, **changes)

    def evolve(self, **changes: Any) -> MaterializedTable:
        return replace(self, updated_at=now_iso(), **changes)

    def to_document(self) -> dict:
        return json.loads(json.dumps({**asdict(self), "refresh_handler": handler_document(self.refresh_handler)}))

    @classmethod
    def from_document(cls, doc: dict) -> MaterializedTable:
        doc = dict(doc)
        doc["columns"] = tuple(Column(**c) for c in doc["columns"])
        storage = dict(doc["storage"])
        storage["partitions"] = tuple(PartitionLocation(**p) for p in storage["partitions"])
        doc["storage"] = Storage(**storage)
        if doc.get("last_refresh"):
            doc["last_refresh"] = RefreshOutcome.from_document(doc["last_refresh"])
        doc.pop("refresh_history", None)         # kept in the record before the history had its files
        doc["refresh_status"] = RefreshStatus(doc["refresh_status"])
        doc["refresh_handler"] = handler_from_document(doc.get("refresh_handler"))
        if doc.get("refresh_strategy"):
            doc["refresh_strategy"] = RefreshStrategy(doc["refresh_strategy"])
        for key in ("refresh_mode", "logical_refresh_mode"):
            doc[key] = RefreshMode(doc[key])
        for key in ("query_columns", "partition_keys", "source_tables"):
            doc[key] = tuple(doc[key])
        return cls(**doc)
