"""What one executed statement returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Result:
    """Column names and rows (empty for DDL), plus a one-line account of what happened."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    message: str = "OK"
    truncated: bool = False

    @classmethod
    def ok(cls, message: str = "OK") -> Result:
        return cls(message=message)

    @classmethod
    def table(cls, columns: list[str], rows: list[tuple], message: str = "",
              truncated: bool = False) -> Result:
        return cls(list(columns), [tuple(r) for r in rows],
                   message or f"{len(rows)} row{'s' if len(rows) != 1 else ''}", truncated)
