"""Spark data types: declared types (with Flink's spellings), implicit casts, DDL text, JSON form."""

from __future__ import annotations

from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import types as T

from mt_magic.errors import ValidationError
from mt_magic.sql.statements import quote_identifier
from mt_magic.sql.type_names import spark_spelling

def parse_type(text: str, column: str) -> T.DataType:
    """A declared column type: Spark's types, with Flink-only spellings mapped onto them."""
    try:
        return T.DataType.fromDDL(spark_spelling(text))
    except (PySparkException, ValueError):
        raise ValidationError(f"Column '{column}' has an unknown data type '{text}'.") from None


def type_from_json(type_json: Any) -> T.DataType:
    """A type from its JSON form (as stored in the catalog), through PySpark's public schema API."""
    field = {"name": "c", "type": type_json, "nullable": True, "metadata": {}}
    return T.StructType.fromJson({"type": "struct", "fields": [field]}).fields[0].dataType


_NUMERIC_RANK = {T.ByteType: 0, T.ShortType: 1, T.IntegerType: 2, T.LongType: 3,
                 T.DecimalType: 4, T.FloatType: 5, T.DoubleType: 6}
_STRINGS = (T.StringType, T.CharType, T.VarcharType)
_TIMES = (T.DateType, T.TimestampType, T.TimestampNTZType)


def implicit_cast(source: T.DataType, target: T.DataType) -> bool:
    """Flink's implicit casts: widening numbers, string kinds, date to timestamp, same shapes."""
    if source == target or isinstance(source, T.NullType):
        return True
    if type(source) in _NUMERIC_RANK and type(target) in _NUMERIC_RANK:
        return _NUMERIC_RANK[type(source)] <= _NUMERIC_RANK[type(target)]
    if isinstance(source, _STRINGS) and isinstance(target, _STRINGS):
        return True
    if isinstance(source, _TIMES) and isinstance(target, _TIMES):
        return not isinstance(target, T.DateType) or isinstance(source, T.DateType)
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return implicit_cast(source.elementType, target.elementType)
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        return implicit_cast(source.keyType, target.keyType) and \
            implicit_cast(source.valueType, target.valueType)
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        return len(source.fields) == len(target.fields) and all(
            implicit_cast(s.dataType, t.dataType) for s, t in zip(source.fields, target.fields))
    return False


def type_text(data_type: T.DataType, nullable: bool = True) -> str:
    return data_type.simpleString().upper() + ("" if nullable else " NOT NULL")


def type_sql(data_type: T.DataType) -> str:
    """DDL text of a type; struct field names quoted so that any name survives."""
    if isinstance(data_type, T.StructType):
        return "STRUCT<" + ", ".join(f"{quote_identifier(f.name)}: {type_sql(f.dataType)}"
                                     for f in data_type.fields) + ">"
    if isinstance(data_type, T.ArrayType):
        return f"ARRAY<{type_sql(data_type.elementType)}>"
    if isinstance(data_type, T.MapType):
        return f"MAP<{type_sql(data_type.keyType)}, {type_sql(data_type.valueType)}>"
    return data_type.simpleString().upper()
