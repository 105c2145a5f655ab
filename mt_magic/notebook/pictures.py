"""Pictures for the dashboard, as SVG that JupyterLab and Notebook 7 show inline: the graph of tables
that read tables (each coloured by status and lag), and a table's recent refreshes against its
freshness. Every name is escaped; each picture carries a text fallback in its <title>/<desc>."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import timedelta

from mt_magic.notebook.status import Refresh, TableStatus

BOX_W, BOX_H, GAP_X, GAP_Y = 190, 42, 60, 14
COLOURS = {                     # fill, border: fresh, stale, suspended, refreshing, a plain source
    "fresh": ("#e8f5e9", "#2e7d32"), "stale": ("#fdecea", "#c0392b"), "suspended": ("#f1f1f1", "#7f8c8d"),
    "refreshing": ("#e3f2fd", "#1565c0"), "source": ("#ffffff", "#b0b0b0"),
}
TECHNIQUE_COLOURS = {           # a refresh's bar: how it ran (a failure is red whatever it tried)
    "incremental": "#43a047", "skip": "#cfd8dc", "partitions": "#1e88e5", "full": "#fb8c00",
    "stream": "#8e24aa", "failed": "#c0392b",
}


def state_of(status: TableStatus) -> str:
    if status.status != "ACTIVATED":
        return "suspended"
    if status.refreshing:
        return "refreshing"
    return "stale" if status.stale else "fresh"


def graph_svg(statuses: Sequence[TableStatus]) -> str:
    """Left to right: plain source tables, then each materialized table one column after the
    deepest table it reads."""
    by_id = {s.identifier: s for s in statuses}
    depth: dict[str, int] = {}

    def depth_of(identifier: str, seen: frozenset = frozenset()) -> int:
        if identifier not in depth:
            status = by_id.get(identifier)
            upstream = [x for x in status.sources if x not in seen] if status else []
            depth[identifier] = 1 + max((depth_of(x, seen | {identifier}) for x in upstream), default=-1) \
                if status else 0
        return depth[identifier]
    for status in statuses:
        depth_of(status.identifier)
    columns: dict[int, list[str]] = {}
    for identifier in sorted(depth, key=lambda i: (depth[i], i)):
        columns.setdefault(depth[identifier], []).append(identifier)
    place = {i: (d * (BOX_W + GAP_X), row * (BOX_H + GAP_Y)) for d, ids in columns.items()
             for row, i in enumerate(ids)}
    width = (max(columns, default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = max((len(ids) for ids in columns.values()), default=1) * (BOX_H + GAP_Y) - GAP_Y
    edges, boxes, text = [], [], []
    for status in statuses:
        for source in status.sources:
            (x1, y1), (x2, y2) = place[source], place[status.identifier]
            edges.append(f"<line x1='{x1 + BOX_W}' y1='{y1 + BOX_H / 2}' x2='{x2 - 4}' y2='{y2 + BOX_H / 2}' "
                         "stroke='#888' marker-end='url(#mt-arrow)'/>")
            text.append(f"{source} -> {status.identifier}")
    for identifier, (x, y) in place.items():
        status = by_id.get(identifier)
        kind = state_of(status) if status else "source"
        fill, border = COLOURS[kind]
        label = identifier.rsplit(".", 1)[-1]
        detail = (f"{status.status}, {_age(status.data_age)} / {_age(status.freshness)}" if status
                  else "source table")
        boxes.append(f"<g class='mt-node mt-{kind}'><title>{_e(identifier)}: {_e(detail)}</title>"
                     f"<rect x='{x}' y='{y}' width='{BOX_W}' height='{BOX_H}' rx='6' fill='{fill}' "
                     f"stroke='{border}' stroke-width='2'/>"
                     f"<text x='{x + 8}' y='{y + 17}' font-size='13' font-weight='bold'>{_e(label)}</text>"
                     f"<text x='{x + 8}' y='{y + 33}' font-size='11' fill='#555'>{_e(detail)}</text></g>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='mt-graph' width='{width + 2}' height='{height + 2}' "
            f"role='img'><title>Materialized tables and what they read</title>"
            f"<desc>{_e('; '.join(text) or 'no table reads another')}</desc>"
            "<defs><marker id='mt-arrow' markerWidth='8' markerHeight='8' refX='7' refY='4' orient='auto'>"
            "<path d='M0,0 L8,4 L0,8 z' fill='#888'/></marker></defs>"
            + "".join(edges) + "".join(boxes) + "</svg>")


def history_svg(history: Sequence[Refresh], freshness: timedelta, width: int = 360, height: int = 90) -> str:
    """Bars: each refresh's duration, coloured by its technique (a table that keeps recomputing in
    full shows orange at a glance; red when it failed); dots: the data's age when it ended; the dashed
    line: the freshness."""
    limit = freshness.total_seconds()
    values = [max(r.duration_s, r.lag_s or 0.0) for r in history]
    top = max(values + [limit]) * 1.1 or 1.0
    step = width / max(len(history), 1)

    def y(seconds: float) -> float:
        return round(height - seconds / top * height, 1)
    parts = [f"<line x1='0' y1='{y(limit)}' x2='{width}' y2='{y(limit)}' stroke='#c0392b' stroke-dasharray='4 3'/>"]
    for index, refresh in enumerate(history):
        x = round(index * step + step * 0.15, 1)
        kind = "failed" if refresh.outcome == "FAILED" else refresh.technique or "full"
        why = f": {refresh.reason}" if refresh.reason and kind not in ("incremental", "skip") else ""
        why += _work(refresh)
        parts.append(f"<rect class='mt-bar' data-technique='{_e(kind)}' x='{x}' y='{y(refresh.duration_s)}' "
                     f"width='{round(step * 0.7, 1)}' height='{round(height - y(refresh.duration_s), 1)}' "
                     f"fill='{TECHNIQUE_COLOURS.get(kind, TECHNIQUE_COLOURS['full'])}'>"
                     f"<title>{_e(refresh.target)}, {refresh.duration_s:.2f} s, {_e(kind)}{_e(why)}</title></rect>")
        if refresh.lag_s is not None:
            parts.append(f"<circle class='mt-lag' cx='{round(x + step * 0.35, 1)}' cy='{y(refresh.lag_s)}' r='3' "
                         f"fill='#1565c0'><title>data age {refresh.lag_s:.2f} s</title></circle>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='mt-chart' width='{width}' height='{height}' role='img'>"
            f"<title>Recent refreshes: duration (bars: green incremental, orange full, blue partitions, grey "
            f"skip, purple stream, red failed), data age (dots), freshness {limit:g} s (dashed)</title>"
            + "".join(parts) + "</svg>")


def _work(refresh: Refresh) -> str:
    """What a refresh did, as its bar's tooltip says it: the seconds of each phase, its Spark jobs, the
    rows it inserted and deleted."""
    parts = [f"{phase} {refresh.phases[phase]:.2f} s" for phase in ("decide", "run", "record") if phase in refresh.phases]
    if refresh.jobs is not None:
        parts.append(f"{refresh.jobs} Spark job{'s' if refresh.jobs != 1 else ''}")
    if refresh.inserted is not None and refresh.deleted is not None:
        parts.append(f"+{refresh.inserted} −{refresh.deleted} rows")
    return f" ({', '.join(parts)})" if parts else ""


def _age(delta: timedelta | None) -> str:
    if delta is None:
        return "no data"
    seconds = int(delta.total_seconds())
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


def _e(text: object) -> str:
    return html.escape(str(text))
