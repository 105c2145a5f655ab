"""Java-style date patterns ('yyyy-MM-dd', 'HH', "yyyyMMdd'T'HH") formatted in Python."""

from __future__ import annotations

import re
from datetime import datetime

from mt_magic.errors import ValidationError

# Letters whose meaning is the same in Java's DateTimeFormatter and Spark's datetime patterns.
_FIELDS = {
    "y": lambda d, n: f"{d.year % 100:02d}" if n == 2 else f"{d.year:0{n}d}",
    "M": lambda d, n: f"{d.month:0{n}d}",
    "d": lambda d, n: f"{d.day:0{n}d}",
    "H": lambda d, n: f"{d.hour:0{n}d}",
    "m": lambda d, n: f"{d.minute:0{n}d}",
    "s": lambda d, n: f"{d.second:0{n}d}",
}
_PIECE = re.compile(r"'(?:[^']|'')*'|([a-zA-Z])\1*|[^a-zA-Z']+|'")


def compile_pattern(pattern: str) -> list[tuple[str, int] | str]:
    """The pattern as literal strings and (letter, width) fields; unknown letters are refused."""
    pieces: list[tuple[str, int] | str] = []
    for match in _PIECE.finditer(pattern):
        piece = match.group(0)
        if piece == "'":
            raise ValidationError(f"Date pattern '{pattern}' has an unclosed quote.")
        if piece.startswith("'"):
            pieces.append(piece[1:-1].replace("''", "'") if piece != "''" else "'")
        elif piece[0].isalpha():
            if piece[0] not in _FIELDS or (piece[0] == "y" and len(piece) == 3) or len(piece) > 4:
                raise ValidationError(
                    f"Date pattern '{pattern}' uses '{piece}'; supported are yyyy, yy, MM, M, dd, d, "
                    "HH, H, mm, m, ss, s and quoted text.")
            pieces.append((piece[0], len(piece)))
        else:
            pieces.append(piece)
    return pieces


def format_datetime(moment: datetime, pattern: str) -> str:
    return "".join(piece if isinstance(piece, str) else _FIELDS[piece[0]](moment, piece[1])
                   for piece in compile_pattern(pattern))
