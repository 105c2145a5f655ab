"""What every part of the manager shares: the session, the store, options, names, locks, the zone."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import tzinfo
from typing import Any

from mt_magic import config as cfg
from mt_magic.catalog.model import INITIALIZING, MaterializedTable
from mt_magic.catalog.pending import PendingWrites
from mt_magic.catalog.store import CatalogStore
from mt_magic.errors import StateError, TableNotFoundError, ValidationError
from mt_magic.spark.analysis import QueryAnalyzer
from mt_magic.spark.tables import TableLookup, lookup_table
from mt_magic.spark.sessions import conf_value
from mt_magic.spark.session_catalog import SESSION_CATALOG
from mt_magic.spark.files import Files
from mt_magic.storage.versions import TableStorage
from mt_magic.sql import statements as st
from mt_magic.sql.freshness import IntervalFreshness, ModeDecision, derive_refresh_mode
from mt_magic.sql.parser import parse_name
from mt_magic.sql.zones import zone_named


_SESSION_NAME = re.compile(r"[A-Za-z0-9_]+")


def check_folder_names(parts: tuple[str, str, str]) -> tuple[str, str, str]:
    """Names become folders under the data directory: none may lead out of it, or hold a separator.
    Spark's session catalog takes names of ASCII letters, digits and underscores only, and says so
    only when the table is created, after the work: here the plan says it first."""
    quoted = ".".join(st.quote_identifier(part) for part in parts)
    for part in parts:
        if part in (".", "..") or any(c in part for c in "/\\\0"):
            raise ValidationError(f"Table name {quoted}: a name part may not be '.' or '..' nor "
                                  "hold '/', '\\' or NUL, because it names a folder of the table's data.")
    if parts[0] == SESSION_CATALOG:
        for part in parts[1:]:
            if not _SESSION_NAME.fullmatch(part):
                raise ValidationError(f"Table name {quoted}: {st.quote_identifier(part)} is not a name Spark's "
                                      f"session catalog '{SESSION_CATALOG}' takes; its database and table names "
                                      "hold only the letters a-z and A-Z, digits and '_'.")
    return parts


class Workspace:
    """One session and one catalog store, and the lookups every statement needs."""

    def __init__(self, spark: Any, catalog_store: str | None, config: Mapping[str, str] | None) -> None:
        self.spark = spark
        self.options = cfg.Options(config)
        advertised = None if catalog_store else conf_value(spark, cfg.CATALOG_STORE_CONF)
        self.store = CatalogStore(cfg.catalog_store_path(catalog_store, advertised))
        self.pending = PendingWrites(self.store.path)
        self.analyzer = QueryAnalyzer(spark)
        self.storage = TableStorage(spark)

    @property
    def files(self) -> Files:
        """The file system the tables, their checkpoints and savepoints live on."""
        return self.storage.files

    # ------------------------------------------------------------- names
    def name(self, text: str) -> st.ObjectName:
        """A table name a user typed (an argument of the Python API, an option naming tables)."""
        return parse_name(text)

    def identifier(self, name: st.ObjectName) -> tuple[str, str, str]:
        catalog, database, table = check_folder_names(self.analyzer.resolve(name))
        if catalog != SESSION_CATALOG:
            raise ValidationError(f"Materialized table {'.'.join((catalog, database, table))}: only the "
                                  f"session catalog '{SESSION_CATALOG}' can hold materialized tables.")
        return catalog, database, table

    def stored(self, identifier: str) -> MaterializedTable:
        """The record of a table known by its identifier (a scheduler's fire): gone if dropped meanwhile."""
        table = self.store.get(identifier)
        if table is None:
            raise TableNotFoundError(f"Materialized table with identifier {identifier} does not exist.")
        return table

    def load(self, name: st.ObjectName) -> MaterializedTable:
        parts = self.identifier(name)
        identifier = ".".join(parts)
        table = self.store.get(identifier)
        if table is not None:
            return table
        if lookup_table(self.spark, *parts) is TableLookup.EXISTS:
            raise ValidationError(f"Table {identifier} is not a materialized table, does not support "
                                  "materialized table related operation.")
        raise TableNotFoundError(f"Materialized table with identifier {identifier} does not exist.")

    # ------------------------------------------------------------- rules
    def decide_mode(self, freshness: IntervalFreshness | None, logical_mode: str) -> ModeDecision:
        return derive_refresh_mode(freshness, logical_mode,
                                   self.options.duration(cfg.FRESHNESS_THRESHOLD),
                                   self.options.duration(cfg.DEFAULT_FRESHNESS_CONTINUOUS),
                                   self.options.duration(cfg.DEFAULT_FRESHNESS_FULL))

    @staticmethod
    def require_not_initializing(table: MaterializedTable, operation: str) -> None:
        if table.refresh_status == INITIALIZING:
            raise StateError(f"Materialized table {table.identifier} is being initialized and does not "
                             f"support {operation} operation.")

    def retention_s(self) -> float:
        return self.options.duration(cfg.VERSION_RETENTION).total_seconds()

    def home(self) -> str:
        """The catalog store's own folder: default data, checkpoints and savepoints live there."""
        return self.store.home

    # ------------------------------------------------------------ shared
    def lock(self, identifier: str):
        """The table's lock, across threads and processes (a streaming batch may run elsewhere)."""
        return self.store.table_lock(identifier)

    def zone(self) -> tzinfo:
        """The session time zone: one zone for cron and for the T − freshness rule."""
        return zone_named(self.spark.conf.get("spark.sql.session.timeZone") or "UTC")
