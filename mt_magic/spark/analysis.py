"""The definition query against Spark: output schema, source tables, qualified text, checks.

Spark's own parser decides which names in a query are relations. A classic session asks it in the
JVM (each relation with its position); a Spark Connect session reads the same parser's answer from
EXPLAIN's parsed plan and finds the positions with our tokenizer, refusing when the two disagree.
Everything after that (CTE scopes, temporary objects, qualified text, streaming text) is one path.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from mt_magic.errors import SparkError, ValidationError
from mt_magic.spark.catalog import is_catalog, temporary_functions
from mt_magic.spark.errors import SPARK_ERRORS, error_class, spark_call, spark_message
from mt_magic.spark.session import is_connect
from mt_magic.sql.relations import NameRef, cte_scopes, in_cte_scope, is_query, relation_positions
from mt_magic.sql.statements import ObjectName, quote_identifier
from mt_magic.sql.tokens import Kind, tokenize


@dataclass(frozen=True)
class AnalyzedQuery:
    schema: T.StructType
    definition_query: str          # every table name fully qualified, the rest as written
    sources: tuple[str, ...]       # catalog.database.table of every relation read


# Words that may follow a table name and are not its alias.
_CLAUSE_WORDS = ("WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "JOIN", "LEFT", "RIGHT", "FULL", "INNER",
                 "OUTER", "CROSS", "NATURAL", "SEMI", "ANTI", "ON", "USING", "UNION", "EXCEPT",
                 "INTERSECT", "MINUS", "WINDOW", "LATERAL", "PIVOT", "UNPIVOT", "TABLESAMPLE", "QUALIFY",
                 "CLUSTER", "DISTRIBUTE", "SORT", "OFFSET", "WITH")

# Statements that only read, so Spark can analyse them without running anything.
_QUERY_WORDS = ("SELECT", "WITH", "VALUES", "FROM", "TABLE")
_PARSED_RELATION = re.compile(r"'UnresolvedRelation \[(.*?)\], \[.*\], (?:true|false)$", re.M)
_POSITION = re.compile(r"\(line (\d+), pos (\d+)\)")


class QueryAnalyzer:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._connect = is_connect(spark)

    # ----------------------------------------------------------------- names
    def current(self) -> tuple[str, str]:
        """The session's current catalog and database (one round trip over Connect)."""
        if self._connect:
            row = self.spark.sql("SELECT current_catalog(), current_database()").collect()[0]
            return row[0], row[1]
        return self.spark.catalog.currentCatalog(), self.spark.catalog.currentDatabase()

    def normalize(self, part: str) -> str:
        return part if self.spark.conf.get("spark.sql.caseSensitive") == "true" else part.lower()

    def qualify(self, parts: tuple[str, ...], current: tuple[str, str] | None = None) -> tuple[str, str, str]:
        """[catalog.][database.]name against the session's current catalog and database."""
        catalog, database = current or self.current()
        if len(parts) == 3:
            catalog, database, name = parts
        elif len(parts) == 2 and is_catalog(self.spark, parts[0]):
            raise ValidationError(f"Table name {'.'.join(parts)} lacks a database.")
        elif len(parts) == 2:
            database, name = parts
        elif len(parts) == 1:
            (name,) = parts
        else:
            raise ValidationError(f"Table name {'.'.join(parts)} has more than three parts.")
        return self.normalize(catalog), self.normalize(database), self.normalize(name)

    def resolve(self, name: ObjectName) -> tuple[str, str, str]:
        return self.qualify(name.parts)

    # --------------------------------------------------------------- queries
    def analyze(self, query: str) -> AnalyzedQuery:
        frame = self._analysed(query)
        relations = self._table_relations(query)
        self._reject_temporary_objects(query, relations)
        edits: list[tuple[int, int, str]] = []
        sources: list[str] = []
        current = self.current() if relations else None
        for ref in relations:
            qualified = self.qualify(ref.parts, current)
            sources.append(".".join(qualified))
            edits.append((ref.start, ref.stop, ".".join(quote_identifier(p) for p in qualified)))
        definition = query
        for start, stop, text in sorted(edits, reverse=True):
            definition = definition[:start] + text + definition[stop + 1:]
        return AnalyzedQuery(frame.schema, definition, tuple(dict.fromkeys(sources)))

    def check_spark_statement(self, text: str) -> str:
        """A Spark statement without running it: parsed, and analysed too when it only reads."""
        self._parse(text)
        first = next((t for t in tokenize(text) if t.kind is Kind.WORD), None)
        if first is not None and first.is_word(*_QUERY_WORDS):
            spark_call(lambda: self.spark.sql(text).schema, "Spark")
            return "query analysed by Spark"
        return "parsed by Spark (a Spark statement is checked when it runs)"

    def streaming_query(self, definition_query: str, static: set[str]) -> str:
        """The definition query with every source not in `static` read as a stream: STREAM(t) AS t.

        The alias keeps `t.column` references working; a relation that has its own alias keeps it.
        """
        text = definition_query
        relations = self._table_relations(definition_query)
        current = self.current() if relations else None
        for ref in sorted(relations, key=lambda r: r.start, reverse=True):
            if ".".join(self.qualify(ref.parts, current)).lower() in static:
                continue
            following = tokenize(text[ref.stop + 1:])
            aliased = bool(following) and (following[0].is_word("AS") or (
                following[0].kind in (Kind.WORD, Kind.QUOTED) and not following[0].is_word(*_CLAUSE_WORDS)))
            alias = "" if aliased else f" AS {quote_identifier(ref.parts[-1])}"
            text = text[:ref.start] + f"STREAM({text[ref.start:ref.stop + 1]}){alias}" + text[ref.stop + 1:]
        return text

    # -------------------------------------------------------------- helpers
    def _analysed(self, query: str):
        """The query parsed and analysed by Spark; its errors say which of the two failed."""
        if not is_query(query):
            raise ValidationError("The query of a materialized table must be a query (SELECT, VALUES, "
                                  "FROM or TABLE, after an optional WITH clause), not a statement.")
        try:
            frame = self.spark.sql(query)
            frame.schema    # noqa: B018 - a Connect DataFrame analyses lazily
            return frame
        except SPARK_ERRORS as error:
            parse = (error_class(error) or "").startswith("PARSE") or "PARSE_SYNTAX_ERROR" in str(error)
            what = "The query does not parse" if parse else "The query is not valid"
            raise SparkError(f"{what}: {spark_message(error)}") from None

    def _table_relations(self, query: str) -> list[NameRef]:
        """The relations that name tables or views (not CTEs), with their places in the text."""
        relations = self._connect_relations(query) if self._connect else self._jvm_relations(query)
        scopes = cte_scopes(query)
        return sorted((ref for ref in relations if not in_cte_scope(ref, scopes)), key=lambda r: r.start)

    def _reject_temporary_objects(self, query: str, relations: list[NameRef]) -> None:
        temporary_views = self._temporary_views() if relations else set()
        global_temp = self.spark.conf.get("spark.sql.globalTempDatabase", "global_temp").lower()
        for ref in relations:
            if (len(ref.parts) == 1 and ref.parts[0].lower() in temporary_views) or (
                    len(ref.parts) == 2 and ref.parts[0].lower() == global_temp):
                raise ValidationError(
                    f"The query reads temporary view {'.'.join(ref.parts)}; a materialized table must "
                    "only read catalog tables and views, which outlive the session.")
        tokens = tokenize(query)
        called = {t.value.lower() for t, nxt in zip(tokens, tokens[1:])
                  if t.kind in (Kind.WORD, Kind.QUOTED) and nxt.is_symbol("(")}
        if not called:
            return
        for name in sorted(called & temporary_functions(self.spark)):
            raise ValidationError(
                f"The query calls temporary function {name}; a materialized table must only use "
                "built-in or catalog functions, which outlive the session.")

    def _temporary_views(self) -> set[str]:
        rows = self.spark.sql("SHOW VIEWS").collect()
        return {r["viewName"].lower() for r in rows if r["isTemporary"]}

    def _parse(self, text: str) -> None:
        if not self._connect:
            spark_call(lambda: self.spark._jsparkSession.sessionState().sqlParser().parsePlan(text), "Spark")
            return
        first = next((t for t in tokenize(text) if t.kind is Kind.WORD), None)
        if first is not None and first.is_word("SET", "RESET"):
            return        # EXPLAIN takes no SET; Spark checks it when it runs
        try:
            # EXPLAIN parses its statement and reports analysis errors as text: a parse-only check.
            self.spark.sql("EXPLAIN\n" + text).collect()
        except SPARK_ERRORS as error:
            message = _POSITION.sub(lambda m: f"(line {int(m.group(1)) - 1}, pos {m.group(2)})",
                                    spark_message(error))
            raise SparkError(f"Spark: {message}") from None

    def _jvm_relations(self, query: str) -> list[NameRef]:
        plan = spark_call(lambda: self.spark._jsparkSession.sessionState().sqlParser().parsePlan(query),
                          "The query does not parse")
        relations: list[NameRef] = []
        self._walk(plan, relations)
        return relations

    def _walk(self, node: Any, relations: list[NameRef]) -> None:
        if node.getClass().getSimpleName() == "UnresolvedRelation":
            origin = node.origin()
            if origin.startIndex().isDefined() and origin.stopIndex().isDefined():
                parts = node.multipartIdentifier()
                relations.append(NameRef(tuple(parts.apply(i) for i in range(parts.size())),
                                         origin.startIndex().get(), origin.stopIndex().get()))
        for children in (node.children(), node.innerChildren()):
            iterator = children.iterator()
            while iterator.hasNext():
                self._walk(iterator.next(), relations)

    def _connect_relations(self, query: str) -> list[NameRef]:
        plan = spark_call(lambda: self.spark.sql("EXPLAIN EXTENDED " + query).collect()[0][0],
                          "The query is not valid")
        parsed = plan.split("== Analyzed Logical Plan ==", 1)[0]
        expected = Counter(tuple(p.lower() for p in m.group(1).split(", "))
                           for m in _PARSED_RELATION.finditer(parsed))
        found = [ref for ref in relation_positions(query) if ref.key() in expected]
        if Counter(ref.key() for ref in found) != expected:
            raise ValidationError(
                "Could not place every table the query reads in its text (Spark reads "
                f"{', '.join('.'.join(k) for k in sorted(expected.elements()))}); write each table "
                "name plainly after FROM or JOIN.")
        return found
