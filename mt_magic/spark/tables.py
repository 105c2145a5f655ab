"""Spark's catalog beyond its public API: data sources, table facts, partition locations.

Public SQL (DESCRIBE, SHOW, ALTER TABLE) works over both kinds of session; a classic session also
reaches its session catalog in the JVM (`session_catalog`): one call where a statement would be
analysed, many partition locations switched at once, and no re-listing of what its readers hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import unquote

from mt_magic.errors import ValidationError
from mt_magic.spark import session_catalog
from mt_magic.spark.commands import alongside, command_rows
from mt_magic.spark.errors import SPARK_ERRORS, error_class, spark_call, spark_message
from mt_magic.spark.kind import is_connect
from mt_magic.spark.sessions import session_info
from mt_magic.sql.statements import quote_identifier, sql_string
from mt_magic.sql.tokens import quoted_names

PartitionKey = session_catalog.PartitionKey
_NO_DATA_SOURCE = re.compile(r"\[[A-Z_]*DATA_SOURCE_NOT_(FOUND|ENABLED)\]")


_BUILT_IN_FORMATS = frozenset({"parquet", "orc", "json", "csv", "text"})


def check_data_source(spark: Any, fmt: str) -> None:
    """Spark has a data source of that name (reading it resolves the name, and reads nothing)."""
    if fmt.lower() in _BUILT_IN_FORMATS:
        return
    try:
        spark.read.format(fmt).schema("c INT").load().schema   # noqa: B018 - resolves the source
    except SPARK_ERRORS as error:
        if _NO_DATA_SOURCE.search(spark_message(error)):
            raise ValidationError(f"Option 'format' = '{fmt}': Spark has no data source of that name "
                                  f"here (built in: {', '.join(sorted(_BUILT_IN_FORMATS))}).") from None


@contextmanager
def partition_metadata(spark: Any, in_catalog: bool) -> Iterator[None]:
    """Tables created inside keep their partitions in the catalog, or (False) let Spark discover
    them under the table's location, so that one location change switches them all."""
    if in_catalog:
        yield
        return
    key = "spark.sql.hive.manageFilesourcePartitions"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def partition_clause(spec: Mapping[str, str]) -> str:
    return "PARTITION (" + ", ".join(f"{quote_identifier(k)} = {sql_string(v)}"
                                     for k, v in spec.items()) + ")"


@dataclass(frozen=True)
class TableFacts:
    kind: str                       # MANAGED, EXTERNAL, VIEW
    location: str | None
    partition_columns: tuple[str, ...]
    reads_as: tuple = ()            # what readers read by: columns and types, provider, options
    provider: str | None = None     # the data source (parquet, orc, hive, ...)


def _reads_as(rows: list[tuple], details: dict[str, str]) -> tuple:
    columns = []
    for row in rows:
        if not row[0] or row[0].startswith("#"):
            break
        columns.append((row[0], row[1]))
    options = sorted(o for o in details.get("Storage Properties", "").strip("[]").split(", ")
                     if o and not o.startswith("path="))
    return tuple(columns), details.get("Provider"), tuple(options)


def table_facts(spark: Any, quoted: str) -> TableFacts:
    """What DESCRIBE TABLE EXTENDED says of a table's type, location and partition columns."""
    rows = spark_call(lambda: command_rows(spark, f"DESCRIBE TABLE EXTENDED {quoted}"), f"Describing {quoted}")
    details = {r[0]: r[1] for r in rows[rows.index(("# Detailed Table Information", "", "")):]} \
        if ("# Detailed Table Information", "", "") in rows else {}
    partition_columns: list[str] = []
    if ("# Partition Information", "", "") in rows:
        for row in rows[rows.index(("# Partition Information", "", "")) + 2:]:
            if not row[0] or row[0].startswith("#"):
                break
            partition_columns.append(row[0])
    return TableFacts(details.get("Type", ""), details.get("Location"), tuple(partition_columns),
                      _reads_as(rows, details), details.get("Provider"))


_PLAIN_NAME = re.compile(r"[a-z0-9_]+")      # a name SHOW TABLES' pattern matches as itself


def tables_facts(spark: Any, identifiers: Sequence[str]) -> dict[str, TableFacts]:
    """Where tables live and what they are (catalog.database.name each): one SHOW TABLE EXTENDED per
    database, side by side over Connect, instead of a DESCRIBE per table. A table it does not list
    (a name its pattern cannot hold, or a table gone) is described alone, which raises what is wrong.
    A classic session asks its own catalog first (a call per table, and no statement to analyse)."""
    found = {} if is_connect(spark) else {i: TableFacts(kind, location, columns, provider=provider) for i, (
        kind, location, columns, provider) in session_catalog.tables_facts(spark, identifiers).items()}
    groups: dict[tuple[str, str], list[str]] = {}
    for identifier in (i for i in identifiers if i not in found):
        catalog, database, name = identifier.split(".", 2)
        if _PLAIN_NAME.fullmatch(name):
            groups.setdefault((catalog, database), []).append(name)
    listed = _listed(spark, {key: "|".join(names) for key, names in groups.items()})
    found |= {f"{catalog}.{database}.{name}": facts
              for (catalog, database), tables in listed.items() for name, facts in tables.items()}
    return {i: found[i] if i in found else table_facts(spark, ".".join(map(quote_identifier, i.split(".", 2))))
            for i in identifiers}


def databases_tables(spark: Any, databases: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[str, TableFacts]]:
    """Every table of each (catalog, database) and where it lives, by lower-cased name."""
    return {key: {name.lower(): facts for name, facts in tables.items()}
            for key, tables in _listed(spark, {key: "*" for key in databases}).items()}


def _listed(spark: Any, patterns: dict[tuple[str, str], str]) -> dict[tuple[str, str], dict[str, TableFacts]]:
    """The tables (not temporary views) of each (catalog, database) that its pattern matches: one SHOW
    TABLE EXTENDED per database, side by side over Connect."""
    asked = {key: alongside(spark, command_rows, spark, f"SHOW TABLE EXTENDED IN {quote_identifier(key[0])}."
                            f"{quote_identifier(key[1])} LIKE {sql_string(pattern)}")
             for key, pattern in patterns.items()}
    return {key: {row[1]: _facts_of_information(row[3])
                  for row in spark_call(request.result, f"Listing the tables of {key[0]}.{key[1]}") if not row[2]}
            for key, request in asked.items()}


def _facts_of_information(information: str) -> TableFacts:
    details = dict(line.split(": ", 1) for line in information.splitlines() if ": " in line)
    columns = quoted_names(details.get("Partition Columns", ""))
    return TableFacts(details.get("Type", ""), details.get("Location"), tuple(columns),
                      provider=details.get("Provider"))


def refresh_listings(spark: Any, identifiers: tuple[str, ...]) -> None:
    """Forget this session's cached file listings of these tables (catalog.database.name each), which
    a write from another session or application does not invalidate. Over Connect the requests
    travel side by side (a query over eight tables waits for one round trip, not eight); a server
    that keeps no listings (one mt_magic starts) needs none: each of its reads lists the files (and
    a table a user CACHEd there stays as cached, as for any query on it)."""
    quoted = ['.'.join(quote_identifier(p) for p in i.split('.', 2)) for i in identifiers]
    if not is_connect(spark):
        for name in quoted:
            forget_listing(spark, name)
        return
    if not session_info(spark).keeps_listings:
        return
    pending = [alongside(spark, spark.sql, f"REFRESH TABLE {name}") for name in quoted]
    for request in pending:
        request.result()


def forgetting_listings(spark: Any, identifiers: tuple[str, ...]) -> Future | None:
    """Over Connect, the session's cached listings of these tables being forgotten, not waited for
    (the request travels beside the snapshot's); None in a classic session, which forgets them when
    a refresh reads the tables."""
    return alongside(spark, refresh_listings, spark, identifiers) if is_connect(spark) else None


def forget_listing(spark: Any, quoted: str) -> None:
    """The next read of the table lists its files afresh. A classic session drops its cached relation
    (see `session_catalog`); over Connect, or for another catalog's table, REFRESH TABLE (a server
    mt_magic starts keeps no relation cache)."""
    ident = None if is_connect(spark) else session_catalog.session_ident(spark, quoted)
    if ident is None:
        spark_call(lambda: spark.sql(f"REFRESH TABLE {quoted}"), f"Refreshing {quoted}")
        return
    session_catalog.forget(spark, ident, quoted)


def set_table_location(spark: Any, quoted: str, location: str, what: str) -> None:
    """Point a table (not its partitions) at another folder: one catalog change readers see whole. A
    classic session changes its catalog's entry itself (see `session_catalog`); elsewhere, and for a
    view or a missing table (Spark's own refusal), the statement."""
    if is_connect(spark) or not spark_call(lambda: session_catalog.switch_location(spark, quoted, location), what):
        spark_call(lambda: spark.sql(f"ALTER TABLE {quoted} SET LOCATION {sql_string(location)}"), what)


def database_location(spark: Any, catalog: str, database: str) -> str:
    rows = command_rows(spark, f"DESCRIBE DATABASE EXTENDED {quote_identifier(catalog)}."
                               f"{quote_identifier(database)}")
    return next(r[1] for r in rows if r[0] == "Location")


def partition_locations(spark: Any, quoted: str, keys: tuple[str, ...]) -> dict[PartitionKey, str]:
    """Every partition's spec and location."""
    if not is_connect(spark):
        return session_catalog.partition_locations(spark, quoted)
    found = {}
    for row in command_rows(spark, f"SHOW PARTITIONS {quoted}"):
        pairs = [part.split("=", 1) for part in row[0].split("/")]
        spec = tuple((key, _unescape_path_name(value)) for (_, value), key in zip(pairs, keys))
        detail = command_rows(spark, f"DESCRIBE TABLE EXTENDED {quoted} {partition_clause(dict(spec))}")
        found[spec] = next(r[1] for r in detail if r[0] == "Location")
    return found


def switches_partitions_at_once(spark: Any) -> bool:
    """Whether a table's partitions, kept in the catalog, switch to new locations in one step for
    readers (a classic session's catalog call); over Connect a partitioned table's data is better
    read from its folders, switched by the table's one location."""
    return not is_connect(spark)


def switch_partition_locations(spark: Any, quoted: str, locations: Mapping[PartitionKey, str]) -> None:
    """Point existing partitions at new locations.

    A classic session makes one call of Spark's session catalog: readers see the switch as a single
    step. Over Spark Connect each partition is one ALTER TABLE … SET LOCATION statement, atomic per
    partition.
    """
    if not locations:
        return
    if not is_connect(spark):
        session_catalog.switch_partition_locations(spark, quoted, locations)
        return
    for spec, location in locations.items():
        spark_call(lambda: spark.sql(f"ALTER TABLE {quoted} {partition_clause(dict(spec))} SET LOCATION "
                                     f"{sql_string(location)}"), f"Publishing partitions of {quoted}")


def _unescape_path_name(value: str) -> str:
    """SHOW PARTITIONS escapes values as Hive path names (%XX)."""
    return unquote(value)


def is_catalog(spark: Any, name: str) -> bool:
    return any(c.name.lower() == name.lower() for c in spark.catalog.listCatalogs())


def temporary_functions(spark: Any) -> set[str]:
    """Names of the session's temporary functions (persistent ones come back qualified)."""
    return {r[0].lower() for r in command_rows(spark, "SHOW USER FUNCTIONS") if "." not in r[0]}


def builtin_functions(spark: Any) -> frozenset[str]:
    """The functions Spark ships: fixed for a session's life."""
    return frozenset(r[0].lower() for r in command_rows(spark, "SHOW SYSTEM FUNCTIONS"))


class TableLookup(Enum):
    EXISTS = "exists"
    MISSING = "missing"
    NO_DATABASE = "no database"


def lookup_table(spark: Any, catalog: str, database: str, name: str) -> TableLookup:
    """Whether a catalog table (not a temporary view) exists, and its database.

    A classic session asks its catalog in the JVM. Over Connect one SHOW TABLES answers both
    questions in a round trip (the catalog API would take two); its pattern is the name itself when
    that is a plain word, else every table, filtered here.
    """
    namespace = f"{quote_identifier(catalog)}.{quote_identifier(database)}"
    if not is_connect(spark):
        if not spark.catalog.databaseExists(namespace):
            return TableLookup.NO_DATABASE
        exists = spark.catalog.tableExists(f"{namespace}.{quote_identifier(name)}")
        return TableLookup.EXISTS if exists else TableLookup.MISSING
    pattern = name if re.fullmatch(r"\w+", name) else "*"
    try:
        rows = command_rows(spark, f"SHOW TABLES IN {namespace} LIKE {sql_string(pattern)}")
    except SPARK_ERRORS as error:
        if error_class(error) in ("SCHEMA_NOT_FOUND", "NO_SUCH_NAMESPACE"):
            return TableLookup.NO_DATABASE
        raise
    found = any(table == name and not temporary for _, table, temporary in rows)
    return TableLookup.EXISTS if found else TableLookup.MISSING
