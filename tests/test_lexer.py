"""One lexer: `{{var}}` substitution and the parser read a cell the same way. For random statements
with placeholders in code, strings, raw strings, quoted names and (nested) comments, and hostile
values, the substituted text has exactly the tokens of the original, each placeholder in code now a
single literal holding the value. No Spark needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mt_magic.sql.placeholders import substitute
from mt_magic.sql.parser import parse_cell
from mt_magic.sql.tokens import Kind, split, tokenize, unquote_string

HOSTILE = st.one_of(
    st.sampled_from(["'", "\\", "\\'", "''", "*/", "/*", "--", "\n", ";", "{{x}}", "`", '"', "R'", "\\u0041",
                     "'; DROP TABLE t; --", "x' OR '1'='1", "\\\\'"]),
    st.text(max_size=12))
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
def test_substitution_and_the_parser_agree_on_every_token(parts, values):
    original = " ".join(text for text, _ in parts)
    expected = " ".join(text for _, text in parts)
    substituted = substitute(original, values)
    want, got = tokenize(expected), tokenize(substituted)
    assert len(got) == len(want), (original, substituted)
    for expect, token in zip(want, got):
        if expect.kind is Kind.WORD and expect.value.startswith("ph_"):
            value = values[expect.value[3:]]
            if value is None:
                assert token.kind is Kind.WORD and token.value == "NULL"
            else:
                assert token.kind is Kind.STRING and unquote_string(token) == value, (value, token)
        else:
            assert (token.kind, token.value) == (expect.kind, expect.value), (original, substituted)
    # The statements split where they did: a value never adds or removes a ';' boundary.
    assert len(split(substituted)) == len(split(expected))


@pytest.mark.parametrize("text, silenced", [
    ("SELECT 1;", True), ("SELECT 1; -- done", True), ("SELECT 1;\n/* a /* b */ c */", True),
    ("SELECT ';'", False), ("SELECT `a;`", False), ("SELECT 1 -- ;", False), ("SELECT 1 /* ; */", False),
    ("SELECT 1 /* a /* ; */ ; */", False), ("SELECT 'it\\';'", False), ("SELECT r'\\';", True)])
def test_a_trailing_semicolon_is_read_by_the_same_lexer(text, silenced):
    assert parse_cell(text).silenced is silenced
