"""The Spark jobs of one refresh: named, cancellable and watched, in both kinds of session.

A classic session groups jobs with a job group (set and cleared in the job's own thread: pool
threads would carry it on otherwise); a Spark Connect session tags its operations (tags are per
thread too) and reports progress to registered handlers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from mt_magic.spark.kind import is_connect

# Who watches the Spark jobs a statement starts in this thread (the notebook's progress bar).
# Threads start with an empty context, so scheduled refreshes are never watched.
JOB_OBSERVER: ContextVar[Callable[[Any, str, str], AbstractContextManager] | None] = ContextVar(
    "mt_magic_job_observer", default=None)


_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def _tag(group: str) -> str:
    return group.replace(",", ";")      # a Connect tag holds no comma


@contextmanager
def job_scope(spark: Any, group: str, description: str) -> Iterator[None]:
    """Every Spark job started inside belongs to `group` (cancel_jobs stops them)."""
    observer = JOB_OBSERVER.get()
    if is_connect(spark):
        spark.addTag(_tag(group))
    else:
        spark.sparkContext.setJobGroup(group, description, interruptOnCancel=True)
    try:
        with observer(spark, group, description) if observer else nullcontext():
            yield
    finally:
        if is_connect(spark):
            spark.removeTag(_tag(group))
        else:
            for key in _GROUP_PROPERTIES:
                spark.sparkContext.setLocalProperty(key, None)


@contextmanager
def uninterrupted(spark: Any) -> Iterator[None]:
    """Steps that publish (catalog changes, and their undoing) outside any job group: a cancel stops
    the jobs that compute, never a publish halfway. Over Spark Connect an interrupt reaches catalog
    commands too, and one landing as the server completes a RENAME or SET LOCATION makes the client
    raise for a change that happened — its caller would then undo a change it believes failed."""
    if is_connect(spark):
        tags = spark.getTags()
        spark.clearTags()
        try:
            yield
        finally:
            for tag in tags:
                spark.addTag(tag)
        return
    context = spark.sparkContext
    saved = {key: context.getLocalProperty(key) for key in _GROUP_PROPERTIES}
    for key in _GROUP_PROPERTIES:
        context.setLocalProperty(key, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            context.setLocalProperty(key, value)


def group_jobs(spark: Any, group: str) -> frozenset[int] | None:
    """The ids of the jobs `group` has run so far (a refresh's are the ones it adds); None over Spark
    Connect, whose client is not told the jobs an operation ran."""
    if is_connect(spark):
        return None
    return frozenset(_job_ids(spark, group))


def _job_ids(spark: Any, group: str) -> list[int]:
    """The group's job ids in one JVM round trip: PySpark's status tracker reads the JVM's array an
    element a trip, and a table's group holds every job its refreshes ran (up to Spark's
    `spark.ui.retainedJobs`): 650 trips, 50 ms, a refresh after 300 appends (and twice a refresh)."""
    ids = spark.sparkContext._jsc.statusTracker().getJobIdsForGroup(group)
    text = spark._jvm.java.util.Arrays.toString(ids)
    return [int(job) for job in text.strip("[]").split(",") if job.strip()]


def cancel_jobs(spark: Any, group: str) -> None:
    if is_connect(spark):
        spark.interruptTag(_tag(group))
    else:
        spark.sparkContext.cancelJobGroup(group)


@contextmanager
def task_counter(spark: Any, group: str) -> Iterator[Callable[[], tuple[int, int]]]:
    """A function giving (completed, total) tasks of the jobs the group starts inside (not of its earlier ones)."""
    if not is_connect(spark):
        earlier = frozenset(_job_ids(spark, group))     # the group's jobs of earlier statements
        yield lambda: _tracked_tasks(spark, group, earlier)
        return
    lock, stages_seen = threading.Lock(), {}

    def handler(stages, inflight_tasks, operation_id, done) -> None:   # noqa: ARG001 - Spark's signature
        with lock:
            for stage in stages or ():
                stages_seen[(operation_id, stage.stage_id)] = (stage.num_completed_tasks, stage.num_tasks)

    def count() -> tuple[int, int]:
        with lock:
            return (sum(done for done, _ in stages_seen.values()),
                    sum(total for _, total in stages_seen.values()))

    spark.registerProgressHandler(handler)
    try:
        yield count
    finally:
        spark.removeProgressHandler(handler)


def _tracked_tasks(spark: Any, group: str, earlier: frozenset[int]) -> tuple[int, int]:
    tracker, done, total = spark.sparkContext.statusTracker(), 0, 0
    for job_id in set(_job_ids(spark, group)) - earlier:
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job else ()):
            stage = tracker.getStageInfo(stage_id)
            if stage:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total
