"""{{name}} in a cell: a notebook variable, as the SQL literal of its type (see `literals`).

Nothing else is expanded: IPython's own {var} and $var expansion is not applied to %%mtsql cells,
so braces and dollars in SQL (map literals, regexes) stay as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mt_magic.errors import ValidationError
from mt_magic.sql.literals import NoLiteral, sql_literal
from mt_magic.sql.tokens import code_spans, line_column

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Substitution:
    """The text with its placeholders replaced, and where each replacement lies in both texts: an
    error's place in the text read is told in the text the user wrote."""

    source: str
    text: str
    replaced: tuple[tuple[int, int, int, int], ...]    # (start, end) in `text`, then in `source`

    def placed(self, where: tuple[int, int]) -> tuple[int, int]:
        """A 1-based line and column in `text`: the same place in `source`."""
        line, column = where
        before = self.text.split("\n")[:line - 1]
        return line_column(self.source, self.original(sum(len(text) + 1 for text in before) + column - 1))

    def original(self, offset: int) -> int:
        """The offset in the original text of `offset` in `text` (a replacement's start, inside one)."""
        shift = 0
        for start, end, original_start, original_end in self.replaced:
            if offset < start:
                break
            if offset < end:
                return original_start
            shift = original_end - end
        return offset + shift


def substitution(sql: str, namespace: Mapping[str, object]) -> Substitution:
    """Placeholders in code (not in string literals, quoted names or comments, read by the lexer the
    parser uses) become literals; a value with none is an error naming its variable and its place."""
    code = code_spans(sql)
    parts, replaced, done = [], [], 0
    for match in _PLACEHOLDER.finditer(sql):
        if not any(start <= match.start() and match.end() <= end for start, end in code):
            continue
        literal = _literal(match, namespace, sql)
        parts.append(sql[done:match.start()])
        start = sum(map(len, parts))
        parts.append(literal)
        replaced.append((start, start + len(literal), match.start(), match.end()))
        done = match.end()
    parts.append(sql[done:])
    return Substitution(sql, "".join(parts), tuple(replaced))


def _literal(match: re.Match, namespace: Mapping[str, object], sql: str) -> str:
    name = match.group(1)
    if name not in namespace:
        problem = f"there is no notebook variable named '{name}'"
    else:
        try:
            return sql_literal(namespace[name])
        except NoLiteral as error:
            problem = str(error)
    error = ValidationError(f"{{{{{name}}}}}: {problem}.")
    error.where, error.summary = line_column(sql, match.start()), str(error)
    raise error
