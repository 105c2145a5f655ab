"""User-facing errors: every one renders as a short message in a notebook, never a traceback."""

from __future__ import annotations


class MaterializedTableError(Exception):
    """Base of every error a user can cause; the message names the object and the rule."""

    statement: str | None = None     # 'statement 2 (ALTER …)', set when a cell holds several
    # Where in the cell's text the error lies (1-based line and column), when it has a place, and
    # what it says there: what an editor shows at that place.
    where: tuple[int, int] | None = None
    summary: str = ""

    def _render_traceback_(self) -> list[str]:
        # IPython shows exactly these lines instead of a traceback.
        first, *rest = str(self).splitlines() or [""]
        where = f" in {self.statement}" if self.statement else ""
        return [f"{type(self).__name__}{where}: {first}", *rest]


class ParseError(MaterializedTableError):
    """A statement that does not follow the grammar; carries the 1-based position."""

    def __init__(self, message: str, *, line: int, column: int, text: str = "") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.text = text
        self.where, self.summary = (line, column), message
        super().__init__(self._format())

    def _format(self) -> str:
        return mark_position(self.message, self.line, self.column, self.text)


def mark_position(message: str, line: int, column: int, text: str) -> str:
    """A message with its place in the user's text: line, column, the line and a caret under it."""
    head = f"line {line}, column {column}: {message}"
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return head
    return f"{head}\n  {lines[line - 1]}\n  {' ' * (column - 1)}^"


class ValidationError(MaterializedTableError):
    """A well-formed statement that breaks a rule (freshness, schema, partitions, ...)."""


class TableNotFoundError(MaterializedTableError):
    """The statement names a materialized table that does not exist."""


class StateError(MaterializedTableError):
    """The statement is not allowed in the table's current refresh status."""


class ExecutionError(MaterializedTableError):
    """A step of a statement failed at run time; everything it did was undone."""


class SparkError(MaterializedTableError):
    """Spark rejected a statement or a query; the message is Spark's, without the JVM trace.
    `position`: where in the query Spark points (0-based), when it does."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position
