"""The plan step: every statement is validated here, once, into a Plan.

`execute` applies the plan; `--dry-run` reports its summary. Both go through the same validation, so
they cannot disagree: whatever would make a statement fail before it changes anything fails here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from mt_magic import config as cfg
from mt_magic.catalog.model import ACTIVATED, INITIALIZING, SUSPENDED, MaterializedTable, Storage
from mt_magic.errors import StateError, TableNotFoundError, ValidationError
from mt_magic.manager.backfill import backfill, schedule_times
from mt_magic.manager.describe import describe_rows, show_create
from mt_magic.manager.explain import explain_create, explain_refresh
from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.runs import check_partition_spec
from mt_magic.manager.schema import (check_formatters, check_partition_keys, column_from_field,
                                     computed_type, derive_schema, keyed, with_unique_names)
from mt_magic.manager.workspace import Workspace, check_folder_names
from mt_magic.refresh.full import shape
from mt_magic.results import Result
from mt_magic.spark.analysis import AnalyzedQuery
from mt_magic.spark.catalog import TableLookup, lookup_table
from mt_magic.spark.commands import alongside
from mt_magic.spark.errors import spark_call
from mt_magic.spark.jobs import job_scope
from mt_magic.sql import statements as st
from mt_magic.sql.relations import written_table
from mt_magic.sql.statements import quote_identifier
from mt_magic.sql.freshness import AUTOMATIC, CONTINUOUS, IntervalFreshness
from mt_magic.storage.table_as import CREATE, IF_NOT_EXISTS, REPLACE, plan_target, retire_versions, write_table_as
from mt_magic.storage.versions import RESERVED_OPTIONS, data_source_format



@dataclass(frozen=True)
class Plan:
    """A validated statement: what it would do, and doing it."""

    summary: Callable[[], str]
    apply: Callable[[], Result]


def _plan(summary: str, apply: Callable[[], Result]) -> Plan:
    return Plan(lambda: summary, apply)


class Planner:
    def __init__(self, ws: Workspace, pipelines: Pipelines, lifecycle: Lifecycle) -> None:
        self.ws = ws
        self.pipelines = pipelines
        self.lifecycle = lifecycle
        self._spark_conf_before: dict[str, str | None] = {}

    def plan(self, statement: st.Statement) -> Plan:
        planners: dict[type, Callable] = {
            st.CreateMaterializedTable: self._create,
            st.CreateTableAs: self._create_table_as,
            st.AlterSuspend: self._suspend,
            st.AlterResume: self._resume,
            st.AlterRefresh: self._refresh,
            st.AlterBackfill: self._backfill,
            st.Explain: self._explain,
            st.AlterQuery: self._alter_query,
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
        return planners[type(statement)](statement)

    # ============================================================ CREATE
    def _create(self, statement: st.CreateMaterializedTable) -> Plan:
        catalog, database, name = self.ws.identifier(statement.name)
        identifier = f"{catalog}.{database}.{name}"
        existing = self.ws.store.get(identifier)
        if existing is not None:
            if not statement.or_alter:
                raise ValidationError(f"Materialized table {identifier} already exists; CREATE OR ALTER "
                                      "MATERIALIZED TABLE runs again harmlessly (unchanged when identical).")
            return self._create_or_alter(existing, statement)
        lookup = alongside(self.ws.spark, lookup_table, self.ws.spark, catalog, database, name)
        try:
            table = self._new_table(statement, catalog, database, name)
        finally:    # the name's errors come before the query's
            _check_free(lookup.result(), statement.or_alter, catalog, database, name)
        strategy = ""
        if table.refresh_mode == CONTINUOUS:
            table = self.pipelines.streams.strategy(table)
            strategy = f", {table.refresh_strategy}"
        return _plan(f"would create materialized table {identifier}, refresh mode {table.refresh_mode}"
                     f"{strategy}, freshness {table.freshness}", lambda: self.lifecycle.provision(table))

    def _analyze(self, query: str, identifier: str) -> AnalyzedQuery:
        analyzed = self.ws.analyzer.analyze(query)
        if identifier in analyzed.sources:
            raise ValidationError(f"The query of materialized table {identifier} reads the table itself.")
        return analyzed

    def _new_table(self, statement: st.CreateMaterializedTable, catalog: str, database: str,
                   name: str) -> MaterializedTable:
        identifier = f"{catalog}.{database}.{name}"
        analyzed = self._analyze(statement.query, identifier)
        schema = derive_schema(statement, analyzed.schema,
                               computed_type(lambda: self.ws.spark.sql(analyzed.definition_query)))
        partition_keys = check_partition_keys(statement.partition_keys, schema.columns)
        check_formatters(statement.options, partition_keys, schema.columns)
        storage = self._new_storage(statement.options, catalog, database, name)
        decision = self.ws.decide_mode(
            IntervalFreshness.from_literal(statement.freshness) if statement.freshness else None,
            statement.refresh_mode or AUTOMATIC)
        return MaterializedTable(
            catalog=catalog, database=database, name=name, columns=schema.columns,
            query_columns=tuple(f.name for f in analyzed.schema.fields),
            definition_query=analyzed.definition_query, original_query=statement.query,
            freshness=str(decision.freshness), logical_refresh_mode=decision.logical_mode,
            refresh_mode=decision.refresh_mode, refresh_status=INITIALIZING, storage=storage,
            primary_key=schema.primary_key, watermark=schema.watermark,
            partition_keys=partition_keys, options=dict(statement.options), comment=statement.comment,
            source_tables=analyzed.sources)

    def _new_storage(self, options: Mapping[str, str], catalog: str, database: str, name: str) -> Storage:
        storage = self.ws.storage
        fmt = data_source_format(self.ws.spark, options, default="parquet")
        if "path" in options:
            root = options["path"]
            existed = storage.files.exists(root)
            if existed and not storage.files.is_empty_dir(root):
                raise ValidationError(f"Option 'path' = '{root}' names a folder that is not empty; "
                                      "a materialized table needs a folder of its own.")
            return storage.first_storage(root, fmt, owns_root=not existed)
        data_dir = self.ws.options.get(cfg.DATA_DIR) or f"{self.ws.home()}/data"
        root = f"{data_dir}/{catalog}/{database}/{name}-{uuid.uuid4().hex[:8]}"
        return storage.first_storage(root, fmt, owns_root=True)

    def _create_or_alter(self, table: MaterializedTable, statement: st.CreateMaterializedTable) -> Plan:
        self.ws.require_not_initializing(table, "alter")
        if statement.refresh_mode and statement.refresh_mode != table.refresh_mode:
            raise ValidationError(f"Materialized table {table.identifier}: Changing of REFRESH MODE is "
                                  "unsupported.")
        # Omitted, PARTITIONED BY keeps the table's partitioning (Flink compares it only when given).
        if statement.partition_keys and \
                [k.lower() for k in statement.partition_keys] != [k.lower() for k in table.partition_keys]:
            raise ValidationError(f"Materialized table {table.identifier}: changing PARTITIONED BY is not "
                                  "supported; drop and create the table instead.")
        _check_reserved(table, statement.options, list(statement.options) + list(table.options))
        analyzed = self._analyze(statement.query, table.identifier)
        schema = derive_schema(statement, analyzed.schema,
                               computed_type(lambda: self.ws.spark.sql(analyzed.definition_query)))
        check_formatters(statement.options, table.partition_keys, schema.columns)
        changes: dict = {"options": dict(statement.options), "comment": statement.comment}
        if statement.columns or statement.primary_key or statement.watermark:
            changes.update(primary_key=schema.primary_key, watermark=schema.watermark)
        else:       # no schema part: the key and the watermark stay, and so do the key's NOT NULLs
            schema = replace(schema, columns=keyed(schema.columns, table.primary_key))
        decision = None
        if statement.freshness:
            freshness = IntervalFreshness.from_literal(statement.freshness)
            if str(freshness) != table.freshness:
                decision = self.ws.decide_mode(freshness, table.logical_refresh_mode)
        if decision is None and analyzed.definition_query == table.definition_query and \
                schema.columns == table.columns and changes["options"] == table.options and \
                changes["comment"] == table.comment and \
                changes.get("primary_key", table.primary_key) == table.primary_key and \
                changes.get("watermark", table.watermark) == table.watermark:
            # A notebook run again: nothing to change, and a streaming job keeps running.
            return _plan(f"would leave materialized table {table.identifier} unchanged",
                         lambda: Result.ok(f"Materialized table {table.identifier} is unchanged."))
        appended = self._appended(table, statement.query, analyzed, schema.columns, changes)
        return _plan(f"would alter materialized table {table.identifier}",
                     lambda: self.lifecycle.create_or_alter(table, statement.query, analyzed, appended,
                                                            changes, decision))

    def _appended(self, table: MaterializedTable, query: str, analyzed: AnalyzedQuery, columns: tuple,
                  changes: dict) -> tuple:
        """The new columns (spec §4.5); a CONTINUOUS table's strategy for the new query goes in `changes`."""
        appended = _appended_columns(table, columns)
        if table.refresh_mode == CONTINUOUS:
            chosen = self.pipelines.streams.strategy(table.evolve(
                definition_query=analyzed.definition_query, original_query=query, source_tables=analyzed.sources))
            changes.update(refresh_strategy=chosen.refresh_strategy, strategy_reason=chosen.strategy_reason)
        return appended

    # ========================================================= ALTER AS
    def _alter_query(self, statement: st.AlterQuery) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "alter")
        analyzed = with_unique_names(self._analyze(statement.query, table.identifier))
        # §4.5: the key is unchanged, so its columns stay NOT NULL by declaration.
        columns = keyed([column_from_field(f) for f in analyzed.schema.fields], table.primary_key)
        changes: dict = {}
        appended = self._appended(table, statement.query, analyzed, columns, changes)
        return _plan(f"would alter the query of materialized table {table.identifier}",
                     lambda: self.lifecycle.evolve_query(table, statement.query, analyzed, appended, changes))

    # ======================================================== ALTER SET
    def _set_freshness(self, statement: st.AlterSetFreshness) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "alter")
        decision = self.ws.decide_mode(IntervalFreshness.from_literal(statement.freshness),
                                       table.logical_refresh_mode)
        return _plan(f"would set the freshness of {table.identifier} to {decision.freshness}, refresh "
                     f"mode {decision.refresh_mode}", lambda: self.pipelines.change_mode(table, decision))

    def _set_refresh_mode(self, statement: st.AlterSetRefreshMode) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "alter")
        decision = self.ws.decide_mode(IntervalFreshness.parse(table.freshness), statement.refresh_mode)
        return _plan(f"would set the refresh mode of {table.identifier} to {decision.refresh_mode}",
                     lambda: self.pipelines.change_mode(table, decision))

    def _set_options(self, statement: st.AlterSetOptions) -> Plan:
        table = self.ws.load(statement.name)
        if not statement.options:
            raise ValidationError("ALTER MATERIALIZED TABLE SET does not support empty options.")
        options = {**table.options, **statement.options}
        _check_reserved(table, options, list(statement.options))
        check_formatters(options, table.partition_keys, table.columns)
        return _plan(f"would set {len(statement.options)} option(s) of {table.identifier}",
                     lambda: self.lifecycle.set_options(table, dict(statement.options)))

    def _reset_options(self, statement: st.AlterResetOptions) -> Plan:
        table = self.ws.load(statement.name)
        if not statement.keys:
            raise ValidationError("ALTER MATERIALIZED TABLE RESET does not support empty key.")
        for key in statement.keys:
            if key in RESERVED_OPTIONS:
                raise ValidationError(f"ALTER MATERIALIZED TABLE RESET does not support changing '{key}'.")
        return _plan(f"would reset {len(statement.keys)} option(s) of {table.identifier}",
                     lambda: self.lifecycle.reset_options(table, tuple(statement.keys)))

    # =================================================== SUSPEND/RESUME
    def _suspend(self, statement: st.AlterSuspend) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "suspend")
        if table.refresh_mode == CONTINUOUS:
            if table.refresh_status == SUSPENDED:
                raise StateError(f"Materialized table {table.identifier} continuous refresh job has been "
                                 f"suspended, jobId is {_job_text(table)}.")
        elif table.refresh_status == SUSPENDED:
            raise StateError(f"Materialized table {table.identifier} refresh workflow has been suspended.")
        return _plan(f"would suspend materialized table {table.identifier}",
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
        return _plan(f"would resume materialized table {table.identifier}",
                     lambda: self.pipelines.resume(table, dict(statement.options)))

    def _refresh(self, statement: st.AlterRefresh) -> Plan:
        table = self.ws.load(statement.name)
        spec = check_partition_spec(table, statement.partition)
        target = ", ".join(f"{k}={v}" for k, v in spec.items()) or "the whole table"
        return _plan(f"would refresh {target} of {table.identifier}",
                     lambda: self.pipelines.refresh(table, spec, None))

    # ============================================================= DROP
    def _backfill(self, statement: st.AlterBackfill) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "backfill")
        times = schedule_times(self.pipelines, table, statement.start, statement.end)
        return _plan(f"would run {len(times)} scheduled refreshes of {table.identifier}, "
                     f"{times[0] if times else '-'} to {times[-1] if times else '-'}",
                     lambda: backfill(self.pipelines, table, statement.start, statement.end))

    def _explain(self, statement: st.Explain) -> Plan:
        inner = statement.statement
        if isinstance(inner, st.AlterRefresh):
            table = self.ws.load(inner.name)
            spec = check_partition_spec(table, inner.partition)
            return _plan(f"would explain a refresh of {table.identifier}",
                         lambda: explain_refresh(self.pipelines, table, spec))
        if isinstance(inner, st.CreateMaterializedTable):
            summary = self._create(inner).summary()
            definition = self.ws.analyzer.analyze(inner.query).definition_query
            return _plan(f"would explain: {summary}", lambda: explain_create(summary, definition, self.ws.spark))
        raise ValidationError("EXPLAIN explains ALTER MATERIALIZED TABLE … REFRESH [PARTITION (…)] and "
                              "CREATE MATERIALIZED TABLE; run the statement with --dry-run to check others.")

    def _drop(self, statement: st.DropMaterializedTable) -> Plan:
        try:
            table = self.ws.load(statement.name)
        except TableNotFoundError:
            if statement.if_exists:
                return _plan("nothing to drop", lambda: Result.ok("Nothing to drop."))
            raise
        readers = [t.identifier for t in self.ws.store.list() if table.identifier in t.source_tables]
        if readers:
            raise ValidationError(f"Materialized table {table.identifier} is read by materialized table "
                                  f"{', '.join(readers)}: drop {'them' if len(readers) > 1 else 'it'} first.")
        return _plan(f"would drop materialized table {table.identifier}", lambda: self.lifecycle.drop(table))

    def _drop_table(self, statement: st.DropTable) -> Plan:
        parts = self.ws.analyzer.resolve(statement.name)
        identifier = ".".join(parts)
        if self.ws.store.get(identifier) is not None:
            raise ValidationError(f"{identifier} is a materialized table: use DROP MATERIALIZED TABLE "
                                  f"{identifier}.")
        plan = self._spark(statement)
        exists = lookup_table(self.ws.spark, *parts) is TableLookup.EXISTS
        retire = retire_versions(self.ws.spark, ".".join(map(quote_identifier, parts)), self.ws.pending) \
            if exists else None
        if retire is None:
            return plan

        def apply() -> Result:
            result = plan.apply()
            retire()      # Spark's DROP keeps the files of a table with a location: they go by age
            return result
        return Plan(plan.summary, apply)

    # ======================================================== CTAS/RTAS
    def _create_table_as(self, statement: st.CreateTableAs) -> Plan:
        if statement.or_replace and statement.if_not_exists:
            raise ValidationError("CREATE OR REPLACE TABLE AS cannot be combined with IF NOT EXISTS.")
        if statement.watermark is not None:
            raise ValidationError("WATERMARK has no meaning for a table written once by CREATE TABLE AS.")
        mode = REPLACE if statement.or_replace else IF_NOT_EXISTS if statement.if_not_exists else CREATE
        spark = self.ws.spark
        parts = check_folder_names(self.ws.analyzer.resolve(statement.name))
        target = plan_target(spark, parts, statement.options, mode, statement.partition_keys, statement.comment)
        source = spark_call(lambda: spark.sql(statement.query), "The query")
        schema = derive_schema(statement, source.schema, computed_type(lambda: source))
        check_partition_keys(statement.partition_keys, schema.columns)

        def write() -> Result:
            with job_scope(spark, f"mt_magic:ctas:{target.identifier}", f"{statement.verb} {target.identifier}"):
                return write_table_as(spark, shape(source, schema.columns, target.identifier), target,
                                      self.ws.pending)
        return _plan(f"{statement.verb} {target.identifier}", write)

    # ============================================================= SHOW
    def _show_tables(self, statement: st.ShowMaterializedTables) -> Plan:
        analyzer = self.ws.analyzer
        catalog, database = analyzer.current()
        if statement.database is not None:
            parts = statement.database.parts
            catalog, database = (parts if len(parts) == 2 else (catalog, parts[0]))
            catalog, database = analyzer.normalize(catalog), analyzer.normalize(database)
            if not self.ws.spark.catalog.databaseExists(f"{quote_identifier(catalog)}.{quote_identifier(database)}"):
                raise ValidationError(f"Database '{catalog}'.'{database}' doesn't exist.")

        def show() -> Result:
            names = [t.name for t in self.ws.store.list() if (t.catalog, t.database) == (catalog, database)]
            if statement.pattern is not None:
                regex = re.compile(_like_regex(statement.pattern), re.DOTALL)
                names = [n for n in names if bool(regex.fullmatch(n)) != statement.negate]
            return Result.table(["materialized table"], [(n,) for n in sorted(names)])
        return _plan(f"would list the materialized tables of {catalog}.{database}", show)

    def _show_create(self, statement: st.ShowCreateMaterializedTable) -> Plan:
        try:
            table = self.ws.load(statement.name)
        except TableNotFoundError as error:
            raise TableNotFoundError(f"Could not execute SHOW CREATE MATERIALIZED TABLE. {error}") from None
        return _plan(f"would show how {table.identifier} was created",
                     lambda: Result.table(["result"], [(show_create(table),)], message="1 row"))

    def _describe(self, statement: st.DescribeTable) -> Plan:
        identifier = ".".join(self.ws.analyzer.resolve(statement.name))
        table = self.ws.store.get(identifier)
        if table is None:
            return self._spark(statement)
        return _plan(f"would describe {identifier}", lambda: Result.table(
            ["col_name", "data_type", "comment"],
            describe_rows(table, statement.extended, self.pipelines.next_refresh(table))))

    # ======================================================== SET/RESET
    def _set(self, statement: st.SetOption) -> Plan:
        key, value = statement.key, statement.value
        if not key.startswith("spark."):
            self.ws.options.check(key, value)
            return _plan(f"would set '{key}'", lambda: self._apply_set(key, value))
        conf = self.ws.spark.conf
        before = conf.get(key, None)
        spark_call(lambda: conf.set(key, value), f"SET '{key}'")   # Spark's own check, then undone
        if before is None:
            conf.unset(key)
        else:
            conf.set(key, before)
        return _plan(f"would set '{key}'", lambda: self._apply_set(key, value))

    def _apply_set(self, key: str, value: str) -> Result:
        if key.startswith("spark."):
            conf = self.ws.spark.conf
            if key not in self._spark_conf_before:
                self._spark_conf_before[key] = conf.get(key, None)
            spark_call(lambda: conf.set(key, value), f"SET '{key}'")
        else:
            self.ws.options.set(key, value)
        return Result.ok(f"Set '{key}' = '{value}'.")

    def _reset(self, statement: st.ResetOption) -> Plan:
        return _plan(f"would reset '{statement.key}'" if statement.key else "would reset all session options",
                     lambda: self._apply_reset(statement.key))

    def _apply_reset(self, key: str | None) -> Result:
        for name in [key] if key else list(self._spark_conf_before):
            if name in self._spark_conf_before:
                before = self._spark_conf_before.pop(name)
                if before is None:
                    self.ws.spark.conf.unset(name)
                else:
                    self.ws.spark.conf.set(name, before)
        self.ws.options.reset(key)
        return Result.ok(f"Reset '{key}'." if key else "Reset all session options.")

    # ============================================================ Spark
    def _spark(self, statement: st.Statement) -> Plan:
        """Spark validates its own statements when they run; a dry run has Spark parse them. A
        materialized table is written only by its pipeline: Spark statements that write or alter one
        are refused, naming the statement to use."""
        spark = self.ws.spark
        written = written_table(statement.text)
        if written is not None:
            verb, ref, after = written
            identifier = ".".join(self.ws.analyzer.resolve(st.ObjectName(ref.parts)))
            if self.ws.store.get(identifier) is not None:
                raise ValidationError(f"{identifier} is a materialized table: {verb} does not apply to it "
                                      f"({_instead(verb, after)}).")

        def run() -> Result:
            frame = spark_call(lambda: spark.sql(statement.text), "Spark")
            if not frame.columns:
                return Result.ok()
            limit = int(self.ws.options.get(cfg.RESULT_ROWS))
            rows = spark_call(lambda: frame.limit(limit + 1).collect(), "Spark")
            return Result.table(frame.columns, [tuple(r) for r in rows[:limit]], truncated=len(rows) > limit,
                                frame=frame)
        return Plan(lambda: self.ws.analyzer.check_spark_statement(statement.text), run)


def _instead(verb: str, after: str) -> str:
    if verb == "ALTER TABLE":
        if after == "RENAME":
            return "its name is its identity in the catalog store: drop it and create it under the new name"
        if after == "ADD":
            return "append columns with ALTER MATERIALIZED TABLE … AS and a query that produces them"
        return ("its storage, partitions and properties are managed by its refreshes: use ALTER MATERIALIZED "
                "TABLE … SET (…) / RESET for its options")
    return ("it is written only by its refreshes: use ALTER MATERIALIZED TABLE … REFRESH [PARTITION (…)], or "
            "change what it holds with ALTER MATERIALIZED TABLE … AS")


def _check_reserved(table: MaterializedTable, new: Mapping[str, str], keys: list[str]) -> None:
    for key in keys:
        if key in RESERVED_OPTIONS and new.get(key) != table.options.get(key):
            raise ValidationError(f"ALTER MATERIALIZED TABLE {table.identifier} does not support "
                                  f"changing '{key}': the data is stored that way.")


def _appended_columns(table: MaterializedTable, columns: tuple) -> tuple:
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


def _column_text(column) -> str:
    return f"`{column.name}` {column.type.upper()}{'' if column.nullable else ' NOT NULL'}"


def _check_free(lookup: TableLookup, or_alter: bool, catalog: str, database: str, name: str) -> None:
    identifier = f"{catalog}.{database}.{name}"
    if lookup is TableLookup.EXISTS:
        if or_alter:
            raise ValidationError(f"Table {identifier}: Regular table does not support create or alter "
                                  "operation.")
        raise ValidationError(f"Table {identifier} already exists and is not a materialized table.")
    if lookup is TableLookup.NO_DATABASE:
        raise ValidationError(f"Database '{catalog}'.'{database}' doesn't exist.")


def _job_text(table: MaterializedTable) -> str:
    return (table.job.streaming_query_id if table.job else None) or "<none>"


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
