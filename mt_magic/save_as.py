"""FLIP-218's Table API on Spark DataFrames: save_as(df, name).option(..).create().execute().

The same atomicity as CREATE TABLE AS in SQL: the pipeline writes through mt_magic.storage.table_as.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from mt_magic.catalog.pending import PendingWrites
from mt_magic.config import catalog_store_path
from mt_magic.errors import ValidationError
from mt_magic.results import Result
from mt_magic.spark.analysis import QueryAnalyzer
from mt_magic.sql.parser import parse
from mt_magic.storage.table_as import CREATE, IF_NOT_EXISTS, TableAsTarget, plan_target, write_table_as


def save_as(frame: DataFrame, name: str) -> CreatingTable:
    """Start creating table `name` ([catalog.][database.]table) from `frame`."""
    return CreatingTable(frame, name)


class CreatingTable:
    """Collects options; nothing is checked or written until create() / execute()."""

    def __init__(self, frame: DataFrame, name: str) -> None:
        self._frame = frame
        self._name = name
        self._options: dict[str, str] = {}
        self._partition_keys: tuple[str, ...] = ()

    def option(self, key: str, value: object) -> CreatingTable:
        self._options[str(key)] = str(value)
        return self

    def partitioned_by(self, *columns: str) -> CreatingTable:
        missing = [c for c in columns if c.lower() not in {n.lower() for n in self._frame.columns}]
        if missing:
            raise ValidationError(f"Table {self._name}: partition column(s) {', '.join(missing)} are not "
                                  f"columns of the DataFrame ({', '.join(self._frame.columns)}).")
        self._partition_keys = tuple(columns)
        return self

    def create(self) -> TablePipeline:
        """Checks everything now; raises MaterializedTableError if the table exists."""
        return TablePipeline(self._frame, self._target(CREATE))

    def create_if_not_exist(self) -> TablePipeline:
        """A pipeline that does nothing when the table already exists."""
        return TablePipeline(self._frame, self._target(IF_NOT_EXISTS))

    def _target(self, mode: str) -> TableAsTarget:
        spark = self._frame.sparkSession
        statement = parse(f"DROP TABLE {self._name}")[0]
        if not hasattr(statement, "name"):
            raise ValidationError(f"'{self._name}' is not a table name: [catalog.][database.]table.")
        parts = QueryAnalyzer(spark).resolve(statement.name)
        return plan_target(spark, parts, self._options, mode, self._partition_keys)


class TablePipeline:
    def __init__(self, frame: DataFrame, target: TableAsTarget) -> None:
        self._frame = frame
        self._target = target

    def execute(self) -> Result:
        """Runs the write: the table appears complete, or not at all."""
        pending = PendingWrites(catalog_store_path(None))    # the default store's owner recovers a kill
        return write_table_as(self._frame.sparkSession, self._frame, self._target, pending)

    def __repr__(self) -> str:
        return f"TablePipeline({self._target.identifier}, {self._target.mode})"
