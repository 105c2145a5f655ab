"""{{name}} in a cell: a notebook variable, always as a quoted SQL literal.

Nothing else is expanded: IPython's own {var} and $var expansion is not applied to %%mtsql cells,
so braces and dollars in SQL (map literals, regexes) stay as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mt_magic.errors import ValidationError
from mt_magic.sql.statements import sql_string
from mt_magic.sql.tokens import code_spans

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def substitute(sql: str, namespace: Mapping[str, object]) -> str:
    """Placeholders in code (not in string literals, quoted names or comments, read by the lexer the
    parser uses) become literals; None becomes NULL."""
    code = code_spans(sql)

    def literal(match: re.Match) -> str:
        if not any(start <= match.start() and match.end() <= end for start, end in code):
            return match.group(0)
        name = match.group(1)
        if name not in namespace:
            raise ValidationError(f"{{{{{name}}}}}: there is no notebook variable named '{name}'.")
        value = namespace[name]
        return "NULL" if value is None else sql_string(str(value))

    return _PLACEHOLDER.sub(literal, sql)

