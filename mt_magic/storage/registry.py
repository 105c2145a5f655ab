"""Many materialized tables put back into Spark's catalog at once, when a new owner opens a store.

One listing per database says what Spark has already (a Gateway opened again in the same session
finds every table there). The missing tables are created by one SQL script per batch, partitions
included: one round trip instead of one per table and partition. A table Spark has at another
version follows its record alone, as does every table of a batch whose script failed, so one bad
table costs its own warning and not the others'.
"""

from __future__ import annotations

from collections.abc import Sequence

from mt_magic.catalog.model import MaterializedTable
from mt_magic.errors import MaterializedTableError
from mt_magic.spark.tables import TableFacts, databases_tables, partition_metadata
from mt_magic.spark.errors import SPARK_ERRORS, spark_call, spark_message
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.ddl import add_partitions_sql, create_table_sql, partitions_apart
from mt_magic.storage.versions import TableStorage, same_path

SCRIPT_BATCH = 50         # tables per SQL script: a failed one is redone table by table


class Registration:
    """Putting back the tables of some databases: created, and listed once, when this starts."""

    def __init__(self, storage: TableStorage, tables: Sequence[MaterializedTable]) -> None:
        self.storage = storage
        spark = storage.spark
        databases = sorted({(t.catalog, t.database) for t in tables})
        for catalog, database in databases:
            spark_call(lambda c=catalog, d=database: spark.sql(
                f"CREATE DATABASE IF NOT EXISTS {quote_identifier(c)}.{quote_identifier(d)}"),
                f"Creating the database {catalog}.{database}")
        self._known = databases_tables(spark, databases)

    def put_back(self, tables: Sequence[MaterializedTable]) -> dict[str, str]:
        """Spark's catalog made to agree with these records; what failed, by table identifier."""
        found = [(table, self._facts(table)) for table in tables]
        failures = self.create([table for table, facts in found if facts is None])
        for table, facts in found:
            if facts is not None and ((table.partition_keys and table.storage.catalog_partitions) or
                                      same_path(facts.location or "") != same_path(table.storage.location)):
                _alone(self.storage.follow, table, failures)
        return failures

    def missing(self, tables: Sequence[MaterializedTable]) -> list[MaterializedTable]:
        """The tables Spark did not have when this started."""
        return [table for table in tables if self._facts(table) is None]

    def _facts(self, table: MaterializedTable) -> TableFacts | None:
        return self._known.get((table.catalog, table.database), {}).get(table.name.lower())

    def create(self, tables: Sequence[MaterializedTable]) -> dict[str, str]:
        """These tables created in Spark at their published versions, a script per batch; what failed."""
        failures: dict[str, str] = {}
        for apart in (False, True):
            group = [t for t in tables if partitions_apart(t, t.storage) is apart]
            for start in range(0, len(group), SCRIPT_BATCH):
                self._script(group[start:start + SCRIPT_BATCH], apart, failures)
        return failures

    def _script(self, batch: list[MaterializedTable], apart: bool, failures: dict[str, str]) -> None:
        spark = self.storage.spark
        script = "BEGIN\n" + ";\n".join(s for t in batch for s in _ddl(t)) + ";\nEND"
        try:
            with partition_metadata(spark, not apart):
                spark_call(lambda: spark.sql(script), f"Registering {len(batch)} tables")
        except (MaterializedTableError, *SPARK_ERRORS):
            for table in batch:
                _alone(self.storage.register, table, failures)


def _ddl(table: MaterializedTable) -> list[str]:
    statements = [create_table_sql(table, table.storage, if_not_exists=True)]
    partitions = add_partitions_sql(table, {tuple(p.spec.items()): p.location for p in table.storage.partitions})
    if table.storage.catalog_partitions and partitions:
        statements.append(partitions)
    return statements


def _alone(step, table: MaterializedTable, failures: dict[str, str]) -> None:
    try:
        step(table)
    except (MaterializedTableError, *SPARK_ERRORS) as error:
        failures[table.identifier] = spark_message(error)
