"""{{name}} in a cell: a notebook variable, as the SQL literal of its type (see `literals`).

Nothing else is expanded: IPython's own {var} and $var expansion is not applied to %%mtsql cells,
so braces and dollars in SQL (map literals, regexes) stay as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mt_magic.errors import ValidationError
from mt_magic.sql.literals import NoLiteral, sql_literal
from mt_magic.sql.tokens import code_spans

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def substitute(sql: str, namespace: Mapping[str, object]) -> str:
    """Placeholders in code (not in string literals, quoted names or comments, read by the lexer the
    parser uses) become literals; a value with none is an error naming its variable."""
    code = code_spans(sql)

    def literal(match: re.Match) -> str:
        if not any(start <= match.start() and match.end() <= end for start, end in code):
            return match.group(0)
        name = match.group(1)
        if name not in namespace:
            raise ValidationError(f"{{{{{name}}}}}: there is no notebook variable named '{name}'.")
        try:
            return sql_literal(namespace[name])
        except NoLiteral as error:
            raise ValidationError(f"{{{{{name}}}}}: {error}.") from None

    return _PLACEHOLDER.sub(literal, sql)

