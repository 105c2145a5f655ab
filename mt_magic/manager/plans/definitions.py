"""Plans of the statements that define a materialized table: CREATE, CREATE OR ALTER, ALTER … AS.
Everything that would make them fail is checked here, before anything changes (spec §4.1, §4.5)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from mt_magic import config as cfg
from mt_magic.catalog.model import INITIALIZING, MaterializedTable, Storage
from mt_magic.errors import ValidationError
from mt_magic.incremental.rules import Recompute, Rule
from mt_magic.manager.plans.plan import Family, Plan, make_plan
from mt_magic.manager.schema import (check_formatters, check_partition_keys, column_from_field,
                                     computed_type, derive_schema, keyed, with_unique_names)
from mt_magic.results import Result
from mt_magic.spark.analysis import AnalyzedQuery
from mt_magic.spark.tables import TableLookup, lookup_table
from mt_magic.spark.commands import alongside
from mt_magic.sql import statements as st
from mt_magic.sql.freshness import AUTOMATIC, CONTINUOUS, IntervalFreshness
from mt_magic.storage.formats import RESERVED_OPTIONS, data_source_format


class Definitions(Family):
    def planners(self) -> dict[type, Callable[[Any], Plan]]:
        return {st.CreateMaterializedTable: self.create, st.AlterQuery: self._alter_query}

    def create(self, statement: st.CreateMaterializedTable) -> Plan:
        return self.creating(statement)[0]

    def creating(self, statement: st.CreateMaterializedTable,
                 judged: bool = False) -> tuple[Plan, MaterializedTable | None]:
        """The CREATE's plan, and the table it would make (None: an existing table altered). `judged`:
        its technique as Spark judges the query (EXPLAIN), not by its syntax alone (a CREATE's summary
        is not kept waiting for Spark)."""
        self.ws.analyzer.begin(statement.query)
        catalog, database, name = self.ws.identifier(statement.name)
        identifier = f"{catalog}.{database}.{name}"
        existing = self.ws.store.get(identifier)
        if existing is not None:
            if not statement.or_alter:
                raise ValidationError(f"Materialized table {identifier} already exists; CREATE OR ALTER "
                                      "MATERIALIZED TABLE runs again harmlessly (unchanged when identical).")
            return self._create_or_alter(existing, statement), None
        lookup = alongside(self.ws.spark, lookup_table, self.ws.spark, catalog, database, name)
        if statement.refresh_mode != CONTINUOUS:      # where the sources live, asked while Spark analyses
            self.pipelines.begin(sources=self.ws.analyzer.guessed_sources(statement.query))
        try:
            table = self._new_table(statement, catalog, database, name)
            if table.refresh_mode != CONTINUOUS:
                self.pipelines.begin(table)
        finally:    # the name's errors come before the query's
            _check_free(lookup.result(), statement.or_alter, catalog, database, name)
        check_policy(table, self.pipelines.rule)
        strategy = ""
        if table.refresh_mode == CONTINUOUS:
            table = self.pipelines.strategy(table)
            strategy = f", {table.refresh_strategy}"
        technique = "" if table.streams else \
            f", refresh technique {self.pipelines.technique(table, judged=judged)}"
        return make_plan(f"would create materialized table {identifier}, refresh mode {table.refresh_mode}"
                         f"{strategy}, freshness {table.freshness}{technique}",
                         lambda: self.lifecycle.provision(table)), table

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
        refresh_policy(statement.options)
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
            existed = self.ws.files.exists(root)
            if existed and not self.ws.files.is_empty_dir(root):
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
        check_reserved(table, statement.options, list(statement.options) + list(table.options))
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
            return make_plan(f"would leave materialized table {table.identifier} unchanged",
                             lambda: Result.ok(f"Materialized table {table.identifier} is unchanged."))
        appended = self._appended(table, statement.query, analyzed, schema.columns, changes)
        check_policy(table.evolve(definition_query=analyzed.definition_query, options=changes["options"]),
                     self.pipelines.rule)
        return make_plan(f"would alter materialized table {table.identifier}",
                         lambda: self.lifecycle.create_or_alter(table, statement.query, analyzed, appended,
                                                                changes, decision))

    def _appended(self, table: MaterializedTable, query: str, analyzed: AnalyzedQuery, columns: tuple,
                  changes: dict) -> tuple:
        """The new columns (spec §4.5); a CONTINUOUS table's strategy for the new query goes in `changes`."""
        appended = _appended_columns(table, columns)
        if table.refresh_mode == CONTINUOUS:
            chosen = self.pipelines.strategy(table.evolve(
                definition_query=analyzed.definition_query, original_query=query, source_tables=analyzed.sources))
            changes.update(refresh_strategy=chosen.refresh_strategy, strategy_reason=chosen.strategy_reason)
        return appended

    def _alter_query(self, statement: st.AlterQuery) -> Plan:
        table = self.ws.load(statement.name)
        self.ws.require_not_initializing(table, "alter")
        analyzed = with_unique_names(self._analyze(statement.query, table.identifier))
        # §4.5: the key is unchanged, so its columns stay NOT NULL by declaration.
        columns = keyed([column_from_field(f) for f in analyzed.schema.fields], table.primary_key)
        changes: dict = {}
        appended = self._appended(table, statement.query, analyzed, columns, changes)
        return make_plan(f"would alter the query of materialized table {table.identifier}",
                         lambda: self.lifecycle.evolve_query(table, statement.query, analyzed, appended, changes))


def refresh_policy(options: Mapping[str, str]) -> str:
    """The table's 'refresh.policy', checked (and the size of a small source, beside it)."""
    cfg.parse_size(options.get(cfg.SMALL_SOURCE_SIZE, cfg.SMALL_SOURCE_DEFAULT), cfg.SMALL_SOURCE_SIZE)
    policy = options.get(cfg.REFRESH_POLICY, "auto")
    if policy not in cfg.REFRESH_POLICIES:
        raise ValidationError(f"Option '{cfg.REFRESH_POLICY}' = '{policy}' is not one of "
                              f"{', '.join(repr(p) for p in cfg.REFRESH_POLICIES)}.")
    return policy


def check_policy(table: MaterializedTable, rule: Callable[[MaterializedTable], Rule]) -> None:
    """A table whose policy is 'incremental' must have a query the delta rules maintain."""
    if refresh_policy(table.options) != "incremental":
        return
    found = rule(table)
    if isinstance(found, Recompute):
        reason = found.reason
        raise ValidationError(f"Materialized table {table.identifier} has '{cfg.REFRESH_POLICY}' = "
                              f"'incremental', but its query cannot be maintained incrementally: {reason}. "
                              f"Set '{cfg.REFRESH_POLICY}' to 'auto' or 'full', or change the query.")


def check_reserved(table: MaterializedTable, new: Mapping[str, str], keys: list[str]) -> None:
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
