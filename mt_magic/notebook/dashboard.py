"""The live dashboard: one row per materialized table, with the statements' buttons.

Widgets are created and displayed on the kernel's main thread only (on `sync`, which the magic calls
after every statement); the scheduler thread that ticks once a second changes values only, each
widget under `hold_sync`, and never prints. Every user string is HTML-escaped.
"""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import ipywidgets as widgets
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from mt_magic.errors import MaterializedTableError
from mt_magic.gateway import Gateway
from mt_magic.notebook.paging import PAGE_SIZE, Paging
from mt_magic.notebook.pictures import graph_svg, history_svg
from mt_magic.notebook.status import Refresh, TableStatus, owner_text, table_statuses
from mt_magic.sql.statements import quote_identifier

log = logging.getLogger(__name__)

TICK_JOB = "mt_magic:dashboards"
COLUMNS = ("table", "mode", "status", "freshness", "data age", "last refresh", "next refresh",
           "refresh handler", "last error")
_WIDTHS = ("11%", "7%", "10%", "7%", "10%", "17%", "10%", "17%", "11%")
_COLGROUP = "<colgroup>" + "".join(f"<col style='width:{w}'>" for w in _WIDTHS) + "</colgroup>"
_TABLE = "<table class='mt-dashboard' style='width:100%;table-layout:fixed;border-collapse:collapse'>"
_CELL = "<td style='padding:2px 4px;overflow-wrap:anywhere;vertical-align:top;text-align:left'>"
_ACTIONS = ("SUSPEND", "RESUME", "REFRESH")

Run = Callable[[str], str]          # runs a statement, returns its one-line outcome


class TableRow(widgets.HBox):
    """One table: its cells as one HTML widget, then Suspend / Resume / Refresh."""

    def __init__(self, identifier: str, run: Run, report: Callable[[str], None]) -> None:
        self.identifier = identifier
        self.cells = widgets.HTML(layout=widgets.Layout(flex="1 1 auto"))
        self.buttons = {action: widgets.Button(description=action.title(), tooltip=(
            f"ALTER MATERIALIZED TABLE {identifier} {action}"), layout=widgets.Layout(width="80px"))
            for action in _ACTIONS}
        for action, button in self.buttons.items():
            button.on_click(lambda _b, action=action: report(run(self.statement(action))))
        super().__init__([self.cells, *self.buttons.values()], layout=widgets.Layout(width="100%"))

    def statement(self, action: str) -> str:
        quoted = ".".join(quote_identifier(p) for p in self.identifier.split(".", 2))
        return f"ALTER MATERIALIZED TABLE {quoted} {action}"

    def show(self, status: TableStatus | None, now: datetime) -> None:
        value = _row_html(status, now) if status else _row_html_dropped(self.identifier)
        with self.cells.hold_sync():
            self.cells.value = value
        usable = {"SUSPEND": status is not None and status.status == "ACTIVATED",
                  "RESUME": status is not None and status.status == "SUSPENDED",
                  "REFRESH": status is not None and status.status != "INITIALIZING"}
        for action, button in self.buttons.items():
            if button.disabled == usable[action]:
                with button.hold_sync():
                    button.disabled = not usable[action]


class Dashboard(widgets.VBox):
    """All materialized tables a page at a time (filtered by name, database and state once there are
    more than a page), or one (`name`) with its refresh history and lineage."""

    def __init__(self, gateway: Gateway, run: Run, identifier: str | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 page_size: int = PAGE_SIZE) -> None:
        self.gateway = gateway
        self.identifier = identifier
        self._run = run
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[str, TableRow] = {}
        self._statuses: list[TableStatus] = []
        self.header = widgets.HTML(f"{_TABLE}{_COLGROUP}<tr>" + "".join(
            f"<th style='text-align:left;padding:2px 4px'>{c}</th>" for c in COLUMNS) + "</tr></table>",
            layout=widgets.Layout(width=f"calc(100% - {80 * len(_ACTIONS) + 8}px)"))
        self.rows = widgets.VBox()
        self.detail = widgets.HTML()
        self.graph = widgets.HTML()
        self.message = widgets.HTML()
        self.owner = widgets.HTML()
        self.paging = Paging(self.sync, page_size)
        super().__init__([self.owner, self.paging, self.header, self.rows, self.graph, self.detail, self.message])
        self.add_class("mt-magic-dashboard")
        self.sync()

    def sync(self) -> None:
        """Main thread only: add and remove rows, then update every value."""
        statuses = self._read()
        if self.identifier is None:
            wanted = [s.identifier for s in self.paging.select(statuses)]
        else:
            self.paging.layout.display = "none"
            wanted = [self.identifier]
        with self._lock:
            if wanted != list(self._rows):
                self._rows = {i: self._rows.get(i) or TableRow(i, self._run, self.report) for i in wanted}
                self.rows.children = tuple(self._rows.values())
        self._show(statuses)

    def update(self) -> None:
        """Any thread: values of the rows that exist."""
        self._show(self._read())

    def report(self, text: str) -> None:
        with self.message.hold_sync():
            self.message.value = f"<pre style='margin:2px 0'>{html.escape(text)}</pre>" if text else ""
        self.sync()

    def _read(self) -> list[TableStatus]:
        statuses = table_statuses(self.gateway, self._clock())
        if self.identifier is not None:
            statuses = [s for s in statuses if s.identifier == self.identifier]
        return statuses

    def _show(self, statuses: list[TableStatus]) -> None:
        now = self._clock().astimezone(self.gateway.zone())
        owner = f"<small>Catalog store {_e(self.gateway.store.path)}: {_e(owner_text(self.gateway.owner()))}</small>"
        with self._lock:
            if owner != self.owner.value:
                self.owner.value = owner
            self._statuses = statuses
            by_id = {s.identifier: s for s in statuses}
            for identifier, row in list(self._rows.items()):
                row.show(by_id.get(identifier), now)
            if self.identifier is not None:
                detail = _detail_html(by_id.get(self.identifier), now)
                if detail != self.detail.value:
                    with self.detail.hold_sync():
                        self.detail.value = detail
            else:       # the page's tables; none left that read another: no picture (not the last one)
                shown = [s for s in statuses if s.identifier in self._rows]
                graph = graph_svg(shown) if any(s.sources for s in shown) else ""
                if graph != self.graph.value:
                    with self.graph.hold_sync():
                        self.graph.value = graph

    def _repr_mimebundle_(self, **kwargs) -> dict | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:            # ipywidgets cuts text/plain at 110 characters
            bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self) -> str:
        """Deterministic: what the tables are, not when they refreshed (notebook diffs, nbval)."""
        statuses = self._statuses
        title = (f"Materialized table {self.identifier}" if self.identifier else
                 f"Materialized tables: {len(statuses)}")
        lines = [f"{s.name}: {s.mode}, {s.status}, freshness {s.freshness_text}" for s in statuses]
        return "\n".join([title, *lines])


class Dashboards:
    """The kernel's open dashboards, updated together once a second by one scheduler job."""

    def __init__(self, gateway: Gateway, run: Run, interval_s: float = 1.0) -> None:
        self.gateway = gateway
        self._run = run
        self._interval_s = interval_s
        self._open: list[Dashboard] = []
        self._ticker: BackgroundScheduler | None = None

    def open(self, identifier: str | None = None) -> Dashboard:
        dashboard = Dashboard(self.gateway, self._run, identifier)
        if self._ticker is None:
            self._ticker = BackgroundScheduler(executors={"default": ThreadPoolExecutor(
                1, {"thread_name_prefix": "mt_magic-dashboard"})})
            self._ticker.add_job(self.tick, IntervalTrigger(seconds=self._interval_s), id=TICK_JOB)
            self._ticker.start()
        self._open.append(dashboard)
        return dashboard

    def sync(self) -> None:
        for dashboard in self._open:
            dashboard.sync()

    def tick(self) -> None:
        for dashboard in list(self._open):
            try:
                dashboard.update()
            except Exception:       # a thread must not print into whatever cell runs now
                log.debug("dashboard update failed", exc_info=True)

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.shutdown(wait=True)
            self._ticker = None
        for dashboard in self._open:
            dashboard.close()
        self._open.clear()


def run_for_dashboard(execute: Callable[[str], list]) -> Run:
    """A button's statement: its outcome or its error, as one line for the dashboard."""
    def run(sql: str) -> str:
        try:
            results = execute(sql)
        except MaterializedTableError as error:
            return "\n".join(error._render_traceback_())
        return results[-1].message if results else "OK"
    return run


# ------------------------------------------------------------------ HTML
def _row_html(s: TableStatus, now: datetime) -> str:
    age = _duration(s.data_age) if s.data_age is not None else "no data yet"
    colour = "#c0392b" if s.stale else "inherit"
    status = s.status + (" · refreshing" if s.refreshing else "")
    cells = [
        f"<b>{_e(s.name)}</b>" + (f"<br><small>{_e(s.comment)}</small>" if s.comment else ""),
        _e(s.mode), _e(status), _e(s.freshness_text),
        f"<span style='color:{colour}'>{_e(age)}</span> / {_e(_duration(s.freshness))}",
        _e(_refresh_text(s.last, now)) if s.last else "never",
        _e(_when(s.next_refresh, now)) if s.next_refresh else "",
        f"<small>{_e(s.handler)}</small>",
        f"<span style='color:#c0392b'>{_e(_shorten(s.error))}</span>" if s.error else "",
    ]
    return f"{_TABLE}{_COLGROUP}<tr>" + "".join(f"{_CELL}{c}</td>" for c in cells) + "</tr></table>"


def _row_html_dropped(identifier: str) -> str:
    return f"{_TABLE}<tr>{_CELL}<b>{_e(identifier)}</b>: dropped</td></tr></table>"


def _detail_html(s: TableStatus | None, now: datetime) -> str:
    if s is None:
        return ""
    history = "".join(
        f"<tr>{_CELL}{_e(_local(r.started_at, now.tzinfo))}</td>{_CELL}{_e(r.target)}</td>{_CELL}{r.duration_s:.2f} s</td>"
        f"{_CELL}{'' if r.rows is None else r.rows}</td>{_CELL}{_e(r.outcome)}</td>"
        f"{_CELL}{_e(_shorten(r.error or ''))}</td></tr>" for r in reversed(s.history))
    head = "".join(f"<th style='text-align:left;padding:2px 4px'>{c}</th>"
                   for c in ("started", "target", "duration", "rows", "outcome", "error"))
    sources = ", ".join(_e(x) for x in s.sources) or "none"
    readers = ", ".join(_e(x) for x in s.readers) or "none"
    return ("<div class='mt-detail'><h4 style='margin:6px 0 2px'>Lineage</h4>"
            f"<div class='mt-lineage'>{sources} &rarr; <b>{_e(s.identifier)}</b> &rarr; {readers}</div>"
            "<h4 style='margin:6px 0 2px'>Recent refreshes</h4>"
            f"{history_svg(s.history, s.freshness)}"
            f"<table class='mt-history'><tr>{head}</tr>{history or '<tr><td>none yet</td></tr>'}</table></div>")


def _refresh_text(r: Refresh, now: datetime) -> str:
    rows = "" if r.rows is None else f", {r.rows} row{'' if r.rows == 1 else 's'}"
    return f"{_when(r.started_at, now)}: {r.outcome} in {r.duration_s:.2f} s{rows} ({r.target})"


def _when(moment: datetime, now: datetime) -> str:
    delta = moment - now
    relative = f"in {_duration(delta)}" if delta.total_seconds() >= 0 else f"{_duration(-delta)} ago"
    return f"{_local(moment, now.tzinfo)} ({relative})"


def _local(moment: datetime, zone) -> str:
    """In the session's time zone, which the schedules use too (not the kernel's)."""
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")


_UNITS = (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1))


def _duration(delta: timedelta) -> str:
    """Two units at most: '2 h 5 min', '40 s'."""
    seconds = int(delta.total_seconds())
    for big, big_size, small, small_size in _UNITS:
        if seconds >= big_size:
            whole, rest = divmod(seconds, big_size)
            rest //= small_size
            return f"{whole} {big}" + (f" {rest} {small}" if rest else "")
    return f"{seconds} s"


def _shorten(text: str, width: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def _e(text: object) -> str:
    return html.escape(str(text))
