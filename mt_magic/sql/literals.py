"""A notebook value as the Spark SQL literal of its type: what `{{var}}` writes into a cell.

Each form is one the lexer (`tokens`) reads back to the same value, and Spark to the same type: a
number never runs into the text beside it (a negative one is parenthesized: `x-{{n}}` must not
become the comment `x--5`), a float is a DOUBLE (`1.5E0`; Spark reads `1.5` as a DECIMAL), a
Decimal keeps its precision and scale, a date or datetime is a typed literal of its ISO text.
"""

from __future__ import annotations

import datetime
import math
import numbers
from decimal import Decimal

from mt_magic.sql.statements import sql_string

MAX_DIGITS = 38         # Spark's widest number: DECIMAL(38, s); an integer literal may have no more digits
TYPES = "int, float, Decimal, bool, str, datetime.date, datetime.datetime or None"


class NoLiteral(ValueError):
    """The value has no SQL literal; the message says why, for the caller to name the value."""


def sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, numbers.Integral):
        _fits(len(str(abs(int(value)))))
        return _negated(str(int(value)))
    if isinstance(value, float):
        return _double(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, datetime.datetime):
        return "TIMESTAMP " + sql_string(value.isoformat(sep=" "))
    if isinstance(value, datetime.date):
        return "DATE " + sql_string(value.isoformat())
    if isinstance(value, str):
        return sql_string(value)
    raise NoLiteral(f"a {type(value).__name__} has no SQL literal ({{{{…}}}} takes an {TYPES}; "
                    "str(…) gives its text)")


def _fits(digits: int) -> None:
    if digits > MAX_DIGITS:
        raise NoLiteral(f"it has {digits} digits, more than the {MAX_DIGITS} of Spark's widest number")


def _negated(text: str) -> str:
    return f"({text})" if text.startswith("-") else text


def _double(value: float) -> str:
    if math.isnan(value):
        return "CAST('NaN' AS DOUBLE)"
    if math.isinf(value):
        return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
    mantissa, _, exponent = repr(value).partition("e")      # repr: the shortest text read back exactly
    if "." not in mantissa:
        mantissa += ".0"
    return _negated(f"{mantissa}E{int(exponent or 0)}")


def _decimal(value: Decimal) -> str:
    if not value.is_finite():
        raise NoLiteral(f"the Decimal {value} has no SQL literal (Spark's DECIMAL holds finite numbers)")
    digits, exponent = len(value.as_tuple().digits), int(value.as_tuple().exponent)
    scale = max(0, -exponent)
    precision = max(digits + max(0, exponent), scale, 1)
    _fits(precision)
    text = format(value, "f")
    if scale:       # Spark reads `1.50` as DECIMAL(3, 2): the Decimal's own precision and scale
        return _negated(text)
    return f"CAST({sql_string(text)} AS DECIMAL({precision}, 0))"     # `5` alone would be an INT
