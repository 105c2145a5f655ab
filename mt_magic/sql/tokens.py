"""Tokens with positions, and the split of a text into statements: the one reading of our SQL text
(the parser, the magic and `{{var}}` substitution all use it).

String literals, quoted identifiers and comments are read here by Spark's own lexical rules (one
definition, shared with the literal writer `statements.sql_string`): a backslash escapes the next
character, `''` is a quote, `R'…'` is raw, block comments nest. Only the code between them goes
through sqlparse's lexer for words, numbers and symbols.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from sqlparse import lexer
from sqlparse import tokens as T


class Kind(Enum):
    WORD = "word"              # keyword or unquoted identifier
    QUOTED = "quoted"          # `quoted identifier`
    STRING = "string"          # 'literal' or "literal"
    NUMBER = "number"
    SYMBOL = "symbol"          # punctuation and operators
    EOF = "end of statement"


@dataclass(frozen=True)
class Token:
    kind: Kind
    value: str
    start: int   # offset of the first character in the whole text
    end: int     # offset just past the last character

    def is_word(self, *words: str) -> bool:
        return self.kind is Kind.WORD and self.value.upper() in words

    def is_symbol(self, *symbols: str) -> bool:
        return self.kind is Kind.SYMBOL and self.value in symbols

    def describe(self) -> str:
        return "end of statement" if self.kind is Kind.EOF else f'"{self.value}"'


@dataclass(frozen=True)
class Segment:
    """One statement: its tokens (ending in EOF) and its span in the whole text."""

    tokens: list[Token]
    start: int
    end: int


_WORD_RUN = re.compile(r"\S+")
_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'" + r'|"(?:[^"\\]|\\.|"")*"', re.DOTALL)
_RAW_STRING = re.compile(r"""[rR](?:'[^']*'|"[^"]*")""")
_QUOTED_NAME = re.compile(r"`(?:[^`]|``)*`")
_STRING_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[0-7]{3}|.)|''" + r'|""', re.DOTALL)
# Spark's unescapeSQLString: \% and \_ keep their backslash (they mean something to LIKE).
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "Z": "\x1a", "%": "\\%", "_": "\\_"}


def _classify(ttype) -> Kind | None:
    if ttype in T.Whitespace or ttype in T.Comment or ttype in T.Newline:
        return None
    if ttype in T.String:            # 'single' and "double" quoted literals alike
        return Kind.STRING
    if ttype in T.Number:
        return Kind.NUMBER
    if ttype in T.Punctuation or ttype in T.Operator or ttype in T.Wildcard or ttype in T.Error:
        return Kind.SYMBOL
    return Kind.WORD


def _spans(text: str) -> list[tuple[Kind | None, int, int]]:
    """The text cut into code (kind None), strings, quoted names and comments (dropped)."""
    spans: list[tuple[Kind | None, int, int]] = []
    code = i = 0
    while i < len(text):
        char = text[i]
        found: tuple[Kind | None, int] | None = None
        if char in "rR" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                and (match := _RAW_STRING.match(text, i)):
            found = (Kind.STRING, match.end())
        elif char in "'\"" and (match := _STRING.match(text, i)):
            found = (Kind.STRING, match.end())
        elif char == "`" and (match := _QUOTED_NAME.match(text, i)):
            found = (Kind.QUOTED, match.end())
        elif text.startswith("--", i):
            newline = text.find("\n", i)
            found = (None, len(text) if newline < 0 else newline)
        elif text.startswith("/*", i) and (end := _comment_end(text, i)) is not None:
            found = (None, end)
        if found is None:
            i += 1
            continue
        if code < i:
            spans.append((None, code, i))
        kind, end = found
        if kind is not None:
            spans.append((kind, i, end))
        code = i = end
    if code < len(text):
        spans.append((None, code, len(text)))
    return spans


def _comment_end(text: str, start: int) -> int | None:
    """Just past the `*/` closing the block comment at `start`, nested ones included; None when it
    is never closed (the `/*` then reaches the parser, which says so)."""
    depth, i = 0, start
    while i < len(text) - 1:
        pair = text[i:i + 2]
        if pair == "/*":
            depth, i = depth + 1, i + 2
        elif pair == "*/":
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return None


def code_spans(text: str) -> list[tuple[int, int]]:
    """Where `text` is code: outside string literals, quoted names and comments (Spark's rules)."""
    return [(start, end) for kind, start, end in _spans(text) if kind is None]


def tokenize(text: str) -> list[Token]:
    """Every significant token of `text`; multi-word keywords ('NOT NULL') become single words."""
    result: list[Token] = []
    for kind, start, end in _spans(text):
        if kind is Kind.STRING:
            result.append(Token(Kind.STRING, text[start:end], start, end))
        elif kind is Kind.QUOTED:
            result.append(Token(Kind.QUOTED, text[start + 1:end - 1].replace("``", "`"), start, end))
        else:
            result.extend(_code_tokens(text[start:end], start))
    return result


def _code_tokens(code: str, offset: int) -> list[Token]:
    result: list[Token] = []
    for ttype, value in lexer.tokenize(code):
        start, offset = offset, offset + len(value)
        kind = _classify(ttype)
        if kind is None:
            continue
        if kind in (Kind.WORD, Kind.SYMBOL) and _WORD_RUN.fullmatch(value) is None:
            # multi-word keywords and operators ('NOT NULL', 'NOT LIKE') arrive as one token
            for run in _WORD_RUN.finditer(value):
                result.append(Token(Kind.WORD, run.group(), start + run.start(), start + run.end()))
        elif kind is Kind.SYMBOL and value[0].isalpha():
            result.append(Token(Kind.WORD, value, start, offset))
        else:
            result.append(Token(kind, value, start, offset))
    return result


def split(text: str) -> list[Segment]:
    """Statements separated by ';' outside quotes and comments; empty ones are dropped."""
    return segments_of(tokenize(text))


def segments_of(tokens: list[Token]) -> list[Segment]:
    segments: list[Segment] = []
    current: list[Token] = []
    for token in tokens:
        if token.is_symbol(";"):
            if current:
                segments.append(_segment(current))
            current = []
        else:
            current.append(token)
    if current:
        segments.append(_segment(current))
    return segments


def _segment(tokens: list[Token]) -> Segment:
    end = tokens[-1].end
    return Segment(tokens + [Token(Kind.EOF, "", end, end)], tokens[0].start, end)


def quoted_names(text: str) -> list[str]:
    """The backquoted names in a text Spark wrote (a plan, DESCRIBE's rows), as they are unquoted."""
    return [token.value for token in tokenize(text) if token.kind is Kind.QUOTED]


def unquote_string(token: Token) -> str:
    """The value of a Spark string literal: backslash escapes and doubled quotes resolved, a raw
    literal (R'…') as written."""
    if token.value[0] in "rR":
        return token.value[2:-1]
    body = token.value[1:-1]

    def replace(match: re.Match) -> str:
        if match.group(1) is None:           # '' or ""
            return match.group(0)[0]
        escaped = match.group(1)
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        if len(escaped) == 3:
            return chr(int(escaped, 8))
        return _ESCAPES.get(escaped, escaped)

    return _STRING_ESCAPE.sub(replace, body)


def line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of an offset."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
