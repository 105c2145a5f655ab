"""The definition query against Spark: output schema, source tables, qualified text, checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from mt_magic.errors import SparkError, ValidationError
from mt_magic.sql.statements import ObjectName, quote_identifier
from mt_magic.sql.tokens import Kind, tokenize

R = TypeVar("R")


@dataclass(frozen=True)
class AnalyzedQuery:
    schema: T.StructType
    definition_query: str          # every table name fully qualified, the rest as written
    sources: tuple[str, ...]       # catalog.database.table of every relation read


def spark_call(action: Callable[[], R], what: str) -> R:
    """Run a Spark call; its error becomes a SparkError with Spark's own first lines."""
    try:
        return action()
    except PySparkException as error:
        raise SparkError(f"{what}: {spark_message(error)}") from None


def spark_message(error: BaseException) -> str:
    """Spark's message without the JVM trace and the logical plan it appends."""
    text = str(error).strip()
    text = text.split("\n\tat ", 1)[0]
    text = re.split(r";\n'|\n== SQL", text, maxsplit=1)[0]
    return text.strip()


# Words that may follow a table name and are not its alias.
_CLAUSE_WORDS = ("WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "JOIN", "LEFT", "RIGHT", "FULL", "INNER",
                 "OUTER", "CROSS", "NATURAL", "SEMI", "ANTI", "ON", "USING", "UNION", "EXCEPT",
                 "INTERSECT", "MINUS", "WINDOW", "LATERAL", "PIVOT", "UNPIVOT", "TABLESAMPLE", "QUALIFY",
                 "CLUSTER", "DISTRIBUTE", "SORT", "OFFSET", "WITH")


# Statements that only read, so Spark can analyse them without running anything.
_QUERY_WORDS = ("SELECT", "WITH", "VALUES", "FROM", "TABLE")


class QueryAnalyzer:
    """Uses Spark's own parser and analyzer (a classic session's JVM) for everything."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._jsession = spark._jsparkSession
        self._jvm = spark._jvm

    # ----------------------------------------------------------------- names
    def current(self) -> tuple[str, str]:
        return self.spark.catalog.currentCatalog(), self.spark.catalog.currentDatabase()

    def normalize(self, part: str) -> str:
        return part if self.spark.conf.get("spark.sql.caseSensitive") == "true" else part.lower()

    def qualify(self, parts: tuple[str, ...]) -> tuple[str, str, str]:
        """[catalog.][database.]name against the session's current catalog and database."""
        catalog, database = self.current()
        if len(parts) == 3:
            catalog, database, name = parts
        elif len(parts) == 2 and self._is_catalog(parts[0]):
            raise ValidationError(f"Table name {'.'.join(parts)} lacks a database.")
        elif len(parts) == 2:
            database, name = parts
        else:
            (name,) = parts
        return self.normalize(catalog), self.normalize(database), self.normalize(name)

    def resolve(self, name: ObjectName) -> tuple[str, str, str]:
        return self.qualify(name.parts)

    def _is_catalog(self, name: str) -> bool:
        return bool(self._jsession.sessionState().catalogManager().isCatalogRegistered(name))

    def _is_temp_view(self, parts: list[str]) -> bool:
        if len(parts) == 2 and parts[0].lower() == self.spark.conf.get(
                "spark.sql.globalTempDatabase", "global_temp"):
            return True
        return len(parts) == 1 and bool(
            self._jsession.sessionState().catalog().isTempView(self._jvm.PythonUtils.toSeq(parts)))

    # --------------------------------------------------------------- queries
    def analyze(self, query: str) -> AnalyzedQuery:
        plan = spark_call(lambda: self._jsession.sessionState().sqlParser().parsePlan(query),
                          "The query does not parse")
        relations: list[tuple[list[str], int, int]] = []
        cte_names: set[str] = set()
        self._walk(plan, relations, cte_names)
        self._reject_temporary_functions(query)
        edits: list[tuple[int, int, str]] = []
        sources: list[str] = []
        for parts, start, stop in relations:
            if len(parts) == 1 and parts[0].lower() in cte_names:
                continue
            if self._is_temp_view(parts):
                raise ValidationError(
                    f"The query reads temporary view {'.'.join(parts)}; a materialized table must "
                    "only read catalog tables and views, which outlive the session.")
            qualified = self.qualify(tuple(parts))
            sources.append(".".join(qualified))
            edits.append((start, stop, ".".join(quote_identifier(p) for p in qualified)))
        definition = query
        for start, stop, text in sorted(edits, reverse=True):
            definition = definition[:start] + text + definition[stop + 1:]
        schema = spark_call(lambda: self.spark.sql(definition).schema, "The query is not valid")
        return AnalyzedQuery(schema, definition, tuple(dict.fromkeys(sources)))

    def check_spark_statement(self, text: str) -> str:
        """A Spark statement without running it: parsed, and analysed too when it only reads."""
        spark_call(lambda: self._jsession.sessionState().sqlParser().parsePlan(text), "Spark")
        first = next((t for t in tokenize(text) if t.kind is Kind.WORD), None)
        if first is not None and first.is_word(*_QUERY_WORDS):
            spark_call(lambda: self.spark.sql(text).schema, "Spark")
            return "query analysed by Spark"
        return "parsed by Spark (a Spark statement is checked when it runs)"

    def streaming_query(self, definition_query: str, static: set[str]) -> str:
        """The definition query with every source not in `static` read as a stream: STREAM(t) AS t.

        The alias keeps `t.column` references working; a relation that has its own alias keeps it.
        """
        plan = self._jsession.sessionState().sqlParser().parsePlan(definition_query)
        relations: list[tuple[list[str], int, int]] = []
        cte_names: set[str] = set()
        self._walk(plan, relations, cte_names)
        text = definition_query
        for parts, start, stop in sorted(relations, key=lambda r: r[1], reverse=True):
            if len(parts) == 1 and parts[0].lower() in cte_names:
                continue
            if ".".join(self.qualify(tuple(parts))).lower() in static:
                continue
            following = tokenize(text[stop + 1:])
            aliased = bool(following) and (following[0].is_word("AS") or (
                following[0].kind in (Kind.WORD, Kind.QUOTED) and not following[0].is_word(*_CLAUSE_WORDS)))
            alias = "" if aliased else f" AS {quote_identifier(parts[-1])}"
            text = text[:start] + f"STREAM({text[start:stop + 1]}){alias}" + text[stop + 1:]
        return text

    def _walk(self, node: Any, relations: list, cte_names: set[str]) -> None:
        kind = node.getClass().getSimpleName()
        if kind == "UnresolvedRelation":
            origin = node.origin()
            if origin.startIndex().isDefined() and origin.stopIndex().isDefined():
                parts = node.multipartIdentifier()
                names = [parts.apply(i) for i in range(parts.size())]
                relations.append((names, origin.startIndex().get(), origin.stopIndex().get()))
        elif kind == "UnresolvedWith":
            ctes = node.cteRelations()
            for i in range(ctes.size()):
                cte_names.add(ctes.apply(i)._1().lower())
        for children in (node.children(), node.innerChildren()):
            iterator = children.iterator()
            while iterator.hasNext():
                self._walk(iterator.next(), relations, cte_names)

    def _reject_temporary_functions(self, query: str) -> None:
        functions = self._jsession.sessionState().catalog().listTemporaryFunctions()
        names = {functions.apply(i).funcName().lower() for i in range(functions.size())}
        if not names:
            return
        tokens = tokenize(query)
        for token, following in zip(tokens, tokens[1:]):
            if token.kind in (Kind.WORD, Kind.QUOTED) and following.is_symbol("(") \
                    and token.value.lower() in names:
                raise ValidationError(
                    f"The query calls temporary function {token.value}; a materialized table must "
                    "only use built-in or catalog functions, which outlive the session.")


# ------------------------------------------------------------------ types
_FLINK_TYPES = [
    (re.compile(r"\bTIMESTAMP_LTZ\s*(\(\s*\d+\s*\))?", re.I), "TIMESTAMP"),
    (re.compile(r"\bTIMESTAMP\s*\(\s*\d+\s*\)\s+WITH\s+LOCAL\s+TIME\s+ZONE", re.I), "TIMESTAMP"),
    (re.compile(r"\bTIMESTAMP\s*(\(\s*\d+\s*\))?\s+WITHOUT\s+TIME\s+ZONE", re.I), "TIMESTAMP_NTZ"),
    (re.compile(r"\bTIMESTAMP\s*\(\s*\d+\s*\)", re.I), "TIMESTAMP"),
    (re.compile(r"\b(VAR)?CHAR\s*\(\s*\d+\s*\)", re.I), "STRING"),
    (re.compile(r"\b(VAR)?BINARY\s*\(\s*\d+\s*\)|\bBYTES\b", re.I), "BINARY"),
]


def parse_type(text: str, column: str) -> T.DataType:
    """A declared column type: Spark's types, with Flink-only spellings mapped onto them."""
    ddl = text
    for pattern, replacement in _FLINK_TYPES:
        ddl = pattern.sub(replacement, ddl)
    try:
        return T.DataType.fromDDL(ddl)
    except PySparkException:
        raise ValidationError(f"Column '{column}' has an unknown data type '{text}'.") from None


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
