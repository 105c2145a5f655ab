"""One frozen dataclass per statement kind; queries are kept as the user wrote them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mt_magic.sql.freshness import FreshnessLiteral


@dataclass(frozen=True)
class ObjectName:
    parts: tuple[str, ...]


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A Spark SQL string literal; nothing user-given is spliced into SQL any other way."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class ColumnDef:
    """A column in CREATE's parenthesised part; only `name` is set in a name-only list."""

    name: str
    type: str | None = None
    not_null: bool = False
    computed: str | None = None          # expression of a computed column
    metadata: bool = False
    metadata_key: str | None = None
    virtual: bool = False
    primary_key: bool = False            # column-level PRIMARY KEY NOT ENFORCED
    comment: str | None = None

    @property
    def persisted(self) -> bool:
        return self.computed is None and not self.virtual


@dataclass(frozen=True)
class PrimaryKey:
    name: str | None
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Watermark:
    column: str
    expression: str


@dataclass(frozen=True)
class Statement:
    text: str          # the statement's own text, for messages and pass-through
    cell_start: int = field(default=0, kw_only=True, compare=False)    # where `text` starts in the cell
    # Every word and quoted name of the text, lower-cased: the tables it may name, in any part.
    mentions: tuple[str, ...] = field(default=(), kw_only=True, compare=False)

    def query_offset(self) -> int | None:
        """Where the statement's query (if it has one) starts in the cell."""
        query = getattr(self, "query", "")
        return self.cell_start + self.text.rindex(query) if query and query in self.text else None


@dataclass(frozen=True)
class TableDefinition(Statement):
    """What CREATE MATERIALIZED TABLE and CREATE TABLE AS share: name, schema part, clauses, query."""

    name: ObjectName
    columns: tuple[ColumnDef, ...] = ()
    names_only: bool = False
    watermark: Watermark | None = None
    primary_key: PrimaryKey | None = None
    comment: str | None = None
    partition_keys: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    query: str = ""


@dataclass(frozen=True)
class CreateMaterializedTable(TableDefinition):
    or_alter: bool = False
    freshness: FreshnessLiteral | None = None
    refresh_mode: str | None = None

    @property
    def verb(self) -> str:
        return "CREATE OR ALTER MATERIALIZED TABLE" if self.or_alter else "CREATE MATERIALIZED TABLE"


@dataclass(frozen=True)
class CreateTableAs(TableDefinition):
    """CREATE [OR REPLACE] TABLE [IF NOT EXISTS] … AS query (FLIP-218's CTAS and RTAS)."""

    or_replace: bool = False
    if_not_exists: bool = False

    @property
    def verb(self) -> str:
        return "CREATE OR REPLACE TABLE AS" if self.or_replace else "CREATE TABLE AS"


@dataclass(frozen=True)
class AlterMaterializedTable(Statement):
    name: ObjectName


@dataclass(frozen=True)
class AlterSuspend(AlterMaterializedTable):
    pass


@dataclass(frozen=True)
class AlterResume(AlterMaterializedTable):
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AlterRefresh(AlterMaterializedTable):
    partition: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AlterBackfill(AlterMaterializedTable):
    start: str = ""
    end: str = ""


@dataclass(frozen=True)
class AlterQuery(AlterMaterializedTable):
    query: str = ""


@dataclass(frozen=True)
class AlterSetFreshness(AlterMaterializedTable):
    freshness: FreshnessLiteral | None = None


@dataclass(frozen=True)
class AlterSetRefreshMode(AlterMaterializedTable):
    refresh_mode: str = ""


@dataclass(frozen=True)
class AlterSetOptions(AlterMaterializedTable):
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AlterResetOptions(AlterMaterializedTable):
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class DropMaterializedTable(Statement):
    name: ObjectName
    if_exists: bool = False


@dataclass(frozen=True)
class DropTable(Statement):
    """DROP TABLE: Spark's, unless it names a materialized table (then it is refused)."""

    name: ObjectName
    if_exists: bool = False


@dataclass(frozen=True)
class ShowMaterializedTables(Statement):
    database: ObjectName | None = None
    pattern: str | None = None
    negate: bool = False


@dataclass(frozen=True)
class ShowCreateMaterializedTable(Statement):
    name: ObjectName


@dataclass(frozen=True)
class DescribeTable(Statement):
    """DESCRIBE of a plain name: ours for a materialized table, Spark's otherwise."""

    name: ObjectName
    extended: bool = False


@dataclass(frozen=True)
class SetOption(Statement):
    key: str
    value: str


@dataclass(frozen=True)
class ResetOption(Statement):
    key: str | None = None


@dataclass(frozen=True)
class SparkStatement(Statement):
    """Anything that is not about materialized tables: handed to spark.sql untouched."""


@dataclass(frozen=True)
class Explain(Statement):
    """EXPLAIN of a materialized table's statement: what it would do, and Spark's plan."""

    statement: Statement | None = None


def like_regex(pattern: str) -> str:
    """SQL LIKE: % any run, _ one character, backslash escapes."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        i += 1
    return "".join(out)
