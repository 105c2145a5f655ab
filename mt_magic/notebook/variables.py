"""{{name}} in a cell: a notebook variable, always as a quoted SQL literal.

Nothing else is expanded: IPython's own {var} and $var expansion is not applied to %%mtsql cells,
so braces and dollars in SQL (map literals, regexes) stay as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlparse import lexer
from sqlparse import tokens as T

from mt_magic.errors import ValidationError
from mt_magic.sql.statements import sql_string

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def substitute(sql: str, namespace: Mapping[str, object]) -> str:
    """Placeholders outside string literals and comments become literals; None becomes NULL."""
    literal_spans = _literal_spans(sql)

    def literal(match: re.Match) -> str:
        if any(start <= match.start() < end for start, end in literal_spans):
            return match.group(0)
        name = match.group(1)
        if name not in namespace:
            raise ValidationError(f"{{{{{name}}}}}: there is no notebook variable named '{name}'.")
        value = namespace[name]
        return "NULL" if value is None else sql_string(str(value))

    return _PLACEHOLDER.sub(literal, sql)


def _literal_spans(sql: str) -> list[tuple[int, int]]:
    spans, offset = [], 0
    for ttype, value in lexer.tokenize(sql):
        if ttype in T.String or ttype in T.Comment:
            spans.append((offset, offset + len(value)))
        offset += len(value)
    return spans
