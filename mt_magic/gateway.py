"""The gateway: the one place that executes statements (Flink's SQL gateway + table manager)."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo


from mt_magic import config as cfg
from mt_magic.catalog.model import (ACTIVATED, INITIALIZING, SUSPENDED, MaterializedTable,
                                    RefreshOutcome, Storage, now_iso)
from mt_magic.catalog.store import CatalogStore
from mt_magic.describe import describe_dict, describe_rows, show_create
from mt_magic.errors import (ExecutionError, MaterializedTableError, SparkError, StateError,
                             TableNotFoundError, ValidationError)
from mt_magic.refresh.continuous import ContinuousJobs, output_mode
from mt_magic.refresh.full import job_group, run_refresh, shape
from mt_magic.refresh.periodic import SCHEDULE_TIME_FORMAT, periodic_partition
from mt_magic.refresh.scheduler import WORKFLOW_GROUP, RefreshScheduler, workflow_name
from mt_magic.refresh.storage import RESERVED_OPTIONS, TableStorage, data_source_format
from mt_magic.results import Result
from mt_magic.sql import statements as st
from mt_magic.spark.analysis import AnalyzedQuery, QueryAnalyzer
from mt_magic.spark.errors import SPARK_ERRORS, spark_call, spark_message
from mt_magic.spark.jobs import cancel_jobs, job_scope
from mt_magic.spark.session import active_session, session_info
from mt_magic.sql.freshness import (AUTOMATIC, CONTINUOUS, FULL, IntervalFreshness,
                                    derive_refresh_mode)
from mt_magic.sql.parser import parse
from mt_magic.table_as import CREATE, IF_NOT_EXISTS, REPLACE, plan_target, write_table_as
from mt_magic.sql.schema import (check_formatters, check_partition_keys, column_from_field, computed_type,
                                 derive_schema)

log = logging.getLogger(__name__)

SESSION_CATALOG = "spark_catalog"
RESULT_LIMIT = 1000


class Gateway:
    """Executes statements against one SparkSession and one catalog store.

    A new Gateway on an existing store puts every table back into Spark, rolls back creations a
    crash left INITIALIZING, and reschedules the FULL tables (SUSPENDED ones stay paused).
    """

    def __init__(self, spark: Any | None = None, catalog_store: str | None = None,
                 config: Mapping[str, str] | None = None) -> None:
        self.spark = spark or active_session()
        if self.spark is None:
            raise MaterializedTableError(
                "No SparkSession: pass one, e.g. Gateway(SparkSession.builder.getOrCreate()).")
        self.options = cfg.Options(config)
        self.store = CatalogStore(cfg.catalog_store_path(catalog_store))
        self.analyzer = QueryAnalyzer(self.spark)
        self.storage = TableStorage(self.spark)
        self._spark_conf_before: dict[str, str | None] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._running: set[str] = set()
        self.restore_warnings: list[str] = []
        self.scheduler = RefreshScheduler(self._scheduled_fire)
        self.jobs = ContinuousJobs(
            self.spark, self.storage, self.store, self._lock,
            lambda: self.options.duration(cfg.VERSION_RETENTION).total_seconds(), self._job_failed)
        self._restore()

    # ================================================================ API
    def execute(self, sql: str, dry_run: bool = False) -> list[Result]:
        """Every statement in order; the first failure raises and the rest do not run.

        With dry_run, each statement is parsed and validated (Spark analyses the queries) but
        nothing is created, changed or refreshed.
        """
        run = self._check if dry_run else self._execute
        results = []
        statements = parse(sql)
        for number, statement in enumerate(statements, 1):
            try:
                try:
                    results.append(run(statement))
                except SPARK_ERRORS as error:
                    raise SparkError(spark_message(error)) from None
            except MaterializedTableError as error:
                if len(statements) > 1:
                    error.statement = f"statement {number} ({_first_line(statement.text)})"
                raise
        return results

    def describe(self, name: str) -> dict:
        table = self._load(self._name(name))
        return describe_dict(table, self.scheduler.next_fire_time(table.identifier))

    def refresh(self, name: str, schedule_time: str | None = None,
                partition: Mapping[str, str] | None = None) -> Result:
        """With schedule_time: exactly what the scheduler does when it fires at that time."""
        table = self._load(self._name(name))
        if schedule_time is not None:
            return self._periodic_refresh(table, schedule_time)
        return self._manual_refresh(table, dict(partition or {}))

    def progress(self, name: str) -> dict | None:
        """The running streaming job's latest progress (CONTINUOUS tables), else None."""
        table = self._load(self._name(name))
        progress = self.jobs.progress(table.identifier)
        return None if progress is None else dict(vars(progress))

    def refreshing(self, identifier: str) -> bool:
        """A batch refresh of the table is running now (manual or scheduled)."""
        return identifier in self._running

    def close(self) -> None:
        """Stop the streaming jobs gracefully, the scheduler and any running refresh; statuses stay."""
        self.jobs.stop_all()
        for identifier in list(self._running):
            cancel_jobs(self.spark, f"mt_magic:{identifier}")
        self.scheduler.shutdown()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ========================================================== dispatch
    def _execute(self, statement: st.Statement) -> Result:
        handlers: dict[type, Callable[[st.Statement], Result]] = {
            st.CreateMaterializedTable: self._create,
            st.CreateTableAs: self._create_table_as,
            st.AlterSuspend: self._suspend,
            st.AlterResume: self._resume,
            st.AlterRefresh: self._refresh_statement,
            st.AlterQuery: self._alter_query_statement,
            st.AlterSetFreshness: self._set_freshness,
            st.AlterSetRefreshMode: self._set_refresh_mode,
            st.AlterSetOptions: self._set_options,
            st.AlterResetOptions: self._reset_options,
            st.DropMaterializedTable: self._drop,
            st.DropTable: self._drop_table,
            st.ShowMaterializedTables: self._show_tables,
            st.ShowCreateMaterializedTable: self._show_create,
            st.DescribeTable: self._describe,
            st.SetOption: self._set,
            st.ResetOption: self._reset,
            st.SparkStatement: self._spark,
        }
        return handlers[type(statement)](statement)

    def _check(self, statement: st.Statement) -> Result:
        """--dry-run: what the statement would validate, with nothing created, changed or run."""
        return Result.ok(f"Valid: {self._validate(statement)}.")

    def _validate(self, statement: st.Statement) -> str:
        if isinstance(statement, st.CreateMaterializedTable):
            existing = self._create_target(statement)
            if existing is not None:
                self._analyze(statement.query, existing.identifier)
                return f"would alter materialized table {existing.identifier}"
            table = self._new_table(statement, *self._identifier(statement.name))
            return (f"would create materialized table {table.identifier}, refresh mode "
                    f"{table.refresh_mode}, freshness {table.freshness}")
        if isinstance(statement, st.DropMaterializedTable) and statement.if_exists:
            return "would drop the materialized table if it exists"
        if isinstance(statement, (st.AlterMaterializedTable, st.DropMaterializedTable,
                                  st.ShowCreateMaterializedTable)):
            table = self._load(statement.name)
            if isinstance(statement, st.AlterQuery):
                analyzed = self._analyze(statement.query, table.identifier)
                self._appended_columns(table, tuple(column_from_field(f) for f in analyzed.schema.fields))
            if isinstance(statement, st.AlterRefresh):
                self._check_partition_spec(table, statement.partition)
            return f"{_first_line(statement.text)} on {table.identifier}"
        if isinstance(statement, st.CreateTableAs):
            spark_call(lambda: self.spark.sql(statement.query), "The query")
            return f"{statement.verb} {'.'.join(self.analyzer.resolve(statement.name))}"
        if isinstance(statement, (st.SetOption, st.ResetOption, st.ShowMaterializedTables)):
            return _first_line(statement.text)
        return self.analyzer.check_spark_statement(statement.text)

    # ============================================================= names
    def _name(self, text: str) -> st.ObjectName:
        statement = parse(f"DROP MATERIALIZED TABLE {text}")
        return statement[0].name  # type: ignore[attr-defined]

    def _identifier(self, name: st.ObjectName) -> tuple[str, str, str]:
        catalog, database, table = self.analyzer.resolve(name)
        if catalog != SESSION_CATALOG:
            raise ValidationError(f"Materialized table {'.'.join((catalog, database, table))}: only the "
                                  f"session catalog '{SESSION_CATALOG}' can hold materialized tables.")
        return catalog, database, table

    def _load(self, name: st.ObjectName) -> MaterializedTable:
        identifier = ".".join(self._identifier(name))
        table = self.store.get(identifier)
        if table is not None:
            return table
        if self._spark_table_exists(identifier):
            raise ValidationError(f"Table {identifier} is not a materialized table, does not support "
                                  "materialized table related operation.")
        raise TableNotFoundError(f"Materialized table with identifier {identifier} does not exist.")

    def _spark_table_exists(self, identifier: str) -> bool:
        quoted = ".".join(st.quote_identifier(p) for p in identifier.split(".", 2))
        return bool(self.spark.catalog.tableExists(quoted))

    def _lock(self, identifier: str) -> threading.RLock:
        with self._locks_guard:
            return self._locks.setdefault(identifier, threading.RLock())

    def _zone(self) -> tzinfo:
        """The session time zone: one zone for cron and for the T − freshness rule."""
        name = self.spark.conf.get("spark.sql.session.timeZone") or "UTC"
        offset = re.fullmatch(r"(?:GMT|UTC)?([+-])(\d{1,2}):?(\d{2})?", name)
        if offset:
            sign = -1 if offset.group(1) == "-" else 1
            return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3) or 0)))
        return ZoneInfo(name)

    # ============================================================ CREATE
    def _create(self, statement: st.CreateMaterializedTable) -> Result:
        existing = self._create_target(statement)
        if existing is not None:
            return self._create_or_alter(existing, statement)
        return self._provision(self._new_table(statement, *self._identifier(statement.name)))

    def _create_target(self, statement: st.CreateMaterializedTable) -> MaterializedTable | None:
        """The table CREATE OR ALTER alters, or None when the name is free for a new one."""
        catalog, database, name = self._identifier(statement.name)
        identifier = f"{catalog}.{database}.{name}"
        existing = self.store.get(identifier)
        if existing is not None:
            if statement.or_alter:
                return existing
            raise ValidationError(f"Materialized table {identifier} already exists.")
        if self._spark_table_exists(identifier):
            if statement.or_alter:
                raise ValidationError(f"Table {identifier}: Regular table does not support create or "
                                      "alter operation.")
            raise ValidationError(f"Table {identifier} already exists and is not a materialized table.")
        if not self.spark.catalog.databaseExists(f"{catalog}.{database}"):
            raise ValidationError(f"Database '{catalog}'.'{database}' doesn't exist.")
        return None

    def _analyze(self, query: str, identifier: str) -> AnalyzedQuery:
        analyzed = self.analyzer.analyze(query)
        if identifier in analyzed.sources:
            raise ValidationError(f"The query of materialized table {identifier} reads the table itself.")
        return analyzed

    def _new_table(self, statement: st.CreateMaterializedTable, catalog: str, database: str,
                   name: str) -> MaterializedTable:
        identifier = f"{catalog}.{database}.{name}"
        analyzed = self._analyze(statement.query, identifier)
        schema = derive_schema(statement, analyzed.schema, computed_type(self.spark.sql(analyzed.definition_query)))
        partition_keys = check_partition_keys(statement.partition_keys, schema.columns)
        check_formatters(statement.options, partition_keys, schema.columns)
        storage = self._new_storage(statement.options, catalog, database, name)
        decision = derive_refresh_mode(
            IntervalFreshness.from_literal(statement.freshness) if statement.freshness else None,
            statement.refresh_mode or AUTOMATIC, self.options.duration(cfg.FRESHNESS_THRESHOLD),
            self.options.duration(cfg.DEFAULT_FRESHNESS_CONTINUOUS),
            self.options.duration(cfg.DEFAULT_FRESHNESS_FULL))
        return MaterializedTable(
            catalog=catalog, database=database, name=name, columns=schema.columns,
            query_columns=tuple(f.name for f in analyzed.schema.fields),
            definition_query=analyzed.definition_query, original_query=statement.query,
            freshness=str(decision.freshness), logical_refresh_mode=decision.logical_mode,
            refresh_mode=decision.refresh_mode, refresh_status=INITIALIZING,
            storage=storage,
            primary_key=schema.primary_key, watermark=schema.watermark,
            partition_keys=partition_keys, options=dict(statement.options), comment=statement.comment,
            source_tables=analyzed.sources)

    def _new_storage(self, options: Mapping[str, str], catalog: str, database: str,
                     name: str) -> Storage:
        fmt = data_source_format(self.spark, options, default="parquet")
        if "path" in options:
            root = options["path"]
            existed = self.storage.files.exists(root)
            if existed and not self.storage.files.is_empty_dir(root):
                raise ValidationError(f"Option 'path' = '{root}' names a folder that is not empty; "
                                      "a materialized table needs a folder of its own.")
            return self.storage.first_storage(root, fmt, owns_root=not existed)
        data_dir = self.options.get(cfg.DATA_DIR) or f"{self.store.path.rsplit('/', 1)[0]}/data"
        root = f"{data_dir}/{catalog}/{database}/{name}-{uuid.uuid4().hex[:8]}"
        return self.storage.first_storage(root, fmt, owns_root=True)

    def _provision(self, table: MaterializedTable) -> Result:
        """CREATE's steps after validation; any failure undoes all of them and names the step."""
        identifier = table.identifier
        self.store.put(table)
        step = "creating the Spark table"
        try:
            self.storage.create(table)
            if table.refresh_mode == CONTINUOUS:
                step = "starting the continuous refresh job"
                handler = self._start_job(table, fresh=True, dynamic_options={})
            else:
                if self.options.get(cfg.FULL_INITIALIZE) != "on-schedule":
                    step = "running the initial refresh"
                    table = self._run(table, {}, periodic=False, raise_errors=True)
                step = "creating the refresh workflow"
                handler = self._schedule(table, paused=False, dynamic_options={})
            table = self.store.update(identifier, lambda t: t.evolve(
                refresh_status=ACTIVATED, refresh_handler=handler))
        except BaseException as error:
            self._rollback(table)
            detail = str(error) if isinstance(error, MaterializedTableError) else spark_message(error)
            raise ExecutionError(f"Failed to create materialized table {identifier} while {step}: "
                                 f"{detail}") from None
        return Result.ok(f"Created materialized table {identifier}, refresh mode {table.refresh_mode}, "
                         f"freshness {table.freshness}{self._next_text(identifier)}.")

    def _rollback(self, table: MaterializedTable) -> None:
        self._stop_pipeline(table)
        try:
            self.storage.drop(table)
            self._delete_checkpoints(self.store.get(table.identifier) or table)
        finally:
            self.store.delete(table.identifier)

    def _next_text(self, identifier: str) -> str:
        moment = self.scheduler.next_fire_time(identifier)
        return f", next refresh {moment.strftime(SCHEDULE_TIME_FORMAT)}" if moment else ""

    def _schedule(self, table: MaterializedTable, paused: bool, dynamic_options: dict) -> dict:
        freshness = IntervalFreshness.parse(table.freshness)
        zone = self._zone()
        info = session_info(self.spark)
        self.scheduler.schedule(table.identifier, freshness, zone, paused=paused)
        return {
            "kind": "embedded-scheduler",
            "workflow_name": workflow_name(table.quoted),
            "workflow_group": WORKFLOW_GROUP,
            "scheduler_job_id": table.identifier,
            "cron_expression": freshness.quartz_cron(),
            "time_zone": str(zone),
            "dynamic_options": dict(dynamic_options),
            "spark_master": info.master,
            "application_id": info.application_id,
        }

    # =========================================================== refresh
    def _refresh_statement(self, statement: st.AlterRefresh) -> Result:
        return self._manual_refresh(self._load(statement.name), statement.partition)

    def _manual_refresh(self, table: MaterializedTable, partition: dict[str, str]) -> Result:
        spec = self._check_partition_spec(table, partition)
        table = self._run(table, spec, periodic=False, raise_errors=True)
        return self._refresh_result(table)

    def _periodic_refresh(self, table: MaterializedTable, schedule_time: str) -> Result:
        freshness = IntervalFreshness.parse(table.freshness)
        spec = periodic_partition(schedule_time, freshness, table.formatter_options(), self._zone(),
                                  table.identifier)
        spec = self._check_partition_spec(table, spec)
        table = self._run(table, spec, periodic=True, raise_errors=True, schedule_time=schedule_time)
        return self._refresh_result(table)

    def _refresh_result(self, table: MaterializedTable) -> Result:
        last = table.last_refresh
        info = session_info(self.spark)
        cluster = {"spark.master": info.master, "spark.app.id": info.application_id}
        target = ", ".join(f"{k}={v}" for k, v in last.partition.items()) or "whole table"
        return Result.table(["job id", "cluster info", "rows", "partition"],
                            [(job_group(table), cluster, last.rows, target)],
                            message=f"Refreshed {table.identifier} ({target}): {last.rows} rows in "
                                    f"{last.duration_s:.2f} s.")

    def _check_partition_spec(self, table: MaterializedTable, spec: dict[str, str]) -> dict[str, str]:
        """Spec §4.3, stricter: keys must be partition keys, and of a string type."""
        keys = {k.lower(): k for k in table.partition_keys}
        unknown = [k for k in spec if k.lower() not in keys]
        if unknown:
            raise ValidationError("The partition spec contains unknown partition keys:\n\n"
                                  + "\n".join(unknown) + "\n\nAll known partition keys are:\n\n"
                                  + "\n".join(table.partition_keys))
        wrong = [k for k in spec if table.column(k).type != "string"]
        if wrong:
            raise ValidationError("Currently, refreshing materialized table only supports referring to "
                                  "char, varchar and string type partition keys. All specified partition "
                                  "keys in partition specs with unsupported types are:\n\n" + "\n".join(wrong))
        return {keys[k.lower()]: v for k, v in spec.items()}

    def _run(self, table: MaterializedTable, spec: dict[str, str], periodic: bool,
             raise_errors: bool, schedule_time: str | None = None) -> MaterializedTable:
        """One refresh at a time per table; the outcome is recorded either way."""
        identifier = table.identifier
        with self._lock(identifier):
            current = self.store.get(identifier)
            if current is None:
                raise TableNotFoundError(f"Materialized table {identifier} was dropped.")
            dynamic = current.refresh_handler.get("dynamic_options", {}) if periodic else {}
            started_at, started = now_iso(), time.monotonic()
            self._running.add(identifier)
            try:
                result = run_refresh(self.spark, self.storage, current, spec, dynamic)
            except BaseException as error:
                message = str(error) if isinstance(error, MaterializedTableError) else spark_message(error)
                outcome = RefreshOutcome(started_at, time.monotonic() - started, "FAILED", None, spec,
                                         schedule_time, message)
                self.store.update(identifier, lambda t: t.with_refresh(outcome))
                if not raise_errors:
                    log.warning("Refresh of %s failed: %s", identifier, message)
                    return current
                if isinstance(error, MaterializedTableError):
                    raise ExecutionError(f"Refreshing the materialized table {identifier} failed: "
                                         f"{message}") from None
                raise
            finally:
                self._running.discard(identifier)
            outcome = RefreshOutcome(started_at, result.duration_s, "SUCCEEDED", result.rows, spec,
                                     schedule_time)
            updated = self.store.update(identifier, lambda t: t.with_refresh(outcome, storage=result.storage))
            self.storage.sweep(updated, self.options.duration(cfg.VERSION_RETENTION).total_seconds())
            return updated

    def _scheduled_fire(self, identifier: str) -> None:
        """Called by the scheduler in a pool thread; never raises into APScheduler."""
        try:
            table = self.store.get(identifier)
            if table is None or table.refresh_status != ACTIVATED or table.refresh_mode != FULL:
                return
            freshness = IntervalFreshness.parse(table.freshness)
            fire_time = freshness.floor(datetime.now(self._zone())).strftime(SCHEDULE_TIME_FORMAT)
            spec = periodic_partition(fire_time, freshness, table.formatter_options(), self._zone(),
                                      identifier)
            self._run(table, self._check_partition_spec(table, spec), periodic=True,
                      raise_errors=False, schedule_time=fire_time)
        except Exception:   # recorded on the table where possible; a dead thread helps nobody
            log.exception("Scheduled refresh of %s failed", identifier)

    # ==================================================== SUSPEND/RESUME
    def _require_not_initializing(self, table: MaterializedTable, operation: str) -> None:
        if table.refresh_status == INITIALIZING:
            raise StateError(f"Materialized table {table.identifier} is being initialized and does not "
                             f"support {operation} operation.")

    def _suspend(self, statement: st.AlterSuspend) -> Result:
        table = self._load(statement.name)
        self._require_not_initializing(table, "suspend")
        if table.refresh_mode == CONTINUOUS:
            return self._suspend_job(table)
        if table.refresh_status == SUSPENDED:
            raise StateError(f"Materialized table {table.identifier} refresh workflow has been suspended.")
        if self.scheduler.has(table.identifier):
            self.scheduler.pause(table.identifier)
        self.store.update(table.identifier, lambda t: t.evolve(refresh_status=SUSPENDED))
        return Result.ok(f"Suspended materialized table {table.identifier}.")

    def _resume(self, statement: st.AlterResume) -> Result:
        table = self._load(statement.name)
        self._require_not_initializing(table, "resume")
        if table.refresh_mode == CONTINUOUS:
            return self._resume_job(table, dict(statement.options))
        if table.refresh_status == ACTIVATED:
            raise StateError(f"Materialized table {table.identifier} refresh workflow has been resumed.")
        dynamic = statement.options or table.refresh_handler.get("dynamic_options", {})
        handler = self._schedule(table, paused=False, dynamic_options=dynamic)
        self.store.update(table.identifier, lambda t: t.evolve(refresh_status=ACTIVATED,
                                                               refresh_handler=handler))
        return Result.ok(f"Resumed materialized table {table.identifier}"
                         f"{self._next_text(table.identifier)}.")

    # ======================================================== CONTINUOUS
    def _checkpoint_root(self) -> str:
        return self.options.get(cfg.CHECKPOINT_DIR) or f"{self.store.path.rsplit('/', 1)[0]}/checkpoints"

    def _new_checkpoint(self, table: MaterializedTable, root: str | None = None) -> str:
        folder = root or self._checkpoint_root()
        return self.storage.files.qualify(
            f"{folder}/{table.catalog}/{table.database}/{table.name}-{uuid.uuid4().hex[:8]}")

    def _start_job(self, table: MaterializedTable, fresh: bool, dynamic_options: dict,
                   checkpoint: str | None = None) -> dict:
        """Start the streaming job: fresh (new checkpoint, new data version) or from `checkpoint`."""
        streaming = self._streaming_query(table)
        interval = self.options.get(cfg.CHECKPOINT_INTERVAL)
        trigger = (self.options.duration(cfg.CHECKPOINT_INTERVAL) if interval
                   else IntervalFreshness.parse(table.freshness).duration).total_seconds()
        location = checkpoint if checkpoint and not fresh else self._new_checkpoint(table)
        handler = spark_call(lambda: self.jobs.start(table, streaming, location, fresh, trigger,
                                                     dynamic_options),
                             f"Starting the continuous refresh job of {table.identifier}")
        return {**handler, "restarts": table.refresh_handler.get("restarts", 0) if not fresh else 0}

    def _check_streamable(self, table: MaterializedTable) -> None:
        """Before anything is stopped: the new definition must stream (Flink's master checks first)."""
        frame = spark_call(lambda: self.spark.sql(self._streaming_query(table)), table.identifier)
        output_mode(self.spark, frame, table)

    def _streaming_query(self, table: MaterializedTable) -> str:
        """Sources listed in the static-sources option are joined as static data; the rest stream."""
        names = [n.strip() for n in (table.options.get(cfg.STATIC_SOURCES) or "").split(",") if n.strip()]
        static = {".".join(self.analyzer.resolve(self._name(n))).lower() for n in names}
        return spark_call(lambda: self.analyzer.streaming_query(table.definition_query, static),
                          f"Materialized table {table.identifier}")

    def _job_text(self, table: MaterializedTable) -> str:
        return table.refresh_handler.get("streaming_query_id", "<none>")

    def _suspend_job(self, table: MaterializedTable) -> Result:
        if table.refresh_status == SUSPENDED:
            raise StateError(f"Materialized table {table.identifier} continuous refresh job has been "
                             f"suspended, jobId is {self._job_text(table)}.")
        savepoints = self.options.get(cfg.SAVEPOINT_DIR)
        if not savepoints:
            raise StateError(f"Failed to suspend the continuous refresh job for materialized table "
                             f"{table.identifier}. Savepoint directory is not configured, can't stop job "
                             f"with savepoint ('{cfg.SAVEPOINT_DIR}').")
        with self._lock(table.identifier):
            self.jobs.stop(table.identifier)
            handler = dict(table.refresh_handler)
            savepoint = self._new_checkpoint(table, savepoints)
            self.storage.files.mkdirs(savepoint.rsplit("/", 1)[0])
            self.storage.files.rename(handler["checkpoint_location"], savepoint)
            handler.update(restore_path=savepoint, checkpoint_location=savepoint)
            self.store.update(table.identifier, lambda t: t.evolve(refresh_status=SUSPENDED,
                                                                   refresh_handler=handler))
        return Result.ok(f"Suspended materialized table {table.identifier}; savepoint {savepoint}.")

    def _resume_job(self, table: MaterializedTable, dynamic_options: dict) -> Result:
        if table.refresh_status == ACTIVATED and self.jobs.is_running(table.identifier):
            raise StateError(f"Materialized table {table.identifier} continuous refresh job has been "
                             f"resumed, jobId is {self._job_text(table)}.")
        restore = table.refresh_handler.get("restore_path") if table.refresh_status == SUSPENDED else None
        handler = self._start_job(table, fresh=restore is None, dynamic_options=dynamic_options,
                                  checkpoint=restore)
        handler.pop("restore_path", None)
        self.store.update(table.identifier, lambda t: t.evolve(refresh_status=ACTIVATED,
                                                               refresh_handler=handler))
        started = "from its savepoint" if restore else "from scratch"
        return Result.ok(f"Resumed materialized table {table.identifier}: continuous refresh job "
                         f"{handler['streaming_query_id']} started {started}.")

    def _job_failed(self, identifier: str, message: str) -> None:
        """Called from Spark's listener thread: record, then restart with backoff up to the limit."""
        table = self.store.update(identifier, lambda t: t.evolve(refresh_handler={
            **t.refresh_handler, "failure": message, "failed_at": now_iso()}))
        restarts = int(table.refresh_handler.get("restarts", 0))
        if restarts >= int(self.options.get(cfg.MAX_RESTARTS) or 0):
            log.warning("Continuous refresh job of %s failed; no restarts left: %s", identifier, message)
            return
        self.scheduler.run_once(f"restart:{identifier}", 2 ** restarts,
                                lambda: self._restart_job(identifier, restarts + 1))

    def _restart_job(self, identifier: str, restarts: int) -> None:
        try:
            table = self.store.get(identifier)
            if table is None or table.refresh_status != ACTIVATED or table.refresh_mode != CONTINUOUS \
                    or self.jobs.is_running(identifier):
                return
            handler = self._start_job(table, fresh=False, dynamic_options=table.refresh_handler.get(
                "dynamic_options", {}), checkpoint=table.refresh_handler.get("checkpoint_location"))
            self.store.update(identifier, lambda t: t.evolve(refresh_handler={
                **handler, "restarts": restarts, "failure": t.refresh_handler.get("failure"),
                "failed_at": t.refresh_handler.get("failed_at")}))
        except Exception as error:   # noqa: BLE001 - recorded; the scheduler thread must go on
            try:
                self.store.update(identifier, lambda t: t.evolve(
                    refresh_handler={**t.refresh_handler, "restarts": restarts}))
                self._job_failed(identifier, spark_message(error))
            except MaterializedTableError:
                log.warning("Restarting the continuous refresh job of %s failed: %s", identifier, error)

    def _stop_pipeline(self, table: MaterializedTable) -> None:
        self.scheduler.remove(table.identifier)
        self.jobs.stop(table.identifier)

    def _delete_checkpoints(self, table: MaterializedTable) -> None:
        for key in ("checkpoint_location", "restore_path"):
            if table.refresh_handler.get(key):
                self.storage.files.delete(table.refresh_handler[key])

    # =========================================================== ALTER AS
    def _alter_query_statement(self, statement: st.AlterQuery) -> Result:
        table = self._load(statement.name)
        self._require_not_initializing(table, "alter")
        analyzed = self._analyze(statement.query, table.identifier)
        columns = tuple(column_from_field(f) for f in analyzed.schema.fields)
        return self._evolve_query(table, statement.query, analyzed, columns, {})

    def _evolve_query(self, table: MaterializedTable, query: str, analyzed: AnalyzedQuery,
                      columns: tuple, changes: dict) -> Result:
        appended = self._appended_columns(table, columns)
        updated = table.evolve(columns=table.columns + appended, original_query=query,
                               definition_query=analyzed.definition_query,
                               query_columns=tuple(f.name for f in analyzed.schema.fields),
                               source_tables=analyzed.sources, **changes)
        continuous = table.refresh_mode == CONTINUOUS
        if continuous:
            self._check_streamable(updated)
            self.jobs.stop(table.identifier)
        if appended:
            self.storage.add_columns(updated, len(appended))
        handler = dict(table.refresh_handler)
        if continuous:   # §4.5: the new job starts from scratch; a SUSPENDED one will on RESUME
            self._delete_checkpoints(table)
            handler.pop("restore_path", None)
            handler.pop("checkpoint_location", None)
            if table.refresh_status == ACTIVATED:
                handler = self._start_job(updated, fresh=True, dynamic_options={})
        self.store.update(table.identifier, lambda t: t.evolve(
            columns=updated.columns, original_query=updated.original_query,
            definition_query=updated.definition_query, query_columns=updated.query_columns,
            source_tables=updated.source_tables, refresh_handler=handler, **changes))
        added = f", added {', '.join(c.name for c in appended)}" if appended else ""
        after = ("; a new continuous refresh job started from scratch" if continuous
                 and table.refresh_status == ACTIVATED else "; the next refresh uses it")
        return Result.ok(f"Altered the query of materialized table {table.identifier}{added}{after}.")

    def _appended_columns(self, table: MaterializedTable, columns: tuple) -> tuple:
        """Spec §4.5: the old columns must stay as they are; new ones are appended, nullable."""
        persisted = [c for c in table.columns if c.computed is None]
        new = [c for c in columns if c.computed is None]
        if len(new) < len(persisted):
            raise ValidationError(
                "Failed to modify query because drop column is unsupported. When modifying a query, you "
                "can only append new columns at the end of original schema. The original schema has "
                f"{len(persisted)} columns, but the newly derived schema from the query has {len(new)} "
                "columns.")
        for position, (old, candidate) in enumerate(zip(persisted, new)):
            if (old.name, old.type, old.nullable) != (candidate.name, candidate.type, candidate.nullable):
                raise ValidationError(
                    "When modifying the query of a materialized table, currently only support appending "
                    "columns at the end of original schema, dropping, renaming, and reordering columns "
                    f"are not supported.\nColumn mismatch at position {position}: Original column is "
                    f"[{_column_text(old)}], but new column is [{_column_text(candidate)}].")
        return tuple(c.__class__(**{**vars(c), "nullable": True}) for c in new[len(persisted):])

    def _create_or_alter(self, table: MaterializedTable, statement: st.CreateMaterializedTable) -> Result:
        self._require_not_initializing(table, "alter")
        if statement.refresh_mode and statement.refresh_mode != table.refresh_mode:
            raise ValidationError(f"Materialized table {table.identifier}: Changing of REFRESH MODE is "
                                  "unsupported.")
        if [k.lower() for k in statement.partition_keys] != [k.lower() for k in table.partition_keys]:
            raise ValidationError(f"Materialized table {table.identifier}: changing PARTITIONED BY is not "
                                  "supported; drop and create the table instead.")
        self._check_reserved(table, statement.options, list(statement.options) + list(table.options))
        analyzed = self._analyze(statement.query, table.identifier)
        schema = derive_schema(statement, analyzed.schema, computed_type(self.spark.sql(analyzed.definition_query)))
        check_formatters(statement.options, table.partition_keys, schema.columns)
        changes: dict = {"options": dict(statement.options), "comment": statement.comment}
        if statement.columns or statement.primary_key or statement.watermark:
            changes.update(primary_key=schema.primary_key, watermark=schema.watermark)
        result = self._evolve_query(table, statement.query, analyzed, schema.columns, changes)
        if statement.freshness:
            freshness = IntervalFreshness.from_literal(statement.freshness)
            if str(freshness) != table.freshness:
                self._change_mode(self.store.get(table.identifier), freshness, table.logical_refresh_mode)
        return result

    # ========================================================= ALTER SET
    def _set_freshness(self, statement: st.AlterSetFreshness) -> Result:
        table = self._load(statement.name)
        self._require_not_initializing(table, "alter")
        freshness = IntervalFreshness.from_literal(statement.freshness)
        return self._change_mode(table, freshness, table.logical_refresh_mode)

    def _set_refresh_mode(self, statement: st.AlterSetRefreshMode) -> Result:
        table = self._load(statement.name)
        self._require_not_initializing(table, "alter")
        return self._change_mode(table, IntervalFreshness.parse(table.freshness), statement.refresh_mode)

    def _change_mode(self, table: MaterializedTable, freshness: IntervalFreshness,
                     logical_mode: str) -> Result:
        """FLIP-435: the pipeline is stopped and recreated for the new freshness and mode."""
        decision = derive_refresh_mode(freshness, logical_mode,
                                       self.options.duration(cfg.FRESHNESS_THRESHOLD),
                                       self.options.duration(cfg.DEFAULT_FRESHNESS_CONTINUOUS),
                                       self.options.duration(cfg.DEFAULT_FRESHNESS_FULL))
        updated = table.evolve(freshness=str(decision.freshness), logical_refresh_mode=logical_mode,
                               refresh_mode=decision.refresh_mode)
        to_continuous, was_continuous = decision.refresh_mode == CONTINUOUS, table.refresh_mode == CONTINUOUS
        if to_continuous:
            self._check_streamable(updated)
        self._stop_pipeline(table)
        dynamic = table.refresh_handler.get("dynamic_options", {})
        if not to_continuous:
            if was_continuous:
                self._delete_checkpoints(table)
            handler = self._schedule(updated, paused=table.refresh_status == SUSPENDED,
                                     dynamic_options=dynamic)
        elif table.refresh_status == SUSPENDED:
            handler = dict(table.refresh_handler) if was_continuous else {}
        else:   # a new trigger continues from the checkpoint; a table coming from FULL starts fresh
            handler = self._start_job(updated, fresh=not was_continuous, dynamic_options=dynamic,
                                      checkpoint=table.refresh_handler.get("checkpoint_location"))
        self.store.update(table.identifier, lambda t: t.evolve(
            freshness=updated.freshness, logical_refresh_mode=logical_mode,
            refresh_mode=decision.refresh_mode, refresh_handler=handler))
        return Result.ok(f"Materialized table {table.identifier} now has freshness {decision.freshness}, "
                         f"refresh mode {decision.refresh_mode}{self._next_text(table.identifier)}.")

    def _check_reserved(self, table: MaterializedTable, new: Mapping[str, str], keys: list[str]) -> None:
        for key in keys:
            if key in RESERVED_OPTIONS and new.get(key) != table.options.get(key):
                raise ValidationError(f"ALTER MATERIALIZED TABLE {table.identifier} does not support "
                                      f"changing '{key}': the data is stored that way.")

    def _set_options(self, statement: st.AlterSetOptions) -> Result:
        table = self._load(statement.name)
        if not statement.options:
            raise ValidationError("ALTER MATERIALIZED TABLE SET does not support empty options.")
        options = {**table.options, **statement.options}
        self._check_reserved(table, options, list(statement.options))
        check_formatters(options, table.partition_keys, table.columns)
        self.store.update(table.identifier, lambda t: t.evolve(options={**t.options, **statement.options}))
        return Result.ok(f"Set {len(statement.options)} option(s) of {table.identifier}.")

    def _reset_options(self, statement: st.AlterResetOptions) -> Result:
        table = self._load(statement.name)
        if not statement.keys:
            raise ValidationError("ALTER MATERIALIZED TABLE RESET does not support empty key.")
        for key in statement.keys:
            if key in RESERVED_OPTIONS:
                raise ValidationError(f"ALTER MATERIALIZED TABLE RESET does not support changing '{key}'.")
        self.store.update(table.identifier, lambda t: t.evolve(
            options={k: v for k, v in t.options.items() if k not in statement.keys}))
        return Result.ok(f"Reset {len(statement.keys)} option(s) of {table.identifier}.")

    # ============================================================== DROP
    def _drop(self, statement: st.DropMaterializedTable) -> Result:
        try:
            table = self._load(statement.name)
        except TableNotFoundError:
            if statement.if_exists:
                return Result.ok("Nothing to drop.")
            raise
        identifier = table.identifier
        self._stop_pipeline(table)
        cancel_jobs(self.spark, job_group(table))
        with self._lock(identifier):
            table = self.store.get(identifier) or table
            self.storage.drop(table)
            self._delete_checkpoints(table)
            self.store.delete(identifier)
        return Result.ok(f"Dropped materialized table {identifier}.")

    def _drop_table(self, statement: st.DropTable) -> Result:
        identifier = ".".join(self.analyzer.resolve(statement.name))
        if self.store.get(identifier) is not None:
            raise ValidationError(f"{identifier} is a materialized table: use DROP MATERIALIZED TABLE "
                                  f"{identifier}.")
        return self._spark(statement)

    # ========================================================= CTAS/RTAS
    def _create_table_as(self, statement: st.CreateTableAs) -> Result:
        if statement.or_replace and statement.if_not_exists:
            raise ValidationError("CREATE OR REPLACE TABLE AS cannot be combined with IF NOT EXISTS.")
        if statement.watermark is not None:
            raise ValidationError("WATERMARK has no meaning for a table written once by CREATE TABLE AS.")
        mode = REPLACE if statement.or_replace else IF_NOT_EXISTS if statement.if_not_exists else CREATE
        target = plan_target(self.spark, self.analyzer.resolve(statement.name), statement.options, mode,
                             statement.partition_keys, statement.comment)
        source = spark_call(lambda: self.spark.sql(statement.query), "The query")
        schema = derive_schema(statement, source.schema, computed_type(source))
        check_partition_keys(statement.partition_keys, schema.columns)
        with job_scope(self.spark, f"mt_magic:ctas:{target.identifier}",
                             f"{statement.verb} {target.identifier}"):
            return write_table_as(self.spark, shape(source, schema.columns, target.identifier), target)

    # ============================================================== SHOW
    def _show_tables(self, statement: st.ShowMaterializedTables) -> Result:
        catalog, database = self.analyzer.current()
        if statement.database is not None:
            parts = statement.database.parts
            catalog, database = (parts if len(parts) == 2 else (catalog, parts[0]))
        catalog, database = self.analyzer.normalize(catalog), self.analyzer.normalize(database)
        if not self.spark.catalog.databaseExists(f"{catalog}.{database}"):
            raise ValidationError(f"Database '{catalog}'.'{database}' doesn't exist.")
        names = [t.name for t in self.store.list() if (t.catalog, t.database) == (catalog, database)]
        if statement.pattern is not None:
            regex = re.compile(_like_regex(statement.pattern), re.DOTALL)
            names = [n for n in names if bool(regex.fullmatch(n)) != statement.negate]
        return Result.table(["materialized table"], [(n,) for n in sorted(names)])

    def _show_create(self, statement: st.ShowCreateMaterializedTable) -> Result:
        try:
            table = self._load(statement.name)
        except TableNotFoundError as error:
            raise TableNotFoundError(f"Could not execute SHOW CREATE MATERIALIZED TABLE. {error}") from None
        return Result.table(["result"], [(show_create(table),)], message="1 row")

    def _describe(self, statement: st.DescribeTable) -> Result:
        identifier = ".".join(self.analyzer.resolve(statement.name))
        table = self.store.get(identifier)
        if table is None:
            return self._spark(statement)
        rows = describe_rows(table, statement.extended, self.scheduler.next_fire_time(identifier))
        return Result.table(["col_name", "data_type", "comment"], rows)

    # ========================================================== SET/RESET
    def _set(self, statement: st.SetOption) -> Result:
        if statement.key.startswith("spark."):
            if statement.key not in self._spark_conf_before:
                self._spark_conf_before[statement.key] = self.spark.conf.get(statement.key, None)
            spark_call(lambda: self.spark.conf.set(statement.key, statement.value),
                       f"SET '{statement.key}'")
        else:
            self.options.set(statement.key, statement.value)
        return Result.ok(f"Set '{statement.key}' = '{statement.value}'.")

    def _reset(self, statement: st.ResetOption) -> Result:
        keys = [statement.key] if statement.key else list(self._spark_conf_before)
        for key in keys:
            if key in self._spark_conf_before:
                before = self._spark_conf_before.pop(key)
                if before is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, before)
        self.options.reset(statement.key)
        return Result.ok(f"Reset '{statement.key}'." if statement.key else "Reset all session options.")

    # ============================================================= Spark
    def _spark(self, statement: st.Statement) -> Result:
        frame = spark_call(lambda: self.spark.sql(statement.text), "Spark")
        if not frame.columns:
            return Result.ok()
        rows = spark_call(lambda: frame.limit(RESULT_LIMIT + 1).collect(), "Spark")
        return Result.table(frame.columns, [tuple(r) for r in rows[:RESULT_LIMIT]],
                            truncated=len(rows) > RESULT_LIMIT)

    # =========================================================== restore
    def _restore(self) -> None:
        retention = self.options.duration(cfg.VERSION_RETENTION).total_seconds()
        for table in self.store.list():
            try:
                if table.refresh_status == INITIALIZING:
                    self.restore_warnings.append(f"{table.identifier}: rolled back an unfinished CREATE.")
                    self._rollback(table)
                    continue
                self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{table.catalog}`.`{table.database}`")
                self.storage.register(table)
                if table.refresh_mode == FULL:
                    self._schedule(table, paused=table.refresh_status == SUSPENDED,
                                   dynamic_options=table.refresh_handler.get("dynamic_options", {}))
                elif table.refresh_status == ACTIVATED:
                    handler = self._start_job(table, fresh=False, dynamic_options=table.refresh_handler.get(
                        "dynamic_options", {}), checkpoint=table.refresh_handler.get("checkpoint_location"))
                    self.store.update(table.identifier, lambda t: t.evolve(refresh_handler=handler))
                self.storage.sweep(table, retention)
            except (MaterializedTableError, *SPARK_ERRORS) as error:
                self.restore_warnings.append(f"{table.identifier}: {spark_message(error)}")


def _column_text(column) -> str:
    return f"`{column.name}` {column.type.upper()}{'' if column.nullable else ' NOT NULL'}"


def _first_line(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def _like_regex(pattern: str) -> str:
    """SQL LIKE: % any run, _ one character, backslash escapes."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        i += 1
    return "".join(out)
