"""One lexer: `{{var}}` substitution and the parser read a cell the same way. For random statements
with placeholders in code, strings, raw strings, quoted names and (nested) comments, and hostile
values of every type a placeholder takes, the substituted text has exactly the tokens of the
original, each placeholder in code now the tokens of one literal that read back to the value. No
Spark needed (Spark's reading of each form: tests/test_magic.py)."""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mt_magic.sql.literals import sql_literal
from mt_magic.sql.placeholders import substitution
from mt_magic.sql.parser import parse_cell
from mt_magic.sql.tokens import Kind, Token, line_column, split, tokenize, unquote_string

TEXT = st.one_of(
    st.sampled_from(["'", "\\", "\\'", "''", "*/", "/*", "--", "\n", ";", "{{x}}", "`", '"', "R'", "\\u0041",
                     "'; DROP TABLE t; --", "x' OR '1'='1", "\\\\'"]),
    st.text(max_size=12))
HOSTILE = st.one_of(
    TEXT, st.none(), st.booleans(), st.integers(-10 ** 38 + 1, 10 ** 38 - 1), st.floats(),
    st.decimals(allow_nan=False, allow_infinity=False).filter(
        lambda d: len(d.as_tuple().digits) <= 30 and -8 <= int(d.as_tuple().exponent) <= 8),
    st.dates(), st.datetimes())


def read_back(tokens: list[Token]) -> object:
    """The value a literal's tokens spell, by Spark's rules for each form the writer uses."""
    words = [t.value.upper() if t.kind is Kind.WORD else t.value for t in tokens]
    if words[0] == "(" and words[-1] == ")":            # a negative number
        return read_back(tokens[1:-1])
    if len(tokens) == 1 and tokens[0].kind is Kind.WORD:
        return {"NULL": None, "TRUE": True, "FALSE": False}[words[0]]
    if len(tokens) == 1 and tokens[0].kind is Kind.STRING:
        return unquote_string(tokens[0])
    if len(tokens) == 1 and tokens[0].kind is Kind.NUMBER:
        text = tokens[0].value
        return float(text) if "E" in text.upper() else Decimal(text) if "." in text else int(text)
    if words[0] in ("DATE", "TIMESTAMP") and len(tokens) == 2:
        text = unquote_string(tokens[1])
        return date.fromisoformat(text) if words[0] == "DATE" else datetime.fromisoformat(text)
    assert words[:3] == ["CAST", "(", words[2]] and words[3] == "AS", words
    text = unquote_string(tokens[2])
    if words[4:] == ["DOUBLE", ")"]:
        return float(text.replace("Infinity", "inf"))
    assert words[4:6] == ["DECIMAL", "("] and words[-4:] == [",", "0", ")", ")"], words
    return Decimal(text)


def same(value: object, read: object) -> bool:
    if isinstance(value, float):
        return isinstance(read, float) and (repr(read) == repr(value) or math.isnan(value) and math.isnan(read))
    return type(read) is type(value) and read == value


@given(HOSTILE)
def test_every_value_is_written_as_a_literal_the_lexer_reads_back(value):
    assert same(value, read_back(tokenize(sql_literal(value))))
WORDS = st.sampled_from(["SELECT", "a", "b1", "FROM", "t", "WHERE", "=", ",", "(", ")", "1", "2.5", "x.y", "+",
                         "<>", "*", "NOT", "NULL", "AND", "LIKE", "AS"])
NAMES = st.sampled_from(["v0", "v1", "v2"])


def _quoted_body(quote: str, with_escapes: bool):
    """The inside of a literal: plain characters, escaped quotes and backslashes, placeholders."""
    plain = st.text(alphabet="ab ;()-*/{}\n", max_size=5)
    escapes = [f"\\{quote}", "\\\\", quote * 2] if with_escapes else []
    parts = st.lists(st.one_of(plain, st.sampled_from(escapes or ["a"]), NAMES.map(lambda n: f"{{{{{n}}}}}")),
                     max_size=4)
    return parts.map("".join)


@st.composite
def fragments(draw):
    """(original text, expected text): a placeholder in code becomes the word ph_<name> in the
    expected text; everything else stays as written in both."""
    kind = draw(st.sampled_from(["word", "code", "string", "dstring", "raw", "quoted", "line", "block"]))
    if kind == "word":
        word = draw(WORDS)
        return word, word
    if kind == "code":
        name = draw(NAMES)
        spaces = draw(st.sampled_from(["", " "]))
        return f"{{{{{spaces}{name}{spaces}}}}}", f"ph_{name}"
    if kind == "string":
        text = "'" + draw(_quoted_body("'", True)) + "'"
    elif kind == "dstring":
        text = '"' + draw(_quoted_body('"', True)) + '"'
    elif kind == "raw":
        text = "r'" + draw(_quoted_body("'", False)).replace("'", "") + "'"
    elif kind == "quoted":
        text = "`" + draw(_quoted_body("`", False)).replace("`", "``") + "`"
    elif kind == "line":
        text = "--" + draw(_quoted_body("'", False)).replace("\n", " ") + "\n"
    else:
        inner = draw(_quoted_body("'", False))
        while "*/" in inner or "/*" in inner:        # a removal may join a new pair
            inner = inner.replace("*/", "").replace("/*", "")
        nested = draw(st.sampled_from(["", " /* {{v1}} */ ", " /* a /* b */ {{v2}} */ "]))
        # Spaces at the joins: '/' then '*/' would open a nested comment that is never closed.
        text = "/* " + inner + " " + nested + " " + inner + " */"
    return text, text


@given(st.lists(fragments(), min_size=1, max_size=12),
       st.fixed_dictionaries({"v0": HOSTILE, "v1": HOSTILE, "v2": st.one_of(st.none(), HOSTILE)}))
def test_a_place_in_the_text_read_is_the_same_place_in_the_text_written(parts, values):
    """An error's place, told in the text the parser read, lands on the same token in the cell as
    written (a literal's tokens on its placeholder), whatever the values' lengths and lines."""
    original = " ".join(text for text, _ in parts)
    read = substitution(original, values)
    for token in tokenize(read.text):
        at = read.original(token.start)
        written = read.text[token.start:token.end]
        assert original.startswith("{{", at) or original[at:at + len(written)] == written, (original, read.text)
        assert read.placed(line_column(read.text, token.start)) == line_column(original, at)


@given(st.lists(fragments(), min_size=1, max_size=12),
       st.fixed_dictionaries({"v0": HOSTILE, "v1": HOSTILE, "v2": st.one_of(st.none(), HOSTILE)}))
def test_substitution_and_the_parser_agree_on_every_token(parts, values):
    original = " ".join(text for text, _ in parts)
    expected = " ".join(text for _, text in parts)
    substituted = substitution(original, values).text
    want, got = tokenize(expected), iter(tokenize(substituted))
    for expect in want:
        if expect.kind is Kind.WORD and expect.value.startswith("ph_"):
            value = values[expect.value[3:]]
            literal = [next(got) for _ in tokenize(sql_literal(value))]
            assert same(value, read_back(literal)), (value, literal)
        else:
            token = next(got)
            assert (token.kind, token.value) == (expect.kind, expect.value), (original, substituted)
    assert next(got, None) is None, (original, substituted)
    # The statements split where they did: a value never adds or removes a ';' boundary.
    assert len(split(substituted)) == len(split(expected))


@pytest.mark.parametrize("text, silenced", [
    ("SELECT 1;", True), ("SELECT 1; -- done", True), ("SELECT 1;\n/* a /* b */ c */", True),
    ("SELECT ';'", False), ("SELECT `a;`", False), ("SELECT 1 -- ;", False), ("SELECT 1 /* ; */", False),
    ("SELECT 1 /* a /* ; */ ; */", False), ("SELECT 'it\\';'", False), ("SELECT r'\\';", True)])
def test_a_trailing_semicolon_is_read_by_the_same_lexer(text, silenced):
    assert parse_cell(text).silenced is silenced
