"""The materialized table's schema from its query and the CREATE column part (spec §3.2)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from mt_magic.catalog.model import Column
from mt_magic.errors import ValidationError
from mt_magic.spark.analysis import AnalyzedQuery
from mt_magic.spark.errors import spark_call
from mt_magic.spark.types import implicit_cast, parse_type, type_text
from mt_magic.sql.date_format import compile_pattern
from mt_magic.sql.statements import TableDefinition, quote_identifier

FORMATTER_PREFIX = "partition.fields."
FORMATTER_SUFFIX = ".date-formatter"

# The type and nullability of a computed column's expression over the query's output.
ComputedType = Callable[[str], tuple[T.DataType, bool]]


@dataclass(frozen=True)
class TableSchema:
    columns: tuple[Column, ...]
    primary_key: dict | None
    watermark: dict | None


def computed_type(source: Callable[[], DataFrame]) -> ComputedType:
    """A computed column's type, as Spark derives it over the query's output. The query's DataFrame
    is only built when a computed column or a watermark asks (an analysis is a round trip)."""
    frames: list[DataFrame] = []

    def derive(expression: str) -> tuple[T.DataType, bool]:
        if not frames:
            frames.append(source())
        field = spark_call(lambda: frames[0].selectExpr(f"({expression}) AS c").schema.fields[0],
                           f"Computed column expression '{expression}'")
        return field.dataType, field.nullable
    return derive


def column_from_field(field: T.StructField, nullable: bool | None = None, **extra) -> Column:
    data_type = extra.pop("data_type", field.dataType)
    return Column(field.name, data_type.simpleString(), field.nullable if nullable is None else nullable,
                  type_json=data_type.jsonValue(), **extra)


def _names(items: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in items) + "]"


def derive_schema(statement: TableDefinition, query: T.StructType,
                  computed_type: ComputedType) -> TableSchema:
    _reject_duplicate_names(query)
    by_name = {f.name.lower(): f for f in query.fields}
    if not statement.columns:
        columns = [column_from_field(f) for f in query.fields]
    elif statement.names_only:
        columns = _reorder(statement, query, by_name)
    else:
        columns = _typed(statement, query, by_name, computed_type)
    primary_key = _primary_key(statement, columns)
    if primary_key:
        columns = _check_primary_key(primary_key, columns)
    watermark = None
    if statement.watermark:
        names = [c.name for c in columns]
        if statement.watermark.column.lower() not in (n.lower() for n in names):
            raise ValidationError(
                f"The rowtime attribute field '{statement.watermark.column}' is not defined in the "
                f"table schema.\nAvailable fields: {_names(names)}")
        data_type, _ = computed_type(statement.watermark.expression)
        if not isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
            raise ValidationError(
                f"The watermark of '{statement.watermark.column}' must be a TIMESTAMP expression, but "
                f"'{statement.watermark.expression}' is {type_text(data_type)}.")
        watermark = {"column": statement.watermark.column, "expression": statement.watermark.expression}
    return TableSchema(tuple(columns), primary_key, watermark)


def with_unique_names(analyzed: AnalyzedQuery) -> AnalyzedQuery:
    """ALTER AS: a repeated output name gets a number, as Flink's validator does (`c AS a` beside
    `a` becomes `a0`); the stored query then names its columns so."""
    seen: set[str] = set()
    names = []
    for field in analyzed.schema.fields:
        name, number = field.name, 0
        while name.lower() in seen:
            name, number = f"{field.name}{number}", number + 1
        seen.add(name.lower())
        names.append(name)
    if names == [f.name for f in analyzed.schema.fields]:
        return analyzed
    schema = T.StructType([T.StructField(n, f.dataType, f.nullable, f.metadata)
                           for f, n in zip(analyzed.schema.fields, names)])
    aliases = ", ".join(map(quote_identifier, names))
    return AnalyzedQuery(schema, f"SELECT * FROM (\n{analyzed.definition_query}\n) AS mt_query({aliases})",
                         analyzed.sources)


def keyed(columns: Sequence[Column], primary_key: dict | None) -> tuple[Column, ...]:
    """The columns with the table's key applied (its columns NOT NULL by declaration)."""
    return tuple(_check_primary_key(primary_key, list(columns)) if primary_key else columns)


def _reject_duplicate_names(query: T.StructType) -> None:
    seen: set[str] = set()
    for field in query.fields:
        if field.name.lower() in seen:
            raise ValidationError(f"The query produces column '{field.name}' more than once; give "
                                  "every output column its own name (… AS name).")
        seen.add(field.name.lower())


def _reorder(statement, query, by_name) -> list[Column]:
    if len(statement.columns) != len(query.fields):
        raise ValidationError("The number of columns in the column list must match the number of "
                              "columns in the source schema.")
    columns = []
    for declared in statement.columns:
        field = by_name.get(declared.name.lower())
        if field is None:
            raise ValidationError(f"Column '{declared.name}' not found in the source schema.")
        columns.append(column_from_field(field))
    return columns


def _typed(statement, query, by_name, computed_type: ComputedType) -> list[Column]:
    pk_columns = {c.lower() for c in (statement.primary_key.columns if statement.primary_key else ())}
    pk_columns |= {c.name.lower() for c in statement.columns if c.primary_key}
    declared = {}
    leading: list[Column] = []
    for column in statement.columns:
        if column.metadata and column.virtual:
            raise ValidationError(
                f"Column '{column.name}' is a VIRTUAL METADATA column: such columns are read from a "
                "connector at query time, and Spark file tables have none.")
        if column.computed is not None:
            data_type, nullable = computed_type(column.computed)
            leading.append(Column(column.name, data_type.simpleString(), nullable, column.comment,
                                  data_type.jsonValue(), computed=column.computed))
            continue
        if column.name.lower() not in by_name:
            kind = "metadata persisted column" if column.metadata else "physical column"
            raise ValidationError(
                f"Failed to execute {statement.verb} statement.\nInvalid schema. All persisted "
                "(physical and metadata) columns in the schema part need to be present in the query "
                f"part.\nHowever, {kind} `{column.name}` could not be found in the query.")
        declared[column.name.lower()] = column
    columns = list(leading)
    for position, field in enumerate(query.fields):
        column = declared.get(field.name.lower())
        if column is None:
            columns.append(column_from_field(field))
            continue
        target = parse_type(column.type, column.name)
        if not implicit_cast(field.dataType, target):
            raise ValidationError(
                f"Incompatible types for sink column '{column.name}' at position {position}. The source "
                f"column has type '{type_text(field.dataType, field.nullable)}', while the target "
                f"column has type '{type_text(target)}'.")
        not_null = column.not_null or column.primary_key or column.name.lower() in pk_columns
        columns.append(column_from_field(field, not not_null, data_type=target, comment=column.comment))
    return columns


def _primary_key(statement, columns: list[Column]) -> dict | None:
    if statement.primary_key:
        names = list(statement.primary_key.columns)
        name = statement.primary_key.name
    else:
        names = [c.name for c in statement.columns if c.primary_key]
        name = None
    if not names:
        return None
    return {"name": name or "PK_" + "_".join(names), "columns": names}


def _check_primary_key(primary_key: dict, columns: list[Column]) -> list[Column]:
    """Key columns are NOT NULL by declaration, as in Flink's CREATE TABLE: Spark's file tables call
    every column nullable, so the query's nullability cannot decide; a refresh that meets a NULL key
    fails, naming the column, and publishes nothing. The key stays NOT ENFORCED."""
    by_name = {c.name.lower(): c for c in columns}
    keys = {name.lower() for name in primary_key["columns"]}
    for name in primary_key["columns"]:
        column = by_name.get(name.lower())
        if column is None:
            raise ValidationError(f"Primary key column '{name}' not defined in the query schema. "
                                  f"Available columns: {_names([c.name for c in columns])}")
        if column.computed is not None and column.nullable:
            raise ValidationError(f"Could not create a PRIMARY KEY with nullable column '{name}'.\n"
                                  "A PRIMARY KEY column must be declared on non-nullable physical "
                                  "columns.")
    return [replace(c, nullable=False) if c.name.lower() in keys else c for c in columns]


def check_partition_keys(partition_keys: Sequence[str], columns: Sequence[Column]) -> tuple[str, ...]:
    """Each key must be a column; returns the keys spelled as the columns are."""
    by_name = {c.name.lower(): c for c in columns}
    keys = []
    for key in partition_keys:
        column = by_name.get(key.lower())
        if column is None:
            raise ValidationError(f"Partition column '{key}' not defined in the query's schema. "
                                  f"Available columns: {_names([c.name for c in columns])}.")
        keys.append(column.name)
    if len(set(k.lower() for k in keys)) != len(keys):
        raise ValidationError("PARTITIONED BY names a column more than once.")
    if keys and len(keys) == len(columns):
        raise ValidationError("PARTITIONED BY cannot use every column: Spark needs at least one "
                              "column that is not a partition key.")
    return tuple(keys)


def check_formatters(options: Mapping[str, str], partition_keys: Sequence[str],
                     columns: Sequence[Column]) -> None:
    """partition.fields.<col>.date-formatter: a string partition column and a known pattern."""
    by_name = {c.name.lower(): c for c in columns}
    keys = {k.lower() for k in partition_keys}
    for key, pattern in options.items():
        if not (key.startswith(FORMATTER_PREFIX) and key.endswith(FORMATTER_SUFFIX)):
            continue
        column = key[len(FORMATTER_PREFIX):-len(FORMATTER_SUFFIX)]
        if column.lower() not in keys:
            available = _names(partition_keys or [""])
            raise ValidationError(
                f"Column '{column}' referenced by materialized table option '{key}' isn't a partition "
                f"column. Available partition columns: {available}.")
        data_type = by_name[column.lower()].type
        if data_type not in ("string",) and not data_type.startswith(("char", "varchar")):
            raise ValidationError(
                f"Materialized table option '{key}' only supports referring to char, varchar and string "
                f"type partition column. Column `{column}` type is {data_type.upper()}.")
        compile_pattern(pattern)
