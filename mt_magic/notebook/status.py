"""What the dashboard shows of one table, read from the gateway at one moment."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from mt_magic.catalog.handlers import JobHandler, RefreshHandler, ScheduleHandler
from mt_magic.catalog.history import moment
from mt_magic.catalog.model import Outcome
from mt_magic.gateway import Gateway
from mt_magic.manager.pipelines import PipelineState
from mt_magic.sql.freshness import IntervalFreshness


@dataclass(frozen=True)
class Refresh:
    started_at: datetime
    duration_s: float
    rows: int | None
    outcome: Outcome
    target: str                        # 'whole table', 'ds=2024-01-02', 'batch'
    error: str | None = None
    lag_s: float | None = None         # the data's age when it ended
    technique: str | None = None       # skip, incremental, partitions, full, stream
    reason: str | None = None          # why it ran as it did
    jobs: int | None = None            # the Spark jobs it ran (None: not told, over Spark Connect)
    phases: dict[str, float] = field(default_factory=dict)    # seconds per phase: decide, run, record
    inserted: int | None = None        # rows it put into the table and took out of it (None: not counted)
    deleted: int | None = None


@dataclass(frozen=True)
class TableStatus:
    name: str
    identifier: str
    mode: str
    status: str                        # ACTIVATED / SUSPENDED / INITIALIZING
    refreshing: bool                   # a batch refresh runs right now
    freshness: timedelta
    freshness_text: str
    comment: str | None
    data_age: timedelta | None         # now − when the data last published was
    last: Refresh | None
    next_refresh: datetime | None
    handler: str
    error: str | None
    history: tuple[Refresh, ...] = ()
    sources: tuple[str, ...] = ()
    readers: tuple[str, ...] = field(default_factory=tuple)

    @property
    def stale(self) -> bool:
        return self.data_age is not None and self.data_age > self.freshness


def owner_text(owner: dict | None) -> str:
    """Who runs the store's pipelines, as the magic and the dashboard say it."""
    if owner is None:
        return "owned by no live process (the next statement's gateway takes it)"
    if owner["this_gateway"]:
        return "owned by this kernel (it runs the pipelines)"
    return (f"owned by {owner['kind']} pid {owner['pid']} on {owner['host']} ({owner['application_id']}); "
            "this kernel is its client")


def table_statuses(gateway: Gateway, now: datetime | None = None) -> list[TableStatus]:
    """Every materialized table in the store, ordered by identifier."""
    now = now or datetime.now(timezone.utc)
    states = sorted(gateway.status(), key=lambda s: s.table.identifier)
    readers: dict[str, list[str]] = {}
    for state in states:
        for source in state.table.source_tables:
            readers.setdefault(source, []).append(state.table.identifier)
    return [_status(s, tuple(readers.get(s.table.identifier, ())), now) for s in states]


def _status(state: PipelineState, readers: tuple[str, ...], now: datetime) -> TableStatus:
    table = state.table
    history = _history(state)
    published = state.up_to_date_as_of()
    last_failed = history[-1].error if history and history[-1].outcome == Outcome.FAILED else None
    error = table.suspend_reason or (table.job.failure if table.job else None) or last_failed
    return TableStatus(
        name=table.name, identifier=table.identifier, mode=table.refresh_mode,
        status=table.refresh_status, refreshing=state.refreshing,
        freshness=IntervalFreshness.parse(table.freshness).duration, freshness_text=table.freshness,
        comment=table.comment, data_age=now - published if published else None,
        last=history[-1] if history else None,
        next_refresh=state.next_refresh,
        handler=_handler_text(table.refresh_handler), error=error, history=tuple(history),
        sources=table.source_tables, readers=readers)


def _history(state: PipelineState) -> list[Refresh]:
    """The recent refreshes, skips, failures and micro-batches, oldest first."""
    return [_from_entry(e) for e in reversed(state.recent)]


def _from_entry(entry: dict) -> Refresh:
    started, finished = moment(entry["started"]), moment(entry["finished"])
    target = "batch" if entry["trigger"] == "batch" else \
        ", ".join(f"{k}={v}" for k, v in (entry.get("partitions") or {}).items()) or "whole table"
    return Refresh(started, (finished - started).total_seconds(), entry.get("rows"), Outcome(entry["outcome"]),
                   target, entry.get("error"), entry.get("lag_s"), entry.get("technique"), entry.get("reason"),
                   entry.get("jobs"), entry.get("phases") or {}, entry.get("inserted"), entry.get("deleted"))


def _handler_text(handler: RefreshHandler | None) -> str:
    if isinstance(handler, JobHandler) and handler.streaming_query_id:
        return f"streaming query {handler.streaming_query_id} on {handler.application_id}"
    if isinstance(handler, ScheduleHandler):
        return f"scheduler job {handler.scheduler_job_id} on {handler.application_id}"
    return ""
