"""What one executed statement returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Result:
    """Column names and rows (empty for DDL), plus a one-line account of what happened. A query's
    result also keeps its Spark DataFrame (`frame`): every row, where `rows` holds those shown. A
    `brief` result is shown as its message alone (its rows are there for code)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    message: str = "OK"
    truncated: bool = False
    brief: bool = False
    frame: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def ok(cls, message: str = "OK") -> Result:
        return cls(message=message)

    @classmethod
    def table(cls, columns: list[str], rows: list[tuple], message: str = "", truncated: bool = False,
              brief: bool = False, frame: Any = None) -> Result:
        return cls(list(columns), [tuple(r) for r in rows],
                   message or f"{len(rows)} row{'s' if len(rows) != 1 else ''}", truncated, brief, frame)

    def to_document(self) -> dict:
        """JSON-ready (values JSON cannot hold become text): a result another process sends back."""
        return json.loads(json.dumps({"columns": self.columns, "rows": self.rows, "message": self.message,
                                      "truncated": self.truncated, "brief": self.brief}, default=str))

    @classmethod
    def from_document(cls, doc: dict) -> Result:
        return cls(doc["columns"], [tuple(r) for r in doc["rows"]], doc["message"], doc["truncated"],
                   doc.get("brief", False))
