"""How results look in a notebook: an HTML table and a stable text form.

A cell's earlier statements show their one-line outcome; the last one shows its rows.
"""

from __future__ import annotations

import html

from mt_magic.results import Result

_CELL = "<td style='white-space:pre-wrap;text-align:left'>"


class ResultView:
    """Every user string is escaped; rows beyond `limit` are cut with a note."""

    def __init__(self, results: list[Result], limit: int = 100) -> None:
        self.results = results
        self.result = results[-1]
        self.limit = limit

    @property
    def columns(self) -> list[str]:
        return self.result.columns

    @property
    def rows(self) -> list[tuple]:
        return self.result.rows

    @property
    def message(self) -> str:
        return self.result.message

    @property
    def df(self):
        """The Spark DataFrame of a query's result (every row, whatever the display limit); None for
        statements that return no query."""
        return self.result.frame

    def to_pandas(self):
        """Every row as a pandas DataFrame (pandas: `pip install "mt-magic[pandas]"`)."""
        if self.result.frame is not None:
            return self.result.frame.toPandas()
        import pandas
        return pandas.DataFrame(self.result.rows, columns=self.result.columns)

    @property
    def _table(self) -> bool:
        return bool(self.result.columns) and not self.result.brief

    @property
    def _shown(self) -> list[tuple]:
        return self.result.rows[:self.limit]

    @property
    def _note(self) -> str:
        if len(self.result.rows) > self.limit or self.result.truncated:
            return f"showing the first {len(self._shown)} rows (display limit {self.limit})"
        return ""

    @property
    def _earlier(self) -> list[str]:
        return [r.message for r in self.results[:-1]]

    def _repr_html_(self) -> str:
        earlier = "".join(f"<pre>{html.escape(m)}</pre>" for m in self._earlier)
        if not self._table:
            return f"{earlier}<pre>{html.escape(self.result.message)}</pre>"
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.result.columns)
        body = "".join("<tr>" + "".join(f"{_CELL}{html.escape(_text(v))}</td>" for v in row) + "</tr>"
                       for row in self._shown)
        note = f"<p><i>{html.escape(self._note)}</i></p>" if self._note else ""
        return f"{earlier}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"

    def __repr__(self) -> str:
        if not self._table:
            return "\n".join([*self._earlier, self.result.message])
        lines = [*self._earlier, " | ".join(self.result.columns)]
        lines += [" | ".join(_text(v) for v in row) for row in self._shown]
        if self._note:
            lines.append(f"({self._note})")
        return "\n".join(lines)


def _text(value) -> str:
    return "NULL" if value is None else str(value)
