"""A progress bar for a refresh that runs longer than a second, in the cell that started it.

The bar is displayed (hidden) on the main thread when the refresh starts, because widgets cannot
be displayed reliably from other threads; a poller thread reads Spark's status tracker for the
refresh's job group and only reveals the bar and moves its value.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from typing import Any

import ipywidgets as widgets

from mt_magic.spark.jobs import task_counter


class RefreshProgress(widgets.HBox):
    """Tasks done of the refresh's Spark jobs; hidden until `reveal`."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.bar = widgets.IntProgress(value=0, min=0, max=1, bar_style="info")
        self.label = widgets.Label(description)
        super().__init__([self.bar, self.label], layout=widgets.Layout(display="none"))

    @property
    def revealed(self) -> bool:
        return self.layout.display != "none"

    def show_tasks(self, done: int, total: int, reveal: bool) -> None:
        with self.bar.hold_sync():
            self.bar.max = max(total, 1)
            self.bar.value = min(done, self.bar.max)
        with self.label.hold_sync():
            self.label.value = f"{self.description}: {done}/{total} tasks"
        if reveal and not self.revealed:
            self.layout.display = "flex"

    def finish(self, seconds: float) -> None:
        if self.revealed:
            with self.bar.hold_sync():
                self.bar.value, self.bar.bar_style = self.bar.max, "success"
            self.label.value = f"{self.description}: done in {seconds:.1f} s"

    def __repr__(self) -> str:
        return f"refresh progress: {self.description}"


def progress_observer(show: Callable[[widgets.Widget], None], after_s: float = 1.0,
                      interval_s: float = 0.25) -> Callable[[Any, str, str], object]:
    """What the magic sets as the job observer while its statements run."""

    @contextmanager
    def watch(spark: Any, group: str, description: str) -> Iterator[RefreshProgress]:
        progress = RefreshProgress(description)
        show(progress)
        started, stop = time.monotonic(), threading.Event()
        with task_counter(spark, group) as tasks:

            def poll() -> None:
                while not stop.wait(interval_s):
                    done, total = tasks()
                    progress.show_tasks(done, total, reveal=time.monotonic() - started >= after_s)

            poller = threading.Thread(target=poll, name="mt_magic-progress", daemon=True)
            poller.start()
            try:
                yield progress
            finally:
                stop.set()
                poller.join()
                progress.finish(time.monotonic() - started)

    return watch
