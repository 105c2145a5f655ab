"""Where the cursor of a half-written %%mtsql cell stands, and so what Tab may complete there — by
syntax alone, with no catalog and no Spark: a keyword the statement grammar accepts next (asked of
the parser itself), a table after FROM / JOIN, a materialized table after ALTER / DROP / DESCRIBE …
MATERIALIZED TABLE, a column of the tables in scope (after an alias and '.', or bare in SELECT,
WHERE, GROUP BY, ON …), a WITH option key or its value, a SET option key, or a `{{variable}}`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from mt_magic import config as cfg
from mt_magic.sql.parser import expected_words
from mt_magic.sql.tokens import Kind, Token, tokenize

FORMATTER_KEY = "partition.fields.{}.date-formatter"
# Table options (WITH) and the values they take; the date formatter is offered per partition column.
TABLE_OPTIONS: dict[str, tuple[str, ...]] = {
    cfg.REFRESH_POLICY: cfg.REFRESH_POLICIES, "format": ("parquet", "orc", "json", "csv"),
    "connector": ("filesystem",), "path": (), cfg.SMALL_SOURCE_SIZE: (cfg.SMALL_SOURCE_DEFAULT,),
}
DATE_PATTERNS = ("yyyy-MM-dd", "yyyyMMdd", "yyyy-MM-dd HH", "yyyyMMddHH")
_CLAUSES = {"SELECT", "FROM", "JOIN", "WHERE", "GROUP", "ORDER", "HAVING", "ON", "QUALIFY", "BY", "AS", "WITH",
            "PARTITIONED", "FRESHNESS", "REFRESH_MODE", "LIMIT", "UNION", "USING", "SET"}
_COLUMN_CLAUSES = {"SELECT", "WHERE", "GROUP", "ORDER", "HAVING", "ON", "QUALIFY", "BY"}
_NOT_ALIASES = _CLAUSES | {"INNER", "LEFT", "RIGHT", "FULL", "CROSS", "OUTER", "SEMI", "ANTI", "NATURAL",
                           "LATERAL", "WINDOW", "TABLESAMPLE"}
_FRAGMENT = re.compile(r"[A-Za-z0-9_.]*$")


class Want(StrEnum):
    KEYWORD = "keyword"
    TABLE = "table"
    MATERIALIZED_TABLE = "materialized table"
    COLUMN = "column"
    TABLE_OPTION = "table option"
    OPTION_VALUE = "option value"
    SESSION_OPTION = "session option"
    VARIABLE = "variable"


@dataclass(frozen=True)
class Place:
    """What the cursor may be completed with: `fragment` is what it replaces."""

    want: Want
    fragment: str
    keywords: tuple[str, ...] = ()
    qualifier: str = ""                            # 'db' of 'db.sa', or the alias of 's.am'
    scope: tuple[tuple[str, str], ...] = ()        # (alias or name, table as written) read by the statement
    option: str = ""                               # the option whose value is written
    partition_columns: tuple[str, ...] = ()        # declared in PARTITIONED BY


def place(text: str, cursor: int) -> Place:
    """`text`: the SQL of the cell (after the magic's line); `cursor`: an offset into it."""
    before, after = text[:cursor], text[cursor:]
    variable = re.search(r"\{\{\s*(\w*)$", before)
    if variable:
        return Place(Want.VARIABLE, variable.group(1))
    before = before[_statement_start(before):]
    after = after[:_statement_end(after)]
    option = _option_place(before)
    if option is not None:
        return option
    fragment = _FRAGMENT.search(before).group()
    head = before[:len(before) - len(fragment)]
    words = [t.value.upper() if t.kind is Kind.WORD else t.value for t in tokenize(head)]
    scope = _scope(tokenize(f"{head} {after}"))        # what the statement reads, but the name being written
    qualifier = fragment.rsplit(".", 1)[0] if "." in fragment else ""
    if _names_materialized_table(words):
        return Place(Want.MATERIALIZED_TABLE, fragment)
    clause = next((w for w in reversed(words) if w in _CLAUSES), "")
    if words and (words[-1] in ("FROM", "JOIN") or (words[-1] == "," and clause == "FROM")):
        return Place(Want.TABLE, fragment, qualifier=qualifier, scope=scope)
    if qualifier:
        known = any(name.lower() == qualifier.lower() for name, _ in scope)
        return Place(Want.COLUMN if known else Want.TABLE, fragment, qualifier=qualifier, scope=scope)
    if clause in _COLUMN_CLAUSES and words and words[-1] not in ("AS",):
        return Place(Want.COLUMN, fragment, tuple(sorted(expected_words(head))), scope=scope)
    return Place(Want.KEYWORD, fragment, tuple(sorted(expected_words(head))), scope=scope)


def _statement_start(before: str) -> int:
    ends = [t.end for t in tokenize(before) if t.is_symbol(";")]
    return ends[-1] if ends else 0


def _statement_end(after: str) -> int:
    return next((t.start for t in tokenize(after) if t.is_symbol(";")), len(after))


def _option_place(before: str) -> Place | None:
    """Inside a quoted key or value of WITH ( … ), or the key of SET / RESET."""
    session = re.match(r"\s*(?:SET|RESET)\s+'([^']*)$", before, re.IGNORECASE)
    if session:
        return Place(Want.SESSION_OPTION, session.group(1))
    listing = re.search(r"\bWITH\s*\(([^()]*)$", before, re.IGNORECASE | re.DOTALL)
    if listing is None or listing.group(1).count("'") % 2 == 0:
        return None
    inside = listing.group(1)
    opened = inside.rfind("'")
    value_of = re.search(r"'([^']*)'\s*=\s*$", inside[:opened])
    partitioned = re.search(r"\bPARTITIONED\s+BY\s*\(([^)]*)\)", before, re.IGNORECASE)
    columns = tuple(c.strip().strip("`") for c in partitioned.group(1).split(",") if c.strip()) if partitioned else ()
    if value_of:
        return Place(Want.OPTION_VALUE, inside[opened + 1:], option=value_of.group(1))
    return Place(Want.TABLE_OPTION, inside[opened + 1:], partition_columns=columns)


def _names_materialized_table(words: list[str]) -> bool:
    """… ALTER / DROP / DESCRIBE / SHOW CREATE MATERIALIZED TABLE [IF EXISTS] |"""
    if words[-2:] == ["IF", "EXISTS"]:
        words = words[:-2]
    if words[-2:] != ["MATERIALIZED", "TABLE"] or len(words) < 3:
        return False
    verb = words[-3]
    return verb in ("ALTER", "DROP", "DESCRIBE", "DESC") or (verb == "CREATE" and words[-4:-3] == ["SHOW"])


def _scope(tokens: list[Token]) -> tuple[tuple[str, str], ...]:
    """The relations after FROM and JOIN, by alias (and by name), as written."""
    found: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        if not tokens[i].is_word("FROM", "JOIN"):
            i += 1
            continue
        i += 1
        parts: list[str] = []
        while i < len(tokens) and tokens[i].kind in (Kind.WORD, Kind.QUOTED) and \
                tokens[i].value.upper() not in _NOT_ALIASES:
            parts.append(tokens[i].value)
            if i + 1 < len(tokens) and tokens[i + 1].is_symbol("."):
                i += 2
                continue
            i += 1
            break
        if not parts:
            continue
        name = ".".join(parts)
        found.append((parts[-1], name))
        if i < len(tokens) and tokens[i].is_word("AS"):
            i += 1
        if i < len(tokens) and tokens[i].kind in (Kind.WORD, Kind.QUOTED) and \
                tokens[i].value.upper() not in _NOT_ALIASES:
            found.append((tokens[i].value, name))
            i += 1
    return tuple(dict.fromkeys(found))


def table_option_keys(partition_columns: tuple[str, ...]) -> list[str]:
    return [FORMATTER_KEY.format(c) for c in partition_columns] + list(TABLE_OPTIONS)


def option_values(option: str) -> tuple[str, ...]:
    if option.startswith("partition.fields.") and option.endswith(".date-formatter"):
        return DATE_PATTERNS
    return TABLE_OPTIONS.get(option, ())


def session_option_keys() -> list[str]:
    return sorted(v for k, v in vars(cfg).items() if k.isupper() and isinstance(v, str) and
                  v.startswith(("materialized-table.", "execution.")))
