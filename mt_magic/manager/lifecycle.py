"""Applying validated changes to a table's definition: create, alter, options, drop.

Everything here runs after a plan has validated the statement; a failing CREATE undoes every step
it took and names the step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from mt_magic import config as cfg
from mt_magic.catalog.model import ACTIVATED, MaterializedTable
from mt_magic.errors import ExecutionError
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.workspace import Workspace
from mt_magic.results import Result
from mt_magic.spark.analysis import AnalyzedQuery
from mt_magic.spark.errors import error_text
from mt_magic.sql.freshness import CONTINUOUS, ModeDecision
from mt_magic.sql.volatile import volatile_note


class Lifecycle:
    def __init__(self, ws: Workspace, pipelines: Pipelines) -> None:
        self.ws = ws
        self.pipelines = pipelines

    def provision(self, table: MaterializedTable) -> Result:
        """CREATE's steps after validation; any failure undoes all of them and names the step."""
        identifier = table.identifier
        self.pipelines.new_history(identifier)
        self.ws.store.put(table)
        step = "creating the Spark table"
        continuous = table.refresh_mode == CONTINUOUS
        # A CONTINUOUS table is filled before CREATE returns, so a SELECT right after sees data.
        filled = continuous or self.ws.options.get(cfg.FULL_INITIALIZE) != "on-schedule"
        try:
            self.ws.storage.create(table, filled_next=filled)
            if filled:
                step = "running the initial refresh"
                table = self.pipelines.first_refresh(table)
            step = "starting the continuous refresh job" if continuous else "creating the refresh workflow"
            handler = self.pipelines.start(table, fresh=True)
            table = self.ws.store.update(identifier, lambda t: t.evolve(
                refresh_status=ACTIVATED, refresh_handler=handler))
        except BaseException as error:
            self.ws.storage.forget_deferred(table)
            self.pipelines.discard(table)
            detail = error_text(error)
            raise ExecutionError(f"Failed to create materialized table {identifier} while {step}: "
                                 f"{detail}") from None
        note = volatile_note(table.definition_query)
        return Result.ok(f"Created materialized table {identifier}, refresh mode {table.refresh_mode}, "
                         f"freshness {table.freshness}{self.pipelines.next_text(identifier)}."
                         + (f" Note: {note}." if note else ""))

    def evolve_query(self, table: MaterializedTable, query: str, analyzed: AnalyzedQuery,
                     appended: tuple, changes: dict) -> Result:
        """ALTER AS / CREATE OR ALTER: the new query, appended columns, and a fresh job if streaming."""
        updated = table.evolve(columns=table.columns + appended, original_query=query,
                               definition_query=analyzed.definition_query,
                               query_columns=tuple(f.name for f in analyzed.schema.fields),
                               source_tables=analyzed.sources, **changes)
        continuous = table.refresh_mode == CONTINUOUS
        if continuous:
            self.pipelines.stop(table)
        if appended:
            self.ws.storage.add_columns(updated, len(appended))
        handler = table.refresh_handler
        if continuous:   # §4.5: the new job starts from scratch; a SUSPENDED one will on RESUME
            self.pipelines.delete_checkpoints(table)
            handler = replace(table.job, restore_path=None, checkpoint_location=None) \
                if table.job and updated.streams else None
            if table.refresh_status == ACTIVATED:
                handler = (self.pipelines.stream_afresh(updated) if updated.streams
                           else self.pipelines.detect_changes(updated, paused=False, dynamic_options={}))
        # A new definition matches no snapshot: the next trigger recomputes all of it.
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            columns=updated.columns, original_query=updated.original_query,
            definition_query=updated.definition_query, query_columns=updated.query_columns,
            source_tables=updated.source_tables, refresh_handler=handler, source_snapshot={}, **changes))
        added = f", added {', '.join(c.name for c in appended)}" if appended else ""
        after = ("; a new continuous refresh job started from scratch" if continuous
                 and table.refresh_status == ACTIVATED else "; the next refresh uses it")
        return Result.ok(f"Altered the query of materialized table {table.identifier}{added}{after}.")

    def create_or_alter(self, table: MaterializedTable, query: str, analyzed: AnalyzedQuery,
                        appended: tuple, changes: dict, decision: ModeDecision | None) -> Result:
        result = self.evolve_query(table, query, analyzed, appended, changes)
        if decision is not None:
            self.pipelines.change_mode(self.ws.store.get(table.identifier), decision)
        return result

    def set_options(self, table: MaterializedTable, options: dict[str, str]) -> Result:
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            options={**t.options, **options}, source_snapshot=_snapshot_after(t, options)))
        return Result.ok(f"Set {len(options)} option(s) of {table.identifier}.")

    def reset_options(self, table: MaterializedTable, keys: tuple[str, ...]) -> Result:
        self.ws.store.update(table.identifier, lambda t: t.evolve(
            options={k: v for k, v in t.options.items() if k not in keys}, source_snapshot=_snapshot_after(t, keys)))
        return Result.ok(f"Reset {len(keys)} option(s) of {table.identifier}.")

    def drop(self, table: MaterializedTable) -> Result:
        self.pipelines.discard(table)
        return Result.ok(f"Dropped materialized table {table.identifier}.")


def _snapshot_after(table: MaterializedTable, keys: Iterable[str]) -> dict:
    """New options may write the data differently, so the next refresh runs whatever the sources did;
    the refresh policy (and the size of a small source) only picks how the next refresh runs, and the
    data stays as it matched them."""
    return table.source_snapshot if set(keys) <= {cfg.REFRESH_POLICY, cfg.SMALL_SOURCE_SIZE} else {}
