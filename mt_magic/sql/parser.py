"""Recursive-descent parser for the materialized-table statements; the rest goes to Spark."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace

from mt_magic.errors import ParseError, ValidationError
from mt_magic.sql import statements as st
from mt_magic.sql.freshness import FreshnessLiteral
from mt_magic.sql.tokens import Kind, Segment, Token, line_column, segments_of, split, tokenize, unquote_string

_FRESHNESS_MESSAGE = ("MATERIALIZED TABLE only supports define interval type FRESHNESS, "
                      "please refer to the materialized table document.")
_TYPE_STOPS = ("METADATA", "NOT", "NULL", "CONSTRAINT", "PRIMARY", "COMMENT")
# CREATE MATERIALIZED TABLE's clauses in their order, each with the field it fills.
_CREATE_CLAUSES = [("comment", "COMMENT"), ("partition_keys", "PARTITIONED BY"), ("options", "WITH"),
                   ("freshness", "FRESHNESS"), ("refresh_mode", "REFRESH_MODE")]


def parse(text: str) -> list[st.Statement]:
    """Every statement of `text`, in order. Raises ParseError with line and column."""
    return parse_cell(text).statements


@dataclass(frozen=True)
class Cell:
    """A cell read once: its text, its statements, and whether a trailing ';' silences its output (a
    notebook's rule; IPython's own check tokenizes the cell as Python, where SQL's free indentation
    raises IndentationError)."""

    text: str
    statements: list[st.Statement]
    silenced: bool


def parse_cell(text: str) -> Cell:
    _check_encodable(text)
    tokens = tokenize(text)
    return Cell(text, [_placed(_Parser(text, segment).statement(), segment) for segment in segments_of(tokens)],
                bool(tokens) and tokens[-1].is_symbol(";"))


def parse_name(text: str) -> st.ObjectName:
    """A table name as a user types it outside a statement (`gw.describe("db.t")`, an option that names
    tables): [catalog.][database.]table, quoted parts with backticks. Raises ParseError."""
    _check_encodable(text)
    segments = split(text)
    if len(segments) != 1:
        raise ParseError("Expected one table name: [catalog.][database.]table.", line=1, column=1, text=text)
    parser = _Parser(text, segments[0])
    name = parser.object_name()
    if parser.token.kind is not Kind.EOF:
        raise parser.error("the end of the name")
    return name


def _placed(statement: st.Statement, segment: Segment) -> st.Statement:
    """The statement (and the one an EXPLAIN holds) told where its text starts in the cell, and the
    names its text holds."""
    mentions = tuple(dict.fromkeys(t.value.lower() for t in segment.tokens if t.kind in (Kind.WORD, Kind.QUOTED)))
    if isinstance(statement, st.Explain):
        statement = replace(statement, statement=_placed(statement.statement, segment))
    return replace(statement, cell_start=segment.start, mentions=mentions)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_encodable(text: str) -> None:
    """Text goes to Spark as UTF-8: a lone surrogate (possible in a Python str) cannot."""
    found = _SURROGATE.search(text)
    if found:
        line, column = line_column(text, found.start())
        raise ParseError(f"character U+{ord(found.group()):04X} is a lone surrogate, not text that UTF-8 "
                         "can carry; remove it", line=line, column=column, text=_SURROGATE.sub("?", text))


class _Parser:
    def __init__(self, text: str, segment: Segment) -> None:
        self.text = text
        self.segment = segment
        self.tokens = segment.tokens
        self.pos = 0

    # ----------------------------------------------------------------- helpers
    @property
    def token(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.token
        if token.kind is not Kind.EOF:
            self.pos += 1
        return token

    def error(self, expected: str, token: Token | None = None, message: str | None = None) -> ParseError:
        token = token or self.token
        line, column = line_column(self.text, token.start)
        return ParseError(message or f"Encountered {token.describe()}; expected {expected}.",
                          line=line, column=column, text=self.text)

    def accept(self, *words: str) -> bool:
        if self.token.is_word(*words):
            self.advance()
            return True
        return False

    def expect(self, *words: str) -> Token:
        if not self.token.is_word(*words):
            raise self.error(" or ".join(f'"{w}"' for w in words))
        return self.advance()

    def accept_symbol(self, symbol: str) -> bool:
        if self.token.is_symbol(symbol):
            self.advance()
            return True
        return False

    def expect_symbol(self, symbol: str) -> Token:
        if not self.token.is_symbol(symbol):
            raise self.error(f'"{symbol}"')
        return self.advance()

    def expect_end(self) -> None:
        if self.token.kind is not Kind.EOF:
            raise self.error("end of statement")

    @property
    def statement_text(self) -> str:
        return self.text[self.segment.start:self.segment.end]

    def rest_text(self, after: Token) -> str:
        return self.text[after.end:self.segment.end].strip()

    # -------------------------------------------------------------- dispatch
    def statement(self) -> st.Statement:
        first = self.token
        if first.is_word("CREATE") and self._is_materialized(1):
            return self.create()
        if first.is_word("CREATE") and self._is_table_as():
            return self._optional(self.create_table_as)
        if first.is_word("ALTER") and self.peek().is_word("MATERIALIZED"):
            return self.alter()
        if first.is_word("EXPLAIN") and ((self.peek().is_word("ALTER") and self.peek(2).is_word("MATERIALIZED"))
                                         or (self.peek().is_word("CREATE") and self._is_materialized(2))):
            self.advance()
            inner = self.alter() if self.token.is_word("ALTER") else self.create()
            return st.Explain(self.statement_text, inner)
        if first.is_word("DROP") and self._is_materialized(1):
            return self.drop()
        if first.is_word("DROP") and self.peek().is_word("TABLE"):
            return self._optional(self.drop_table)
        if first.is_word("SHOW") and self.peek().is_word("MATERIALIZED"):
            return self.show_tables()
        if first.is_word("SHOW") and self.peek().is_word("CREATE") and self.peek(2).is_word("MATERIALIZED"):
            return self.show_create()
        if first.is_word("DESCRIBE", "DESC"):
            return self._optional(self.describe)
        if first.is_word("SET") and self.peek().kind is Kind.STRING:
            return self.set_option()
        if first.is_word("RESET") and self.peek().kind in (Kind.STRING, Kind.EOF):
            return self.reset_option()
        if first.is_word("CREATE", "ALTER", "DROP", "SHOW", "EXPLAIN", "DESCRIBE", "DESC"):
            self._near_miss()
        return st.SparkStatement(self.statement_text)

    def _near_miss(self) -> None:
        """`CREATE MATERIALISED TABLE` is ours misspelt, not Spark's to answer without a caret."""
        for index in range(1, 5):
            token = self.peek(index)
            if token.kind is Kind.WORD and not token.is_word("MATERIALIZED") and \
                    self.peek(index + 1).is_word("TABLE", "TABLES") and \
                    difflib.get_close_matches(token.value.upper(), ["MATERIALIZED"], cutoff=0.8):
                raise self.error("", token=token, message=f"Encountered {token.describe()}; did you mean "
                                                          "MATERIALIZED?")

    def _is_materialized(self, start: int) -> bool:
        """CREATE/DROP [OR ALTER|OR REPLACE] [TEMPORARY] MATERIALIZED ..."""
        i = start
        if self.peek(i).is_word("OR"):
            i += 2
        if self.peek(i).is_word("TEMPORARY"):
            i += 1
        return self.peek(i).is_word("MATERIALIZED")

    def _is_table_as(self) -> bool:
        """CREATE [OR REPLACE] TABLE … with an AS query somewhere: FLIP-218's CTAS/RTAS."""
        start = 3 if self.peek().is_word("OR") and self.peek(2).is_word("REPLACE") else 1
        return self.peek(start).is_word("TABLE") and any(t.is_word("AS") for t in self.tokens)

    def _optional(self, rule) -> st.Statement:
        """Statements Spark also has: ours only in the exact shape, else Spark's."""
        try:
            return rule()
        except ParseError:
            return st.SparkStatement(self.statement_text)

    # ------------------------------------------------------------ names etc.
    def identifier(self) -> str:
        token = self.token
        if token.kind in (Kind.WORD, Kind.QUOTED) and token.value:
            return self.advance().value
        raise self.error("an identifier")

    def object_name(self) -> st.ObjectName:
        parts = [self.identifier()]
        while self.token.is_symbol(".") and self.peek().kind in (Kind.WORD, Kind.QUOTED):
            self.advance()
            parts.append(self.identifier())
        if len(parts) > 3:
            raise self.error("a name of at most three parts [catalog.][database.]table",
                             message="A name has at most three parts: [catalog.][database.]table.")
        return st.ObjectName(tuple(parts))

    def string(self, what: str = "a string literal") -> str:
        if self.token.kind is not Kind.STRING:
            raise self.error(what)
        return unquote_string(self.advance())

    def identifier_list(self) -> tuple[str, ...]:
        self.expect_symbol("(")
        names = [self.identifier()]
        while self.accept_symbol(","):
            names.append(self.identifier())
        self.expect_symbol(")")
        return tuple(names)

    def properties(self) -> dict[str, str]:
        """('k' = 'v', ...); later duplicates win, as in Flink."""
        self.expect_symbol("(")
        props: dict[str, str] = {}
        if self.accept_symbol(")"):
            return props
        while True:
            key = self.string("a quoted option key")
            self.expect_symbol("=")
            props[key] = self.string("a quoted option value")
            if self.accept_symbol(")"):
                return props
            self.expect_symbol(",")

    def key_list(self) -> tuple[str, ...]:
        self.expect_symbol("(")
        keys: list[str] = []
        if self.accept_symbol(")"):
            return ()
        while True:
            keys.append(self.string("a quoted option key"))
            if self.accept_symbol(")"):
                return tuple(dict.fromkeys(keys))
            self.expect_symbol(",")

    def freshness(self) -> FreshnessLiteral:
        self.expect_symbol("=")
        if not self.token.is_word("INTERVAL"):
            raise self.error("", message=_FRESHNESS_MESSAGE)
        self.advance()
        sign = "-" if self.accept_symbol("-") else ""
        if self.token.kind is not Kind.STRING:
            raise self.error("", message=_FRESHNESS_MESSAGE)
        value = sign + unquote_string(self.advance())
        if self.token.kind is not Kind.WORD:
            raise self.error("a time unit: SECOND, MINUTE, HOUR or DAY")
        unit = self.advance().value.upper()
        to_unit = None
        if self.accept("TO"):
            to_unit = self.identifier().upper()
        return FreshnessLiteral(value, unit, to_unit)

    def refresh_mode(self) -> str:
        self.expect_symbol("=")
        return self.expect("CONTINUOUS", "FULL").value.upper()

    def query_after(self, as_token: Token) -> str:
        query = self.rest_text(as_token)
        if not query:
            raise self.error("a query after AS")
        return query

    # ---------------------------------------------------------------- CREATE
    def create(self) -> st.CreateMaterializedTable:
        create = self.expect("CREATE")
        or_alter = False
        if self.accept("OR"):
            if self.token.is_word("REPLACE"):
                raise self.error("", message="REPLACE MATERIALIZED TABLE is not supported.")
            self.expect("ALTER")
            or_alter = True
        if self.token.is_word("TEMPORARY"):
            raise self.error("", token=create,
                             message="CREATE TEMPORARY MATERIALIZED TABLE is not supported.")
        self.expect("MATERIALIZED")
        self.expect("TABLE")
        name = self.object_name()
        fields = self.definition_clauses(materialized=True)
        if self.accept("FRESHNESS"):
            fields["freshness"] = self.freshness()
        if self.accept("REFRESH_MODE"):
            fields["refresh_mode"] = self.refresh_mode()
        if not self.token.is_word("AS"):
            raise self.error(self._create_expected(fields), message=self._misplaced(fields))
        as_token = self.advance()
        return st.CreateMaterializedTable(self.statement_text, name=name, or_alter=or_alter,
                                          query=self.query_after(as_token), **fields)

    def create_table_as(self) -> st.CreateTableAs:
        """Flink's shape only; Spark's own clauses (USING, OPTIONS, LOCATION, ...) fail here and the
        statement goes to Spark untouched."""
        self.expect("CREATE")
        or_replace = self.accept("OR")
        if or_replace:
            self.expect("REPLACE")
        self.expect("TABLE")
        if_not_exists = False
        if self.accept("IF"):
            self.expect("NOT")
            self.expect("EXISTS")
            if_not_exists = True
        name = self.object_name()
        fields = self.definition_clauses(materialized=False)
        as_token = self.expect("AS")
        return st.CreateTableAs(self.statement_text, name=name, or_replace=or_replace,
                                if_not_exists=if_not_exists, query=self.query_after(as_token), **fields)

    def definition_clauses(self, materialized: bool) -> dict:
        """[( schema part )] [COMMENT '..'] [PARTITIONED BY (..)] [WITH (..)], shared by both CREATEs."""
        fields: dict = {}
        if self.token.is_symbol("("):
            fields.update(self.table_elements())
        if self.accept("COMMENT"):
            fields["comment"] = self.string()
        if materialized and self.token.is_word("DISTRIBUTED"):
            raise self.error("", message="DISTRIBUTED BY is not supported: Spark file tables have no "
                                         "bucketed distribution for materialized tables.")
        if self.accept("PARTITIONED"):
            self.expect("BY")
            fields["partition_keys"] = self.identifier_list()
        if self.accept("WITH"):
            fields["options"] = self.properties()
        return fields

    @staticmethod
    def _create_expected(seen: dict) -> str:
        last = max((i for i, (key, _) in enumerate(_CREATE_CLAUSES) if key in seen), default=-1)
        return ", ".join(f'"{word}"' for _, word in _CREATE_CLAUSES[last + 1:]) + (", " if last < 4 else "") + '"AS"'

    def _misplaced(self, seen: dict) -> str | None:
        """A clause after one it comes before (`FRESHNESS … WITH (…)`): say the order, not only what
        may follow."""
        words = [word for _, word in _CREATE_CLAUSES]
        here = next((i for i, word in enumerate(words) if self.token.is_word(word.split()[0])), None)
        if here is None:
            return None
        later = next((word for key, word in _CREATE_CLAUSES[here:] if key in seen), None)
        if later is None:
            return None
        return (f"Encountered {self.token.describe()}; expected {self._create_expected(seen)}. "
                + (f"{words[here]} is given twice." if later == words[here] else
                   f"{words[here]} comes before {later}: a CREATE MATERIALIZED TABLE's clauses go in the order "
                   f"{', '.join(words)}, then AS."))

    def table_elements(self) -> dict:
        self.expect_symbol("(")
        columns: list[st.ColumnDef] = []
        fields: dict = {}
        while True:
            if self.token.is_word("WATERMARK"):
                fields["watermark"] = self.watermark()
            elif self.token.is_word("CONSTRAINT", "PRIMARY", "UNIQUE"):
                if "primary_key" in fields:
                    raise self.error("", message="A materialized table can have only one PRIMARY KEY.")
                fields["primary_key"] = self.table_constraint()
            else:
                columns.append(self.column())
            if self.accept_symbol(")"):
                break
            self.expect_symbol(",")
        kinds = {c.type is None and c.computed is None for c in columns}
        if len(kinds) > 1:
            raise self.error("", message="A column list holds either names only or full column "
                                         "definitions, not both.")
        fields["columns"] = tuple(columns)
        fields["names_only"] = kinds == {True}
        return fields

    def watermark(self) -> st.Watermark:
        self.expect("WATERMARK")
        self.expect("FOR")
        column = self.identifier()
        self.expect("AS")
        return st.Watermark(column, self.expression_until(()))

    def constraint_tail(self) -> None:
        if self.token.is_word("NOT") and self.peek().is_word("ENFORCED"):
            self.advance()
            self.advance()
            return
        raise ValidationError("PRIMARY KEY constraints must be declared NOT ENFORCED: mt_magic, like "
                              "Flink, does not enforce them.")

    def table_constraint(self) -> st.PrimaryKey:
        name = self.identifier() if self.accept("CONSTRAINT") else None
        if self.token.is_word("UNIQUE"):
            raise ValidationError("UNIQUE constraint is not supported yet.")
        self.expect("PRIMARY")
        self.expect("KEY")
        columns = self.identifier_list()
        self.constraint_tail()
        return st.PrimaryKey(name, columns)

    def column(self) -> st.ColumnDef:
        name = self.identifier()
        if self.token.is_symbol(",", ")"):
            return st.ColumnDef(name)
        if self.accept("AS"):
            expression = self.expression_until(("COMMENT",))
            comment = self.string() if self.accept("COMMENT") else None
            return st.ColumnDef(name, computed=expression, comment=comment)
        type_text = self.expression_until(_TYPE_STOPS, angle=True)
        if not type_text:
            raise self.error("a data type")
        fields: dict = {"type": type_text}
        if self.accept("METADATA"):
            fields["metadata"] = True
            if self.accept("FROM"):
                fields["metadata_key"] = self.string()
            fields["virtual"] = self.accept("VIRTUAL")
        if self.accept("NOT"):
            self.expect("NULL")
            fields["not_null"] = True
        else:
            self.accept("NULL")
        if self.token.is_word("CONSTRAINT", "PRIMARY"):
            if self.accept("CONSTRAINT"):
                self.identifier()
            self.expect("PRIMARY")
            self.expect("KEY")
            self.constraint_tail()
            fields["primary_key"] = True
        if self.accept("COMMENT"):
            fields["comment"] = self.string()
        return st.ColumnDef(name, **fields)

    def expression_until(self, stop_words: tuple[str, ...], angle: bool = False) -> str:
        """Source text up to ',' or ')' at depth 0 or a stop word; `angle` nests <> (types)."""
        opening, closing = ("(", "<") if angle else ("(",), (")", ">") if angle else (")",)
        depth = 0
        start = self.token
        last = None
        while self.token.kind is not Kind.EOF:
            token = self.token
            if depth == 0 and (token.is_symbol(",", ")") or token.is_word(*stop_words)):
                break
            if token.is_symbol(*opening):
                depth += 1
            elif token.is_symbol(*closing):
                depth -= 1
            elif angle and token.is_symbol(">>"):
                depth -= 2
            last = self.advance()
        if last is None:
            return ""
        return self.text[start.start:last.end]

    # ----------------------------------------------------------------- ALTER
    def alter(self) -> st.AlterMaterializedTable:
        self.expect("ALTER")
        self.expect("MATERIALIZED")
        self.expect("TABLE")
        name = self.object_name()
        text = self.statement_text
        verbs = ("SUSPEND", "RESUME", "REFRESH", "BACKFILL", "AS", "SET", "RESET")
        token = self.token
        if not token.is_word(*verbs):
            raise self.error(", ".join(f'"{v}"' for v in verbs))
        self.advance()
        verb = token.value.upper()
        if verb == "AS":
            return st.AlterQuery(text, name, query=self.query_after(token))
        if verb == "SUSPEND":
            result: st.AlterMaterializedTable = st.AlterSuspend(text, name)
        elif verb == "RESUME":
            result = st.AlterResume(text, name, options=self.properties() if self.accept("WITH") else {})
        elif verb == "REFRESH":
            result = st.AlterRefresh(text, name,
                                     partition=self.partition_spec() if self.accept("PARTITION") else {})
        elif verb == "BACKFILL":
            self.expect("FROM")
            start = self.string("a quoted start time")
            self.expect("TO")
            result = st.AlterBackfill(text, name, start=start, end=self.string("a quoted end time"))
        elif verb == "RESET":
            result = st.AlterResetOptions(text, name, keys=self.key_list())
        elif self.accept("FRESHNESS"):
            result = st.AlterSetFreshness(text, name, freshness=self.freshness())
        elif self.accept("REFRESH_MODE"):
            result = st.AlterSetRefreshMode(text, name, refresh_mode=self.refresh_mode())
        elif self.token.is_symbol("("):
            result = st.AlterSetOptions(text, name, options=self.properties())
        else:
            raise self.error('"FRESHNESS", "REFRESH_MODE" or "("')
        self.expect_end()
        return result

    def partition_spec(self) -> dict[str, str]:
        self.expect_symbol("(")
        spec: dict[str, str] = {}
        while True:
            name = self.token
            key = self.identifier()
            if key.lower() in (k.lower() for k in spec):     # Spark compares names case-insensitively
                raise self.error("", token=name, message=f"Partition key '{key}' is given twice in the "
                                                         "PARTITION spec.")
            self.expect_symbol("=")
            token = self.token
            if token.kind is Kind.STRING:
                spec[key] = unquote_string(self.advance())
            elif token.kind is Kind.NUMBER:
                spec[key] = self.advance().value
            else:
                raise self.error("a string or number literal as the partition value")
            if self.accept_symbol(")"):
                return spec
            self.expect_symbol(",")

    # ------------------------------------------------------------ DROP etc.
    def drop(self) -> st.DropMaterializedTable:
        drop = self.expect("DROP")
        if self.token.is_word("TEMPORARY"):
            raise self.error("", token=drop, message="DROP TEMPORARY MATERIALIZED TABLE is not supported.")
        self.expect("MATERIALIZED")
        self.expect("TABLE")
        if_exists = self._if_exists()
        name = self.object_name()
        self.expect_end()
        return st.DropMaterializedTable(self.statement_text, name, if_exists)

    def _if_exists(self) -> bool:
        if self.accept("IF"):
            self.expect("EXISTS")
            return True
        return False

    def drop_table(self) -> st.DropTable:
        self.expect("DROP")
        self.expect("TABLE")
        if_exists = self._if_exists()
        name = self.object_name()
        self.expect_end()
        return st.DropTable(self.statement_text, name, if_exists)

    def show_tables(self) -> st.ShowMaterializedTables:
        self.expect("SHOW")
        self.expect("MATERIALIZED")
        self.expect("TABLES")
        database = self.object_name() if self.accept("FROM", "IN") else None
        negate = self.accept("NOT")
        pattern = None
        if negate or self.token.is_word("LIKE"):
            self.expect("LIKE")
            pattern = self.string("a quoted LIKE pattern")
        self.expect_end()
        if database is not None and len(database.parts) > 2:
            raise self.error("", message="SHOW MATERIALIZED TABLES takes [catalog.]database after FROM/IN.")
        return st.ShowMaterializedTables(self.statement_text, database, pattern, negate)

    def show_create(self) -> st.ShowCreateMaterializedTable:
        for word in ("SHOW", "CREATE", "MATERIALIZED", "TABLE"):
            self.expect(word)
        name = self.object_name()
        self.expect_end()
        return st.ShowCreateMaterializedTable(self.statement_text, name)

    def describe(self) -> st.DescribeTable:
        self.expect("DESCRIBE", "DESC")
        self.accept("TABLE")
        extended = self.accept("EXTENDED", "FORMATTED")
        name = self.object_name()
        self.expect_end()
        return st.DescribeTable(self.statement_text, name, extended)

    def set_option(self) -> st.SetOption:
        self.expect("SET")
        key = self.string()
        self.expect_symbol("=")
        value = self.string("a quoted value")
        self.expect_end()
        return st.SetOption(self.statement_text, key, value)

    def reset_option(self) -> st.ResetOption:
        self.expect("RESET")
        key = self.string() if self.token.kind is Kind.STRING else None
        self.expect_end()
        return st.ResetOption(self.statement_text, key)


@dataclass(frozen=True)
class _Probe(Token):
    """The end of a half-written statement: notes every keyword the grammar asks it to be."""

    asked: set = field(default_factory=set, compare=False)

    def is_word(self, *words: str) -> bool:
        self.asked.update(words)
        return False


class _Probing(_Parser):
    def peek(self, ahead: int = 1) -> Token:
        """Looking past the probe sees a plain end: only words asked *at* the end are noted."""
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else Token(Kind.EOF, "", len(self.text), len(self.text))


def expected_words(text: str) -> set[str]:
    """The keywords the statement grammar accepts right after `text` (its last statement, written up
    to there): the parser itself, run to the end of the text — Tab completion's keywords and the
    parser's are one grammar."""
    segments = [] if text.rstrip().endswith(";") else split(text)
    tokens = segments[-1].tokens[:-1] if segments else []
    probe = _Probe(Kind.EOF, "", len(text), len(text))
    parser = _Probing(text, Segment(tokens + [probe], tokens[0].start if tokens else len(text), len(text)))
    try:
        parser.statement()
    except (ParseError, ValidationError):
        pass
    return probe.asked
