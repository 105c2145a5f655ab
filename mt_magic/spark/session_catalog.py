"""A classic session's own catalog, reached in its JVM: a call where SQL would parse and analyse a
statement, and no re-listing of the file listings readers of the session hold.

Spark's ALTER TABLE … SET LOCATION and REFRESH TABLE list a table's cached relation again, in place;
a reader of the same session planning with that relation at that moment can be handed a partition
spec being rebuilt (Spark's INTERNAL_ERROR, seen once on CI). Here the catalog entry is changed and
the cached relation dropped instead: the next read builds its own. Only the session catalog
(`spark_catalog`) is reached this way; the callers use SQL for any other, and over Connect.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mt_magic.errors import ParseError
from mt_magic.spark.errors import SPARK_ERRORS
from mt_magic.sql.parser import parse_name

PartitionKey = tuple[tuple[str, str], ...]
Facts = tuple[str, str | None, tuple[str, ...], str | None]     # type, location, partition columns, provider
SESSION_CATALOG = "spark_catalog"
def _parts(spark: Any, quoted: str) -> list[str]:
    """The parts of a name as the statement parser reads it; else as Spark's parser does."""
    try:
        return list(parse_name(quoted).parts)
    except ParseError:
        pass
    parts = spark._jsparkSession.sessionState().sqlParser().parseMultipartIdentifier(quoted)
    return [parts.apply(i) for i in range(parts.size())]


@dataclass(frozen=True)
class _Classes:
    """The JVM classes used here: each step of a name through the JVM view is a round trip."""

    some: Any
    option: Any
    table_identifier: Any
    catalog_utils: Any


def _classes(spark: Any) -> _Classes:
    jvm = spark._jvm
    found = jvm.__dict__.get("_mt_magic_classes")      # not getattr: the view would ask the JVM
    if found is None:
        found = _Classes(jvm.scala.Some, jvm.scala.Option, jvm.org.apache.spark.sql.catalyst.TableIdentifier,
                         jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils)
        jvm.__dict__["_mt_magic_classes"] = found
    return found


def _ident(spark: Any, database: str, name: str) -> Any:
    classes = _classes(spark)
    return classes.table_identifier(name, classes.some(database), classes.some(SESSION_CATALOG))


def session_ident(spark: Any, quoted: str) -> Any | None:
    """The TableIdentifier of catalog.database.name in the session catalog; None for another
    catalog's table."""
    parts = _parts(spark, quoted)
    if len(parts) != 3 or parts[0].lower() != SESSION_CATALOG:
        return None
    return _ident(spark, parts[1], parts[2])


def forget(spark: Any, ident: Any, quoted: str) -> None:
    """Drop the session's cached relation; a table a user CACHEd is cached again, as REFRESH TABLE
    does (from a fresh relation, that no reader plans with yet)."""
    session = spark._jsparkSession
    session.sessionState().catalog().invalidateCachedTable(ident)
    if not session.sharedState().cacheManager().isEmpty():
        spark.catalog.refreshTable(quoted)


def switch_location(spark: Any, quoted: str, location: str) -> bool:
    """Point a session-catalog table at another folder and drop the cached relation. The statistics,
    which describe the old data, go (as ALTER TABLE … SET LOCATION drops them). False, having done
    nothing, for what ALTER TABLE should answer itself: a view, a missing table, another catalog."""
    ident = session_ident(spark, quoted)
    catalog = spark._jsparkSession.sessionState().catalog()
    try:
        table = None if ident is None else catalog.getTableMetadata(ident)
    except SPARK_ERRORS:
        table = None
    if table is None or table.tableType().name() == "VIEW":
        return False
    classes = _classes(spark)
    storage = _copy_with(table.storage(), 0, classes.some(classes.catalog_utils.stringToURI(location)))  # its URI
    catalog.alterTable(_copy_with(table, 2, storage))                            # its storage
    # A second write: Hive's catalog keeps the old entry's statistics through alterTable.
    if table.stats().isDefined():
        catalog.alterTableStats(ident, classes.option.empty())
    forget(spark, ident, quoted)
    return True


def tables_facts(spark: Any, identifiers: Sequence[str]) -> dict[str, Facts]:
    """(type, location, partition columns, provider) of the session-catalog tables among
    catalog.database.name identifiers, as SHOW TABLE EXTENDED writes them; a table not found (or
    of another catalog) is left out."""
    catalog = spark._jsparkSession.sessionState().catalog()
    to_string = _classes(spark).catalog_utils.URIToString
    found = {}
    for identifier in identifiers:
        catalog_name, database, name = identifier.split(".", 2)
        if catalog_name.lower() != SESSION_CATALOG:
            continue
        try:
            table = catalog.getTableMetadata(_ident(spark, database, name))
        except SPARK_ERRORS:
            continue
        uri, columns, provider = table.storage().locationUri(), table.partitionColumnNames(), table.provider()
        found[identifier] = (table.tableType().name(), to_string(uri.get()) if uri.isDefined() else None,
                             tuple(columns.apply(i) for i in range(columns.size())),
                             provider.get() if provider.isDefined() else None)
    return found


def _copy_with(product: Any, index: int, value: Any) -> Any:
    """A copy of a Scala case class with one field changed (the others, whatever this Spark version
    has, read back from it)."""
    return product.copy(*[value if i == index else product.productElement(i) for i in range(product.productArity())])


def _partitioned_ident(spark: Any, quoted: str) -> Any:
    """The identifier of a partitioned table mt_magic keeps: always in the session catalog."""
    ident = session_ident(spark, quoted)
    if ident is None:
        raise ValueError(f"{quoted} is not a table of the session catalog")
    return ident


def partition_locations(spark: Any, quoted: str) -> dict[PartitionKey, str]:
    catalog = spark._jsparkSession.sessionState().catalog()
    ident = _partitioned_ident(spark, quoted)
    columns = catalog.getTableMetadata(ident).partitionColumnNames()
    keys = [columns.apply(i) for i in range(columns.size())]
    partitions = catalog.listPartitions(ident, _classes(spark).option.empty())
    to_string = _classes(spark).catalog_utils.URIToString
    found = {}
    for i in range(partitions.size()):
        partition = partitions.apply(i)
        spec = partition.spec()
        found[tuple((k, spec.get(k).get()) for k in keys)] = to_string(partition.location())   # not URI-escaped
    return found


def switch_partition_locations(spark: Any, quoted: str, locations: Mapping[PartitionKey, str]) -> None:
    """Each partition is built afresh from the table's storage format (as ADD PARTITION builds it)
    with the new location; its old statistics describe data that is gone. Every JVM call is a
    round trip, so nothing is read back from the old partitions."""
    jvm = spark._jvm
    catalog = spark._jsparkSession.sessionState().catalog()
    ident = _partitioned_ident(spark, quoted)
    template = catalog.getTableMetadata(ident).storage()
    # Class lookups through the JVM view are round trips too: each is made once.
    catalog_package = jvm.org.apache.spark.sql.catalyst.catalog
    partition_class, to_uri = catalog_package.CatalogTablePartition, catalog_package.CatalogUtils.stringToURI
    some, to_map = jvm.scala.Some, jvm.PythonUtils.toScalaMap
    no_parameters, no_stats = to_map({}), jvm.scala.Option.empty()
    created = int(time.time() * 1000)
    changed = [partition_class(to_map(dict(spec)), _copy_with(template, 0, some(to_uri(location))),
                               no_parameters, created, -1, no_stats)
               for spec, location in locations.items()]
    catalog.alterPartitions(ident, jvm.PythonUtils.toSeq(changed))
