"""The refresh progress bar: hidden for quick refreshes, revealed and filled for slow ones."""

from __future__ import annotations

import time

from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from mt_magic.notebook.progress import progress_observer
from mt_magic.spark.jobs import JOB_OBSERVER, job_scope


def run_watched(spark, job, after_s: float) -> list:
    shown: list = []
    token = JOB_OBSERVER.set(progress_observer(shown.append, after_s=after_s, interval_s=0.05))
    try:
        with job_scope(spark, "mt_magic:progress-test", "refresh progress-test"):
            job()
    finally:
        JOB_OBSERVER.reset(token)
    return shown


def test_a_slow_refresh_shows_its_tasks(spark):
    """Its own: a table's second refresh (the same job group) counts its tasks, not the first's too."""
    slow = F.udf(lambda x: time.sleep(0.3) or x, LongType(), useArrow=False)
    for _ in range(2):
        (bar,) = run_watched(spark, lambda: spark.range(0, 8, 1, 8).select(slow("id")).collect(), 0.5)
        assert bar.revealed
        assert (bar.bar.value, bar.bar.max) == (8, 8) and bar.bar.bar_style == "success"
        assert bar.label.value.startswith("refresh progress-test: done in ")
        assert repr(bar) == "refresh progress: refresh progress-test"


def test_a_quick_refresh_stays_hidden(spark):
    spark.range(10).count()                  # the session's first job is slow to start
    (bar,) = run_watched(spark, lambda: spark.range(10).count(), 1.0)
    assert not bar.revealed
