"""Plans of the statements about the session and Spark's own tables: SHOW, SHOW CREATE, DESCRIBE,
SET / RESET, CREATE [OR REPLACE] TABLE … AS, DROP TABLE and every other Spark statement, which Spark
runs — except that nothing but a table's pipeline writes a materialized table."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mt_magic import config as cfg
from mt_magic.errors import TableNotFoundError, ValidationError
from mt_magic.manager.describe import describe_rows, show_create
from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.plans.plan import Family, Plan, make_plan
from mt_magic.manager.schema import check_partition_keys, computed_type, derive_schema
from mt_magic.manager.workspace import Workspace, check_folder_names
from mt_magic.refresh.full import shape
from mt_magic.results import Result
from mt_magic.spark.tables import TableLookup, lookup_table
from mt_magic.spark.errors import spark_call
from mt_magic.spark.jobs import job_scope
from mt_magic.sql import statements as st
from mt_magic.sql.relation_spans import written_table
from mt_magic.sql.statements import like_regex, quote_identifier
from mt_magic.storage.table_as import CREATE, IF_NOT_EXISTS, REPLACE, plan_target, retire_versions, write_table_as


class SessionStatements(Family):
    def __init__(self, ws: Workspace, pipelines: Pipelines, lifecycle: Lifecycle) -> None:
        super().__init__(ws, pipelines, lifecycle)
        self._spark_conf_before: dict[str, str | None] = {}    # what RESET gives back

    def planners(self) -> dict[type, Callable[[Any], Plan]]:
        return {st.ShowMaterializedTables: self._show_tables, st.ShowCreateMaterializedTable: self._show_create,
                st.DescribeTable: self._describe, st.SetOption: self._set, st.ResetOption: self._reset,
                st.CreateTableAs: self._create_table_as, st.DropTable: self._drop_table,
                st.SparkStatement: self._spark}

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
            names = [n for c, d, n in self.ws.store.names() if (c, d) == (catalog, database)]
            if statement.pattern is not None:
                regex = re.compile(like_regex(statement.pattern), re.DOTALL)
                names = [n for n in names if bool(regex.fullmatch(n)) != statement.negate]
            return Result.table(["materialized table"], [(n,) for n in sorted(names)])
        return make_plan(f"would list the materialized tables of {catalog}.{database}", show)

    def _show_create(self, statement: st.ShowCreateMaterializedTable) -> Plan:
        try:
            table = self.ws.load(statement.name)
        except TableNotFoundError as error:
            raise TableNotFoundError(f"Could not execute SHOW CREATE MATERIALIZED TABLE. {error}") from None
        return make_plan(f"would show how {table.identifier} was created",
                         lambda: Result.table(["result"], [(show_create(table),)], message="1 row"))

    def _describe(self, statement: st.DescribeTable) -> Plan:
        identifier = ".".join(self.ws.analyzer.resolve(statement.name))
        table = self.ws.store.get(identifier)
        if table is None:
            return self._spark(statement)
        return make_plan(f"would describe {identifier}", lambda: Result.table(
            ["col_name", "data_type", "comment"],
            describe_rows(table, statement.extended, self.pipelines.next_refresh(table),
                          self.pipelines.technique(table), self.pipelines.state(table).up_to_date_as_of(),
                          self.pipelines.plan(table) if statement.extended else [])))

    def _set(self, statement: st.SetOption) -> Plan:
        key, value = statement.key, statement.value
        if not key.startswith("spark."):
            self.ws.options.check(key, value)
            return make_plan(f"would set '{key}'", lambda: self._apply_set(key, value))
        conf = self.ws.spark.conf
        before = conf.get(key, None)
        spark_call(lambda: conf.set(key, value), f"SET '{key}'")   # Spark's own check, then undone
        if before is None:
            conf.unset(key)
        else:
            conf.set(key, before)
        return make_plan(f"would set '{key}'", lambda: self._apply_set(key, value))

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
        return make_plan(f"would reset '{statement.key}'" if statement.key else "would reset all session options",
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
        return make_plan(f"{statement.verb} {target.identifier}", write)

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
