"""Plans of the statements on an existing materialized table: ALTER … SET / RESET, SUSPEND, RESUME,
REFRESH, BACKFILL, EXPLAIN and DROP; each checks the table's state first (spec §4.2–§4.6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mt_magic.catalog.model import ACTIVATED, SUSPENDED, MaterializedTable
from mt_magic.errors import StateError, TableNotFoundError, ValidationError
from mt_magic.manager.backfill import backfill, schedule_times
from mt_magic.manager.explain import explain_create, explain_refresh
from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.plans.definitions import check_policy, check_reserved, refresh_policy
from mt_magic.manager.plans.plan import Family, Plan, make_plan
from mt_magic.manager.schema import check_formatters
from mt_magic.manager.workspace import Workspace
from mt_magic.results import Result
from mt_magic.sql import statements as st
from mt_magic.sql.freshness import CONTINUOUS, IntervalFreshness
from mt_magic.storage.formats import RESERVED_OPTIONS


class Operations(Family):
    def __init__(self, ws: Workspace, pipelines: Pipelines, lifecycle: Lifecycle,
                 create: Callable[[st.CreateMaterializedTable, bool], tuple[Plan, MaterializedTable | None]]) -> None:
        super().__init__(ws, pipelines, lifecycle)
        self._create = create          # EXPLAIN CREATE explains the CREATE's plan

    def planners(self) -> dict[type, Callable[[Any], Plan]]:
        return {st.AlterSetFreshness: self._set_freshness, st.AlterSetRefreshMode: self._set_refresh_mode,
                st.AlterSetOptions: self._set_options, st.AlterResetOptions: self._reset_options,
                st.AlterSuspend: self._suspend, st.AlterResume: self._resume, st.AlterRefresh: self._refresh,
                st.AlterBackfill: self._backfill, st.Explain: self._explain, st.DropMaterializedTable: self._drop}

    def _set_freshness(self, statement: st.AlterSetFreshness) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "alter")
        decision = self.ws.decide_mode(IntervalFreshness.from_literal(statement.freshness),
                                       table.logical_refresh_mode)
        return make_plan(f"would set the freshness of {table.identifier} to {decision.freshness}, refresh "
                         f"mode {decision.refresh_mode}", lambda: self.pipelines.change_mode(table, decision))

    def _set_refresh_mode(self, statement: st.AlterSetRefreshMode) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "alter")
        decision = self.ws.decide_mode(IntervalFreshness.parse(table.freshness), statement.refresh_mode)
        return make_plan(f"would set the refresh mode of {table.identifier} to {decision.refresh_mode}",
                         lambda: self.pipelines.change_mode(table, decision))

    def _set_options(self, statement: st.AlterSetOptions) -> Plan:
        table = self.ws.load(statement.name)
        if not statement.options:
            raise ValidationError("ALTER MATERIALIZED TABLE SET does not support empty options.")
        options = {**table.options, **statement.options}
        check_reserved(table, options, list(statement.options))
        check_formatters(options, table.partition_keys, table.columns)
        refresh_policy(options)
        check_policy(table.evolve(options=options), self.pipelines.rule)
        return make_plan(f"would set {len(statement.options)} option(s) of {table.identifier}",
                         lambda: self.lifecycle.set_options(table, dict(statement.options)))

    def _reset_options(self, statement: st.AlterResetOptions) -> Plan:
        table = self.ws.load(statement.name)
        if not statement.keys:
            raise ValidationError("ALTER MATERIALIZED TABLE RESET does not support empty key.")
        for key in statement.keys:
            if key in RESERVED_OPTIONS:
                raise ValidationError(f"ALTER MATERIALIZED TABLE RESET does not support changing '{key}'.")
        return make_plan(f"would reset {len(statement.keys)} option(s) of {table.identifier}",
                         lambda: self.lifecycle.reset_options(table, tuple(statement.keys)))

    def _suspend(self, statement: st.AlterSuspend) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "suspend")
        if table.refresh_mode == CONTINUOUS:
            if table.refresh_status == SUSPENDED:
                raise StateError(f"Materialized table {table.identifier} continuous refresh job has been "
                                 f"suspended, jobId is {_job_text(table)}.")
        elif table.refresh_status == SUSPENDED:
            raise StateError(f"Materialized table {table.identifier} refresh workflow has been suspended.")
        return make_plan(f"would suspend materialized table {table.identifier}",
                         lambda: self.pipelines.suspend(table))

    def _resume(self, statement: st.AlterResume) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "resume")
        if table.refresh_mode == CONTINUOUS:
            if table.refresh_status == ACTIVATED and self.pipelines.job_running(table.identifier):
                raise StateError(f"Materialized table {table.identifier} continuous refresh job has been "
                                 f"resumed, jobId is {_job_text(table)}.")
        elif table.refresh_status == ACTIVATED:
            raise StateError(f"Materialized table {table.identifier} refresh workflow has been resumed.")
        return make_plan(f"would resume materialized table {table.identifier}",
                         lambda: self.pipelines.resume(table, dict(statement.options)))

    def _refresh(self, statement: st.AlterRefresh) -> Plan:
        table = self.ws.load(statement.name)
        spec = table.check_partition_spec(statement.partition)
        target = ", ".join(f"{k}={v}" for k, v in spec.items()) or "the whole table"
        return make_plan(f"would refresh {target} of {table.identifier}",
                         lambda: self.pipelines.refresh(table, spec, None))

    def _backfill(self, statement: st.AlterBackfill) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "backfill")
        times = schedule_times(self.pipelines, table, statement.start, statement.end)
        return make_plan(f"would run {len(times)} scheduled refreshes of {table.identifier}, "
                         f"{times[0] if times else '-'} to {times[-1] if times else '-'}",
                         lambda: backfill(self.pipelines, table, statement.start, statement.end))

    def _explain(self, statement: st.Explain) -> Plan:
        inner = statement.statement
        if isinstance(inner, st.AlterRefresh):
            table = self.ws.load(inner.name)
            spec = table.check_partition_spec(inner.partition)
            return make_plan(f"would explain a refresh of {table.identifier}",
                             lambda: explain_refresh(self.pipelines, table, spec))
        if isinstance(inner, st.CreateMaterializedTable):
            plan, table = self._create(inner, True)
            summary = plan.summary()
            definition = table.definition_query if table is not None else \
                self.ws.analyzer.analyze(inner.query).definition_query
            return make_plan(f"would explain: {summary}",
                             lambda: explain_create(summary, definition, inner.options, self.ws.spark,
                                                    self.pipelines, table))
        raise ValidationError("EXPLAIN explains ALTER MATERIALIZED TABLE … REFRESH [PARTITION (…)] and "
                              "CREATE MATERIALIZED TABLE; run the statement with --dry-run to check others.")

    def _drop(self, statement: st.DropMaterializedTable) -> Plan:
        try:
            table = self.ws.load(statement.name)
        except TableNotFoundError:
            if statement.if_exists:
                return make_plan("nothing to drop", lambda: Result.ok("Nothing to drop."))
            raise
        readers = [t.identifier for t in self.ws.store.list() if table.identifier in t.source_tables]
        if readers:
            raise ValidationError(f"Materialized table {table.identifier} is read by materialized table "
                                  f"{', '.join(readers)}: drop {'them' if len(readers) > 1 else 'it'} first.")
        return make_plan(f"would drop materialized table {table.identifier}", lambda: self.lifecycle.drop(table))


def _job_text(table: MaterializedTable) -> str:
    return (table.job.streaming_query_id if table.job else None) or "<none>"
