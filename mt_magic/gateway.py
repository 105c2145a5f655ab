"""The gateway: the one entry point that executes statements (Flink's SQL gateway).

A facade over the manager: it wires the parts for one session and one catalog store, runs each
statement as plan → apply (a dry run stops after the plan), and offers the public methods the
notebook, the scheduler and scripts call. One gateway per store owns it and runs the pipelines;
the others are clients that send it the statements that change pipelines (see manager/ownership).
"""

from __future__ import annotations

import threading
import weakref
from datetime import tzinfo
from collections.abc import Mapping
from typing import Any

from mt_magic import config as cfg
from mt_magic import errors
from mt_magic.catalog.lease import Holder, OwnerKind
from mt_magic.catalog.model import MaterializedTable
from mt_magic.errors import MaterializedTableError, SparkError, mark_position
from mt_magic.manager.describe import describe_dict
from mt_magic.manager.leftovers import SWEEP_EVERY_S, clear_leftovers, sweep_retired
from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.ownership import Ownership, Role
from mt_magic.manager.follower import Follower
from mt_magic.manager.pipelines import PipelineState, Pipelines
from mt_magic.manager.takeover import Takeover
from mt_magic.manager.takeover_tables import TakeoverTables
from mt_magic.manager.plans import Planner
from mt_magic.manager.workspace import Workspace
from mt_magic.results import Result
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.spark.history_function import register_history_function
from mt_magic.spark.sessions import (active_session, keep_query_errors_in_spark_log, quiet_background_output,
                                    session_info)
from mt_magic.sql import statements as st
from mt_magic.sql.parser import Cell, parse_cell
from mt_magic.sql.tokens import line_column
from mt_magic.sql.statements import quote_identifier, sql_string

# Statements that change what runs for a table: a client sends them to the store's owner.
_OWNER_STATEMENTS = (st.CreateMaterializedTable, st.AlterSuspend, st.AlterResume, st.AlterQuery,
                     st.AlterSetFreshness, st.AlterSetRefreshMode, st.AlterSetOptions, st.AlterResetOptions,
                     st.DropMaterializedTable)


class Gateway:
    """Executes statements against one SparkSession (classic or Spark Connect) and one catalog store.

    The first Gateway on a store owns it: it puts every table back into Spark, rolls back creations
    a crash left INITIALIZING, and restarts the pipelines (SUSPENDED ones stay paused). A Gateway on a
    store a live process owns is a client; it takes over when that owner dies.
    """

    def __init__(self, spark: Any | None = None, catalog_store: str | None = None,
                 config: Mapping[str, str] | None = None, kind: OwnerKind = OwnerKind.KERNEL) -> None:
        spark = spark or active_session()
        if spark is None:
            raise MaterializedTableError(
                "No SparkSession: pass one, e.g. Gateway(SparkSession.builder.getOrCreate()).")
        keep_query_errors_in_spark_log()      # the errors mt_magic handles are said once, in its words
        self._ws = Workspace(spark, catalog_store, config)
        self.pipelines = Pipelines(self._ws, refresh=lambda identifier, at: self._refresh(
            self._ws.stored(identifier), at, {}))
        register_history_function(spark, self._ws.store.path)     # SELECT * FROM mt_refresh_history(…)
        self._planner = Planner(self._ws, self.pipelines, Lifecycle(self._ws, self.pipelines))
        self._takeover = Takeover(self.pipelines)
        self._takeover_tables = TakeoverTables(self.pipelines, catch_up=self._takeover.catch_up)
        self._follower = Follower(self._ws, self._takeover_tables)
        self._early_warnings: list[str] = []
        self._owning = threading.RLock()      # held while this gateway acts as the owner
        self._ownership = Ownership(self._ws.store.path, Holder.me(kind, session_info(spark).application_id),
                                    become_owner=self._own, become_client=self._disown,
                                    serve=self._serve, on_store_change=self._follower.follow,
                                    store_stamp=self._ws.store.stamp)
        self._ownership.start()
        self._closed = False
        _close_at_exit(self)      # a process that ends lets go of the store at once
        if self._ownership.role is Role.CLIENT:
            self._follower.open()
            self._takeover_tables.registered(self._ws.options.duration(cfg.OPEN_WAIT).total_seconds())

    @property
    def spark(self) -> Any:
        return self._ws.spark

    @property
    def store(self):
        """The catalog store (records of every materialized table)."""
        return self._ws.store

    # ============================================================ statements
    def execute(self, sql: str, dry_run: bool = False) -> list[Result]:
        """Every statement in order; the first failure raises and the rest do not run.

        With dry_run, each statement is planned (parsed and validated; Spark analyses the queries) but
        nothing is created, changed or refreshed.
        """
        return self.run(parse_cell(sql), dry_run)

    def run(self, cell: Cell, dry_run: bool = False) -> list[Result]:
        """`execute` of a cell read already (the magic reads it once, and asks it what it holds)."""
        results = []
        statements = cell.statements
        for number, statement in enumerate(statements, 1):
            try:
                results.append(self._translate_errors(lambda: self._run(statement, dry_run)))
            except MaterializedTableError as error:
                error = _in_cell(error, statement, cell.text)
                if len(statements) > 1:
                    error.statement = f"statement {number} ({_first_line(statement.text)})"
                raise error from None
        return results

    def _run(self, statement, dry_run: bool) -> Result:
        if not dry_run and isinstance(statement, _OWNER_STATEMENTS) and self._ownership.role is Role.CLIENT:
            return self._forward(statement)
        self._takeover_tables.named_in(statement.mentions)      # a table the new owner has not put back yet
        with self._owning, self._ws.analyzer.pinned():
            plan = self._planner.plan(statement)
            return Result.ok(f"Valid: {plan.summary()}.") if dry_run else plan.apply()

    # ============================================================ ownership
    def _own(self) -> None:
        with self._owning:
            self.pipelines.own(True)
            quiet_background_output(self.spark)     # background jobs never print into cells
            self._early_warnings = clear_leftovers(self._ws) + self._takeover.restore(self._takeover_tables)
            self.pipelines.every("mt_magic:retired-folders", SWEEP_EVERY_S, lambda: sweep_retired(self._ws))
            self._takeover_tables.registered(   # a small store is whole when opening returns
                self._ws.options.duration(cfg.OPEN_WAIT).total_seconds())

    def _disown(self) -> None:
        with self._owning:
            self.pipelines.own(False)
            self._takeover_tables.stop()
            self.pipelines.stop_all()

    def _forward(self, statement) -> Result:
        """A client's statement, run by the owner in the owner's session, named as here."""
        request = {"sql": statement.text, "current": list(self._ws.analyzer.current()),
                   "options": self._ws.options.explicit()}
        answer = self._ownership.send(request, self._ws.options.duration(cfg.CLIENT_TIMEOUT).total_seconds())
        self._follower.follow()
        if "error" in answer:
            error_type = getattr(errors, answer["error"]["type"], MaterializedTableError)
            raise error_type(answer["error"]["message"])
        return Result.from_document(answer["result"])

    def _serve(self, request: dict) -> dict:
        """Run a statement a client sent (the owner's mailbox thread)."""
        try:
            with self._ws.options.overlay(request["options"]), self._ws.analyzer.pinned(request["current"]):
                (result,) = self.execute(request["sql"])
            return {"result": result.to_document()}
        except MaterializedTableError as error:
            return {"error": {"type": type(error).__name__, "message": str(error)}}
        except Exception as error:   # noqa: BLE001 - the client gets it; the mailbox thread goes on
            return {"error": {"type": "ExecutionError", "message": spark_message(error)}}

    @property
    def restore_warnings(self) -> list[str]:
        """What could not be put back when this gateway took the store (tables, streams, leftovers);
        the part done in the background is added as it goes (see `restored`)."""
        return self._ws.store.warnings + self._early_warnings + self._takeover_tables.warnings

    def restored(self, timeout_s: float | None = None) -> bool:
        """Wait until this gateway has put every table back into Spark and, as the owner, restarted the
        streams and caught up missed fires (opening returns before; a statement waits for its tables)."""
        return self._takeover_tables.wait(timeout_s)

    def zone(self) -> tzinfo:
        """The session time zone (spark.sql.session.timeZone): schedules run and are shown in it."""
        return self._ws.zone()

    def owner(self) -> dict | None:
        """Who owns the store (kind, host, pid, application id) and whether it is this gateway."""
        holder = self._ownership.owner()
        if holder is None:
            return None
        return {"kind": str(holder.kind), "host": holder.host, "pid": holder.pid,
                "application_id": holder.application_id,
                "this_gateway": self._ownership.role is Role.OWNER}      # taken, and its pipelines up

    @staticmethod
    def _translate_errors(action):
        """Spark's errors, from any layer, reach the user once, as a SparkError."""
        try:
            return action()
        except SPARK_ERRORS as error:
            raise SparkError(spark_message(error)) from None

    # ======================================================= public methods
    def describe(self, name: str) -> dict:
        table = self._ws.load(self._ws.name(name))
        return describe_dict(table, self.pipelines.next_refresh(table), self.pipelines.technique(table),
                             self.pipelines.state(table).up_to_date_as_of())

    def refresh(self, name: str, schedule_time: str | None = None,
                partition: Mapping[str, str] | None = None) -> Result:
        """A manual refresh; with schedule_time, exactly what the scheduler does when it fires then."""
        return self._refresh(self._ws.load(self._ws.name(name)), schedule_time, dict(partition or {}))

    def _refresh(self, table: MaterializedTable, schedule_time: str | None, partition: dict[str, str]) -> Result:
        """The one path of a refresh, asked by a user or fired by the scheduler or a change detector."""
        self._takeover_tables.ensure((table.identifier, *table.source_tables))
        return self._translate_errors(lambda: self.pipelines.refresh(table, partition, schedule_time))

    def backfill(self, name: str, start: str, end: str) -> Result:
        """The scheduled refreshes of every schedule time in [start, end), oldest first (as
        `ALTER MATERIALIZED TABLE name BACKFILL FROM start TO end`)."""
        named = self._ws.name(name)
        text = (f"ALTER MATERIALIZED TABLE {'.'.join(map(quote_identifier, named.parts))} BACKFILL FROM "
                f"{sql_string(start)} TO {sql_string(end)}")      # what a client sends its store's owner
        statement = st.AlterBackfill(text, named, start=start, end=end, mentions=tuple(p.lower() for p in named.parts))
        return self._translate_errors(lambda: self._run(statement, dry_run=False))

    def history(self, name: str | None = None, limit: int | None = None, earlier: bool = False) -> list[dict]:
        """Refreshes newest first (of one table, or of all): table, created (which table of the name),
        trigger, schedule_time, started, finished, outcome, rows, partitions, error, technique and
        reason, what each source did, what 'auto' weighed (estimate), the rows and bytes an incremental
        refresh read of the appended files (delta_rows, delta_bytes), the rows it inserted into and
        deleted from the table and the rows the table holds after (inserted, deleted, table_rows), the
        Spark jobs it ran and the seconds of its phases (decide, run, record), and the runner (host,
        pid, application id). Of the tables as they are now; `earlier` adds those of tables dropped
        before (of the same name)."""
        identifier = ".".join(self._ws.identifier(self._ws.name(name))) if name else None
        return self.pipelines.history(identifier, limit, earlier)

    def progress(self, name: str) -> dict | None:
        """The running streaming job's latest progress (CONTINUOUS tables), else None."""
        table = self._ws.load(self._ws.name(name))
        progress = self.pipelines.progress(table.identifier)
        return None if progress is None else dict(vars(progress))

    def status(self) -> list[PipelineState]:
        """Every table of the store with what runs for it now: what dashboards show."""
        return [self.pipelines.state(t) for t in self._ws.store.list()]

    def refreshing(self, identifier: str) -> bool:
        """A batch refresh of the table is running now (manual or scheduled)."""
        return self.pipelines.refreshing(identifier)

    def close(self) -> None:
        """Stop the streaming jobs gracefully, the scheduler and any running refresh; statuses stay.
        The store's lease is released, so another process can own it at once."""
        if self._closed:
            return
        self._closed = True
        self._ownership.stop()
        self._takeover_tables.stop()
        with self._owning:
            self.pipelines.close()
        self._ownership.release()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_at_exit(gateway: Gateway) -> None:
    """Close the gateway when the interpreter ends, before it joins threads and shuts down the thread
    pools that Spark Connect's client needs to stop a streaming job (plain `atexit` runs too late:
    the pools refuse work, and a Connect listener's thread keeps the process alive)."""
    ref = weakref.ref(gateway)

    def close() -> None:
        alive = ref()
        if alive is not None:
            alive.close()
    threading._register_atexit(close)   # noqa: SLF001 - the hook concurrent.futures itself uses


def _in_cell(error: MaterializedTableError, statement, sql: str) -> MaterializedTableError:
    """Spark's error in a statement's query, placed as our parse errors are: line and column in the
    user's cell, the line, and a caret."""
    inner = statement.statement if isinstance(statement, st.Explain) else statement
    offset = inner.query_offset()
    if not isinstance(error, SparkError) or error.position is None or offset is None:
        return error
    line, column = line_column(sql, offset + error.position)
    placed = SparkError(mark_position(str(error), line, column, sql))
    placed.where, placed.summary = (line, column), str(error)
    return placed


def _first_line(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"
