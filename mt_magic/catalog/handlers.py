"""Refresh handlers: what runs a table's pipeline, as Flink's RefreshHandler of each mode.

A FULL table has a workflow in the embedded scheduler; a CONTINUOUS table has a streaming job, or a
change detector in the scheduler where Spark cannot stream its query. The
store keeps either as a document with its `kind`; a table with no pipeline (INITIALIZING, or a
SUSPENDED table that became CONTINUOUS) has none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar


@dataclass(frozen=True)
class ScheduleHandler:
    """FULL mode: the cron workflow that fires the table's periodic refresh."""

    KIND: ClassVar[str] = "embedded-scheduler"
    workflow_name: str
    workflow_group: str
    scheduler_job_id: str
    cron_expression: str
    time_zone: str
    spark_master: str = ""
    application_id: str = ""
    dynamic_options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobHandler:
    """CONTINUOUS mode: the streaming job, its checkpoint (or savepoint while SUSPENDED) and the
    data version its batches write, with the failures and restarts it has seen."""

    KIND: ClassVar[str] = "streaming-query"
    streaming_query_id: str | None = None
    run_id: str | None = None
    job_name: str | None = None
    checkpoint_location: str | None = None
    output_mode: str | None = None
    run_version: str | None = None
    trigger_s: float | None = None
    spark_master: str = ""
    application_id: str = ""
    dynamic_options: dict[str, str] = field(default_factory=dict)
    restarts: int = 0
    failure: str | None = None
    failed_at: str | None = None
    restore_path: str | None = None


@dataclass(frozen=True)
class RecomputeHandler:
    """CONTINUOUS mode, recompute on change: the scheduler job that compares the sources' snapshots
    at every trigger and recomputes when one changed."""

    KIND: ClassVar[str] = "change-detector"
    scheduler_job_id: str
    trigger_s: float
    spark_master: str = ""
    application_id: str = ""
    dynamic_options: dict[str, str] = field(default_factory=dict)


RefreshHandler = ScheduleHandler | JobHandler | RecomputeHandler


def handler_document(handler: RefreshHandler | None) -> dict:
    """The stored and described form: its kind and the fields that have a value."""
    if handler is None:
        return {}
    return {"kind": handler.KIND, **{k: v for k, v in asdict(handler).items() if v is not None}}


def handler_from_document(doc: dict | None) -> RefreshHandler | None:
    """The stored form back; fields a later version dropped are ignored."""
    if not doc:
        return None
    kind = next((k for k in (ScheduleHandler, JobHandler, RecomputeHandler) if k.KIND == doc.get("kind")), None)
    if kind is None:
        raise ValueError(f"Unknown refresh handler kind {doc.get('kind')!r} in the catalog store.")
    known = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in doc.items() if k in known})
