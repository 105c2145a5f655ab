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

import ipywidgets as widgets
from pyspark import SparkContext


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


def tasks(context: SparkContext, group: str) -> tuple[int, int]:
    """Completed and total tasks over every stage of the group's jobs so far."""
    tracker = context.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job else ()):
            stage = tracker.getStageInfo(stage_id)
            if stage:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total


def progress_observer(context: SparkContext, show: Callable[[widgets.Widget], None], after_s: float = 1.0,
                      interval_s: float = 0.25) -> Callable[[str, str], object]:
    """What the magic sets as the job observer while its statements run."""

    @contextmanager
    def watch(group: str, description: str) -> Iterator[RefreshProgress]:
        progress = RefreshProgress(description)
        show(progress)
        started, stop = time.monotonic(), threading.Event()

        def poll() -> None:
            while not stop.wait(interval_s):
                done, total = tasks(context, group)
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
