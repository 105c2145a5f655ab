"""The gateway: the one entry point that executes statements (Flink's SQL gateway).

A facade over the manager: it wires the parts for one session and one catalog store, runs each
statement as plan → apply (a dry run stops after the plan), and offers the public methods the
notebook, the scheduler and scripts call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mt_magic.errors import MaterializedTableError, SparkError
from mt_magic.manager.describe import describe_dict
from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.pipelines import PipelineState, Pipelines
from mt_magic.manager.plans import Planner
from mt_magic.manager.workspace import Workspace
from mt_magic.results import Result
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.spark.session import active_session
from mt_magic.sql.parser import parse


class Gateway:
    """Executes statements against one SparkSession (classic or Spark Connect) and one catalog store.

    A new Gateway on an existing store puts every table back into Spark, rolls back creations a
    crash left INITIALIZING, and restarts the pipelines (SUSPENDED ones stay paused).
    """

    def __init__(self, spark: Any | None = None, catalog_store: str | None = None,
                 config: Mapping[str, str] | None = None) -> None:
        spark = spark or active_session()
        if spark is None:
            raise MaterializedTableError(
                "No SparkSession: pass one, e.g. Gateway(SparkSession.builder.getOrCreate()).")
        self._ws = Workspace(spark, catalog_store, config)
        self.pipelines = Pipelines(self._ws, refresh=lambda name, at: self.refresh(name, schedule_time=at))
        self._planner = Planner(self._ws, self.pipelines, Lifecycle(self._ws, self.pipelines))
        self.restore_warnings: list[str] = self.pipelines.restore()

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
        results = []
        statements = parse(sql)
        for number, statement in enumerate(statements, 1):
            try:
                results.append(self._guarded(lambda: self._run(statement, dry_run)))
            except MaterializedTableError as error:
                if len(statements) > 1:
                    error.statement = f"statement {number} ({_first_line(statement.text)})"
                raise
        return results

    def _run(self, statement, dry_run: bool) -> Result:
        with self._ws.analyzer.pinned():
            plan = self._planner.plan(statement)
            return Result.ok(f"Valid: {plan.summary()}.") if dry_run else plan.apply()

    @staticmethod
    def _guarded(action):
        """Spark's errors, from any layer, reach the user once, as a SparkError."""
        try:
            return action()
        except SPARK_ERRORS as error:
            raise SparkError(spark_message(error)) from None

    # ======================================================= public methods
    def describe(self, name: str) -> dict:
        table = self._ws.load(self._ws.name(name))
        return describe_dict(table, self.pipelines.scheduler.next_fire_time(table.identifier))

    def refresh(self, name: str, schedule_time: str | None = None,
                partition: Mapping[str, str] | None = None) -> Result:
        """A manual refresh; with schedule_time, exactly what the scheduler does when it fires then."""
        table = self._ws.load(self._ws.name(name))
        return self._guarded(lambda: self.pipelines.refresh(table, dict(partition or {}), schedule_time))

    def progress(self, name: str) -> dict | None:
        """The running streaming job's latest progress (CONTINUOUS tables), else None."""
        table = self._ws.load(self._ws.name(name))
        progress = self.pipelines.jobs.progress(table.identifier)
        return None if progress is None else dict(vars(progress))

    def status(self) -> list[PipelineState]:
        """Every table of the store with what runs for it now: what dashboards show."""
        return [self.pipelines.state(t) for t in self._ws.store.list()]

    def refreshing(self, identifier: str) -> bool:
        """A batch refresh of the table is running now (manual or scheduled)."""
        return self.pipelines.refreshing(identifier)

    def close(self) -> None:
        """Stop the streaming jobs gracefully, the scheduler and any running refresh; statuses stay."""
        self.pipelines.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _first_line(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"
