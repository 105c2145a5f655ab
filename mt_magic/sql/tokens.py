"""Tokens with positions, from sqlparse's lexer, and the split of a text into statements."""

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
_STRING_ESCAPE = re.compile(r"\\(.)|''", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def _classify(ttype) -> Kind | None:
    if ttype in T.Whitespace or ttype in T.Comment or ttype in T.Newline:
        return None
    if ttype in T.String:            # 'single' and "double" quoted literals alike
        return Kind.STRING
    if ttype in T.Number:
        return Kind.NUMBER
    if ttype in T.Punctuation or ttype in T.Operator or ttype in T.Wildcard:
        return Kind.SYMBOL
    return Kind.WORD


def tokenize(text: str) -> list[Token]:
    """Every significant token of `text`; multi-word keywords ('NOT NULL') become single words."""
    result: list[Token] = []
    offset = 0
    for ttype, value in lexer.tokenize(text):
        start, offset = offset, offset + len(value)
        kind = _classify(ttype)
        if kind is None:
            continue
        if kind is Kind.WORD and value.startswith("`"):
            result.append(Token(Kind.QUOTED, value[1:-1].replace("``", "`"), start, offset))
        elif kind in (Kind.WORD, Kind.SYMBOL) and _WORD_RUN.fullmatch(value) is None:
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
    segments: list[Segment] = []
    current: list[Token] = []
    for token in tokenize(text):
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


def unquote_string(token: Token) -> str:
    """The value of a Spark string literal: backslash escapes and doubled quotes resolved."""
    body = token.value[1:-1]

    def replace(match: re.Match) -> str:
        if match.group(0) == "''":
            return "'"
        return _ESCAPES.get(match.group(1), match.group(1))

    return _STRING_ESCAPE.sub(replace, body)


def line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of an offset."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
