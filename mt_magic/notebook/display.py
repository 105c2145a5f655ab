"""How results look in a notebook: an HTML table and a stable text form."""

from __future__ import annotations

import html

from mt_magic.results import Result


class ResultView:
    """Wraps a Result for IPython's display system; every user string is escaped."""

    def __init__(self, result: Result, limit: int = 100) -> None:
        self.result = result
        self.limit = limit

    @property
    def _shown(self) -> list[tuple]:
        return self.result.rows[:self.limit]

    @property
    def _note(self) -> str:
        more = len(self.result.rows) - len(self._shown)
        if more > 0 or self.result.truncated:
            return f"showing the first {len(self._shown)} rows"
        return ""

    def _repr_html_(self) -> str:
        if not self.result.columns:
            return f"<pre>{html.escape(self.result.message)}</pre>"
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.result.columns)
        body = "".join("<tr>" + "".join(f"<td style='white-space:pre-wrap;text-align:left'>"
                                        f"{html.escape(_text(v))}</td>" for v in row) + "</tr>"
                       for row in self._shown)
        note = f"<p><i>{html.escape(self._note)}</i></p>" if self._note else ""
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"

    def __repr__(self) -> str:
        if not self.result.columns:
            return self.result.message
        lines = [" | ".join(self.result.columns)]
        lines += [" | ".join(_text(v) for v in row) for row in self._shown]
        if self._note:
            lines.append(f"({self._note})")
        return "\n".join(lines)


def _text(value) -> str:
    return "NULL" if value is None else str(value)
