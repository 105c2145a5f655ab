"""The definition query against Spark: output schema, source tables, qualified text, checks.

Spark's own parser decides which names in a query are relations. A classic session asks it in the
JVM (each relation with its position); a Spark Connect session reads the same parser's answer from
EXPLAIN's parsed plan and finds the positions with our tokenizer, refusing when the two disagree.
Everything after that (CTE scopes, temporary objects, qualified text, streaming text) is one path.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import types as T

from mt_magic.errors import SparkError, ValidationError
from mt_magic.spark.tables import builtin_functions, is_catalog, temporary_functions
from mt_magic.spark.commands import alongside, command_rows
from mt_magic.spark.frames import query_frame
from mt_magic.spark.errors import SPARK_ERRORS, error_class, query_position, spark_call, spark_message
from mt_magic.spark.query_plans import ANALYZED, physical_plan
from mt_magic.spark.kind import is_connect
from mt_magic.sql.relation_spans import NameRef, cte_scopes, in_cte_scope, is_query, relation_positions
from mt_magic.sql.statements import ObjectName, quote_identifier
from mt_magic.sql.tokens import Kind, quoted_names, tokenize


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
# A view in an analysed plan: persistent views print catalog.database.name, temporary ones fewer parts.
_VIEW = re.compile(r"^[ :|+-]*View \(((?:`(?:[^`]|``)*`\.?)+), \[", re.M)
_POSITION = re.compile(r"\(line (\d+), pos (\d+)\)")
# A file scan in a physical plan: the table it reads and the partition filters Spark pushed into it.
_FILE_SCAN = re.compile(r"FileScan \S+ ([^\s\[]+)\[.*?PartitionFilters: \[(.*?)\], PushedFilters")


_T = TypeVar("_T")


class QueryAnalyzer:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._connect = is_connect(spark)
        self._statement = threading.local()
        self._builtins: frozenset[str] | None = None

    @contextmanager
    def pinned(self, current: tuple[str, str] | None = None) -> Iterator[None]:
        """One statement's view of the session: its current catalog and database and its case rule
        are asked once (a USE between two statements still counts). `current` stands in for the
        session's: a statement another process sent names tables as its sender's session does."""
        outer = getattr(self._statement, "memo", None)
        self._statement.memo = {} if outer is None else outer
        if current is not None:
            self._statement.memo = {**self._statement.memo, "current": tuple(current)}
        try:
            yield
        finally:
            self._statement.memo = outer

    def _once(self, key: str, ask: Callable[[], _T]) -> _T:
        memo = getattr(self._statement, "memo", None)
        if memo is None:
            return ask()
        if key not in memo:
            memo[key] = ask()
        return memo[key]

    # ----------------------------------------------------------------- names
    def current(self) -> tuple[str, str]:
        """The session's current catalog and database (one round trip over Connect)."""
        return self._once("current", self._ask_current)

    def _ask_current(self) -> tuple[str, str]:
        if self._connect:
            ((catalog, namespace),) = command_rows(self.spark, "SHOW CURRENT NAMESPACE")
        else:
            catalog, namespace = self.spark.catalog.currentCatalog(), self.spark.catalog.currentDatabase()
        # Spark quotes a namespace part that needs it (`2024`): the name is what is inside.
        parts = [t.value for t in tokenize(namespace) if t.kind in (Kind.WORD, Kind.QUOTED)]
        return catalog, ".".join(parts)

    def normalize(self, part: str) -> str:
        sensitive = self._once("case", lambda: self.spark.conf.get("spark.sql.caseSensitive") == "true")
        return part if sensitive else part.lower()

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
    def begin(self, query: str) -> None:
        """Over Connect, send the query's analysis now, for `analyze` to collect later in the same
        statement: what the statement asks meanwhile (where its own name lives) travels beside it
        instead of before it. Its errors wait for `analyze`, so a name's errors still come first."""
        memo = getattr(self._statement, "memo", None)
        if self._connect and memo is not None and is_query(query):
            memo[("analysis", query)] = alongside(self.spark, self._ask_analysis, query)

    def guessed_sources(self, query: str) -> tuple[str, ...]:
        """The tables the query reads as our tokenizer places them, qualified: enough to send a
        question about them before Spark answers (its parser decides, in `analyze`). Nothing where
        telling would cost a question of its own (a two-part name) or fails."""
        scopes = cte_scopes(query)
        refs = [ref for ref in relation_positions(query) if not in_cte_scope(ref, scopes)]
        if any(len(ref.parts) == 2 for ref in refs):
            return ()
        try:
            current = self.current()
            return tuple(dict.fromkeys(".".join(self.qualify(ref.parts, current)) for ref in refs))
        except (ValidationError, *SPARK_ERRORS):
            return ()

    def analyze(self, query: str) -> AnalyzedQuery:
        frame, plans = self._analysed(query)
        relations = self._table_relations(query, plans)
        self._reject_temporary_views(plans)
        self._reject_temporary_functions(query)
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
        relations = self._table_relations(definition_query, None)
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

    def partition_lineage(self, query: str, key: str) -> dict[str, str]:
        """The sources whose output partition `key = v` reads only their own partition `column = v`:
        source → column. Spark's optimizer proves it: the query filtered on `key` with a probe value
        must push that filter, as a partition filter on a bare column, into every scan of the source."""
        probe = f"mt_probe_{uuid.uuid4().hex[:12]}"
        plan = physical_plan(self.spark.sql(f"SELECT * FROM ({query}) WHERE {quote_identifier(key)} = '{probe}'"))
        columns: dict[str, set[str | None]] = {}
        for table, filters in _FILE_SCAN.findall(plan):
            column = re.search(r"\(([^\s#(]+)#\d+ = " + probe + r"\)", filters)
            columns.setdefault(table.lower(), set()).add(column.group(1) if column else None)
        return {table: found.pop() for table, found in columns.items() if len(found) == 1 and None not in found}

    # -------------------------------------------------------------- helpers
    def _analysed(self, query: str) -> tuple[Any, str]:
        """The query parsed and analysed by Spark, and its plans' text; errors say which step failed."""
        if not is_query(query):
            raise ValidationError("The query of a materialized table must be a query (SELECT, VALUES, "
                                  "FROM or TABLE, after an optional WITH clause), not a statement.")
        pending = (getattr(self._statement, "memo", None) or {}).pop(("analysis", query), None)
        try:
            return pending.result() if pending is not None else self._ask_analysis(query)
        except SPARK_ERRORS as error:
            parse = (error_class(error) or "").startswith("PARSE") or "PARSE_SYNTAX_ERROR" in str(error)
            what = "The query does not parse" if parse else "The query is not valid"
            raise SparkError(f"{what}: {spark_message(error)}", query_position(error, query)) from None

    def _ask_analysis(self, query: str) -> tuple[Any, str]:
        """Over Connect the schema and the plans are two requests on one DataFrame: they go out together."""
        frame = query_frame(self.spark, query)
        plans = alongside(self.spark, self._plan_text, frame)
        frame.schema    # noqa: B018 - analyses a Connect DataFrame; its errors come first
        return frame, plans.result()

    def _plan_text(self, frame: Any) -> str:
        """Spark's plans of an analysed query as text: over Connect EXPLAIN's (parsed and analysed, one
        round trip), on a classic session the analysed plan from the JVM."""
        if self._connect:
            return spark_call(lambda: frame._explain_string(extended=True), "The query is not valid")
        return ANALYZED + "\n" + frame._jdf.queryExecution().analyzed().treeString()

    def _table_relations(self, query: str, plans: str | None) -> list[NameRef]:
        """The relations that name tables or views (not CTEs), with their places in the text."""
        if not self._connect:
            relations = self._jvm_relations(query)
        else:
            if plans is None:
                plans = self._plan_text(query_frame(self.spark, query))
            relations = self._connect_relations(query, plans.split(ANALYZED, 1)[0])
        scopes = cte_scopes(query)
        return sorted((ref for ref in relations if not in_cte_scope(ref, scopes)), key=lambda r: r.start)

    @staticmethod
    def _reject_temporary_views(plans: str) -> None:
        """A view the analysed plan names with fewer than three parts is a temporary one (a persistent
        view cannot read a temporary one, so each reaches the plan through the query itself)."""
        for match in _VIEW.finditer(plans.split(ANALYZED, 1)[-1]):
            parts = quoted_names(match.group(1))
            if len(parts) < 3:
                name = ".".join(parts)
                raise ValidationError(
                    f"The query reads temporary view {name}; a materialized table must only read "
                    "catalog tables and views, which outlive the session.")

    def _reject_temporary_functions(self, query: str) -> None:
        tokens = tokenize(query)
        called = {t.value.lower() for t, nxt in zip(tokens, tokens[1:])
                  if t.kind in (Kind.WORD, Kind.QUOTED) and nxt.is_symbol("(")}
        if self._builtins is None:
            self._builtins = builtin_functions(self.spark)
        if not called - self._builtins:
            return    # Spark lists a temporary function that shadows a built-in one as neither
        for name in sorted(called & temporary_functions(self.spark)):
            raise ValidationError(
                f"The query calls temporary function {name}; a materialized table must only use "
                "built-in or catalog functions, which outlive the session.")

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

    @staticmethod
    def _connect_relations(query: str, parsed: str) -> list[NameRef]:
        expected = Counter(tuple(p.lower() for p in m.group(1).split(", "))
                           for m in _PARSED_RELATION.finditer(parsed))
        found = [ref for ref in relation_positions(query) if ref.key() in expected]
        if Counter(ref.key() for ref in found) != expected:
            raise ValidationError(
                "Could not place every table the query reads in its text (Spark reads "
                f"{', '.join('.'.join(k) for k in sorted(expected.elements()))}); write each table "
                "name plainly after FROM or JOIN.")
        return found
