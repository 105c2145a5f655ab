"""Which tables a dashboard of a large store shows: a filter by name, a database, a state, and a page.

A store of a thousand tables is a thousand rows of widgets otherwise. The bar shows once the store
holds more tables than a page (or while a filter is set); changing anything goes back to page one.
Main thread only (the magic's `sync` and the widgets' own events).
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets

from mt_magic.notebook.status import TableStatus

PAGE_SIZE = 25
ALL_DATABASES = "all databases"
STATES: dict[str, Callable[[TableStatus], bool]] = {
    "all states": lambda s: True,
    "activated": lambda s: s.status == "ACTIVATED",
    "suspended": lambda s: s.status == "SUSPENDED",
    "failing": lambda s: s.error is not None,
    "stale": lambda s: s.stale,
    "refreshing": lambda s: s.refreshing,
}


class Paging(widgets.HBox):
    def __init__(self, changed: Callable[[], None], page_size: int = PAGE_SIZE) -> None:
        self.page_size = page_size
        self.page = 0
        self._changed = changed
        self.text = widgets.Text(placeholder="filter by name", layout=widgets.Layout(width="200px"))
        self.database = widgets.Dropdown(options=[ALL_DATABASES], layout=widgets.Layout(width="200px"))
        self.state = widgets.Dropdown(options=list(STATES), layout=widgets.Layout(width="130px"))
        self.previous = widgets.Button(description="◀", tooltip="previous page", layout=widgets.Layout(width="40px"))
        self.next = widgets.Button(description="▶", tooltip="next page", layout=widgets.Layout(width="40px"))
        self.label = widgets.HTML()
        for control in (self.text, self.database, self.state):
            control.observe(lambda _change: self._turn(0), names="value")
        self.previous.on_click(lambda _b: self._turn(self.page - 1))
        self.next.on_click(lambda _b: self._turn(self.page + 1))
        super().__init__([self.text, self.database, self.state, self.previous, self.next, self.label])

    def select(self, statuses: list[TableStatus]) -> list[TableStatus]:
        """The tables of the current page, after the filters; the controls made to agree."""
        databases = [ALL_DATABASES] + sorted({s.identifier.rsplit(".", 1)[0] for s in statuses})
        if list(self.database.options) != databases:
            kept = self.database.value if self.database.value in databases else ALL_DATABASES
            with self.database.hold_trait_notifications():
                self.database.options = databases
                self.database.value = kept
        needle = self.text.value.strip().lower()
        database, state = self.database.value, STATES[self.state.value]
        shown = [s for s in statuses if needle in s.identifier.lower() and state(s)
                 and (database == ALL_DATABASES or s.identifier.rsplit(".", 1)[0] == database)]
        pages = max(1, -(-len(shown) // self.page_size))
        self.page = min(max(self.page, 0), pages - 1)
        first = self.page * self.page_size
        page = shown[first:first + self.page_size]
        self.previous.disabled = self.page == 0
        self.next.disabled = self.page >= pages - 1
        span = f"{first + 1}–{first + len(page)}" if page else "none"
        self.label.value = (f"<small>tables {span} of {len(shown)}"
                            + (f" ({len(statuses)} in the store)" if len(shown) != len(statuses) else "")
                            + f", page {self.page + 1} of {pages}</small>")
        filtering = bool(needle) or database != ALL_DATABASES or self.state.value != "all states"
        self.layout.display = "" if len(statuses) > self.page_size or filtering else "none"
        return page

    def _turn(self, page: int) -> None:
        self.page = page
        self._changed()
