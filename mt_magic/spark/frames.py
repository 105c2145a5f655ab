"""DataFrames built without a round trip: over Spark Connect every question a DataFrame asks the
server (its schema, whether it streams) is one, and a refresh should cost what its job costs."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mt_magic.spark.kind import is_connect
from mt_magic.sql.statements import quote_identifier

Fingerprint = tuple[int, int, int]      # rows, and two sums of their hashes


def query_frame(spark: Any, query: str) -> Any:
    """A DataFrame of a query. `spark.sql` over Connect first sends the text to be run as a command
    (one round trip more than the query needs); a query's plan can be built here instead."""
    if not is_connect(spark):
        return spark.sql(query)
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL
    return DataFrame(SQL(query), spark)


def counting_rows(frame: Any, unreported: int | None = 0) -> tuple[Any, Callable[[], int | None]]:
    """The frame, counting the rows that pass through it for free (an observation), and how to read
    the count once an action ran (`unreported` where no count came back: over Connect a write reports
    only the observations of the frame it writes)."""
    observed, observation = _observing(frame, [F.expr("count(1) AS rows")])
    return observed, lambda: _observed_rows(observation, unreported)


def counting_where(frame: Any, condition: str) -> tuple[Any, Callable[[], tuple[int | None, int | None]]]:
    """The frame, counting its rows and those where `condition` holds for free (an observation); each
    None where none came back (see `counting_rows`)."""
    observed, observation = _observing(frame, [F.expr("count(1) AS rows"), F.expr(f"count_if({condition}) AS held")])

    def counts() -> tuple[int | None, int | None]:
        try:
            found = observation.get
        except Py4JJavaError:
            return None, None
        return tuple(None if found.get(name) is None else int(found[name]) for name in ("rows", "held"))
    return observed, counts


def fingerprinting(frame: Any) -> tuple[Any, Callable[[], Fingerprint | None]]:
    """The frame, taking the fingerprint of the rows that pass through it for free (an observation):
    their count and two sums of a 64-bit hash of each row, with different seeds — the same rows in
    any order and files have the same fingerprint, and the fingerprints of two sets of rows add up to
    their union's. Each sum is taken as the sums of the hashes' high and low 32 bits, in BIGINT (no
    overflow below 2³¹ rows; a DECIMAL sum costs a BigDecimal a row). None where none came back (see
    `counting_rows`)."""
    columns = ", ".join(map(quote_identifier, frame.columns))
    sums = []
    for seed in ("", "1, "):
        hashed = f"xxhash64({seed}{columns})"
        sums += [f"sum(shiftright({hashed}, 32))", f"sum({hashed} & 4294967295)"]
    # one expression: the observation's analysis costs a millisecond or two per expression
    observed, observation = _observing(frame, [F.expr(f"array(count(1), {', '.join(sums)}) AS fingerprint")])
    return observed, lambda: _fingerprint(observation)


def observing(frame: Any, fingerprinted: bool) -> tuple[Any, Callable[[], int], Callable[[], Fingerprint | None]]:
    """The frame with its rows' count, and their fingerprint where it is `fingerprinted` (a row's
    hashes are work thrown away where no fingerprint is kept), to read once an action ran."""
    if not fingerprinted:
        frame, counted = counting_rows(frame)
        return frame, lambda: counted() or 0, lambda: None
    frame, fingerprint = fingerprinting(frame)
    return frame, lambda: (fingerprint() or (0,))[0], fingerprint


def _observing(frame: Any, metrics: list[Any]) -> tuple[Any, Observation]:
    """The frame observed by these metrics. Connect's `observe` asks the server whether the frame
    streams first: a batch frame is observed without that question."""
    observation = Observation(f"observed_{time.monotonic_ns()}")
    if not is_connect(frame.sparkSession):
        return frame.observe(observation, *metrics), observation
    from pyspark.sql.connect import plan
    from pyspark.sql.connect.dataframe import DataFrame
    observation._result = {}          # what Connect's `observe` sets before the action fills it
    return DataFrame(plan.CollectMetrics(frame._plan, observation, metrics), frame.sparkSession), observation


def _fingerprint(observation: Observation) -> Fingerprint | None:
    try:
        found = observation.get.get("fingerprint")
    except Py4JJavaError:
        return None
    if not found or found[0] is None:
        return None
    rows, high0, low0, high1, low1 = (int(value or 0) for value in found)
    return rows, (high0 << 32) + low0, (high1 << 32) + low1


def _observed_rows(observation: Observation, unreported: int | None) -> int | None:
    """The rows counted. Where the optimizer removed the observed relation (an input joined with an
    empty one is never read) the classic session's observation holds no row to read."""
    try:
        rows = observation.get.get("rows")
    except Py4JJavaError:
        return unreported
    return unreported if rows is None else int(rows)


def files_frame(spark: Any, fmt: str, schema: Any, options: dict[str, str], files: Sequence[str],
                partition_columns: Sequence[str], file_column: str | None = None) -> Any:
    """The rows of exactly these files of a table, with its schema (partition values from the
    `column=value` folders). Files of several version folders are read per folder and unioned.
    `file_column`: each row also carries the name of its file (a view hides Spark's `_metadata`)."""
    names = schema.fieldNames() + ([file_column] if file_column else [])
    if not files:       # (filtered: Spark's optimizer knows it empty, and drops what only joins it)
        return spark.createDataFrame([], T.StructType(schema.fields + (
            [T.StructField(file_column, T.StringType())] if file_column else []))).where(F.lit(False))
    groups: dict[str | None, list[str]] = {}
    for path in files:
        groups.setdefault(_base(path, partition_columns), []).append(path)
    frames = []
    for base, paths in groups.items():
        reader = spark.read.format(fmt).schema(schema).options(**options)
        if base is not None:
            reader = reader.option("basePath", base)
        frame = reader.load(paths)
        frames.append(frame.select("*", F.col("_metadata.file_name").alias(file_column)) if file_column else frame)
    if len(frames) == 1 and _read_in_order(schema.fieldNames(), partition_columns, next(iter(groups.items()))):
        return frames[0]    # the reader's columns are the schema's, in order
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame.selectExpr(*map(quote_identifier, names))     # one call: a column built by name is ten


def within_ranges(frame: Any, ranges: Sequence[tuple[str, Any, Any]]) -> Any:
    """The rows of `frame` whose columns lie in these ranges (column, least, greatest), as literals
    Spark infers across an equi-join and pushes into a file scan."""
    for column, low, high in ranges:
        frame = frame.where(F.col(quote_identifier(column)).between(F.lit(low), F.lit(high)))
    return frame


ONE_TASK_BYTES = 4 * 2**20


def in_one_task(frame: Any, size: int | None) -> Any:
    """A small input as one partition (`size`: its files' bytes; None, not known: as Spark splits it).
    An aggregate over it, or over a union of such (Spark keeps a union of single partitions one), needs
    no shuffle: a job and the re-planning between two fewer — 0.1 s of a 0.2-0.4 s statement over a
    few rows, on two cores."""
    return frame.coalesce(1) if size is not None and size <= ONE_TASK_BYTES else frame


_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_WRITERS_PER_TASK = "spark.sql.maxConcurrentOutputFileWriters"
_settings_lock = threading.Lock()
_settings_held: dict[tuple[int, str], tuple[int, str | None]] = {}   # (session, key) → (runs inside, before)


@contextmanager
def listed_by_driver(spark: Any, files: Iterable[str]) -> Iterator[None]:
    """Reads of these files, inside, have their statuses fetched by the driver. Spark fetches more
    than 32 paths with a job of one task per path: 2.1-3.1 s for 480 small files on two cores, where
    the driver takes 0.13 s. Only where every file is on a local disk (an object store's statuses
    are better fetched in parallel), and where any is named (none named: Spark's own way)."""
    files = list(files)
    if not files or not all(path.startswith("file:") for path in files):
        yield
        return
    with _held(spark, _LISTING_THRESHOLD, str(2**31 - 1)):
        yield


@contextmanager
def unsorted_partition_writes(spark: Any) -> Iterator[None]:
    """Writes split by a column, inside, keep a file open per value a task meets instead of sorting
    the task's rows first (measured: a write split 60 ways took 2.5x an unsplit one sorted, 1.75x
    so); past 64 values a task sorts the rest, as Spark does."""
    with _held(spark, _WRITERS_PER_TASK, "64"):
        yield


@contextmanager
def _held(spark: Any, key: str, value: str) -> Iterator[None]:
    """A session setting for the runs inside; the session's own comes back when the last run inside
    ends (runs of several tables overlap)."""
    held = (id(spark), key)
    with _settings_lock:
        inside, before = _settings_held.get(held, (0, None))
        if not inside:
            before = spark.conf.get(key, None)
            spark.conf.set(key, value)
        _settings_held[held] = (inside + 1, before)
    try:
        yield
    finally:
        with _settings_lock:
            inside, before = _settings_held.pop(held)
            if inside > 1:
                _settings_held[held] = (inside - 1, before)
            elif before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


def _read_in_order(names: list[str], partition_columns: Sequence[str], group: tuple[str | None, list[str]]) -> bool:
    """Whether a reader of these files puts out the schema's columns in its order: its data columns
    then the partition columns, one `column=value` folder each below the base, in the folders' order
    (a folder elsewhere would read as a column too)."""
    base, paths = group
    if not partition_columns:
        return not any("=" in path for path in paths)
    return names[len(names) - len(partition_columns):] == list(partition_columns) and base is not None and \
        all(path[len(base):].count("=") == len(partition_columns) for path in paths)


def _base(path: str, partition_columns: Sequence[str]) -> str | None:
    """The folder a partitioned table's file lies under, above its first `column=value` folder."""
    if not partition_columns:
        return None
    found = re.search(rf"/{re.escape(partition_columns[0])}=[^/]*/", path, re.IGNORECASE)
    return path[:found.start()] if found else None


@contextmanager
def query_over(spark: Any, query: str, relations: dict[str, Any]) -> Iterator[Any]:
    """A query that reads DataFrames by name: over Connect they travel with the query (nothing is
    registered); a classic session registers temporary views for the query's life."""
    if is_connect(spark):
        from pyspark.sql.connect.dataframe import DataFrame
        from pyspark.sql.connect.plan import SQL, SubqueryAlias
        yield DataFrame(SQL(query, None, None, [SubqueryAlias(f._plan, name) for name, f in relations.items()]),
                        spark)
        return
    for name, frame in relations.items():
        frame.createOrReplaceTempView(name)
    try:
        yield spark.sql(query)
    finally:
        for name in relations:
            spark.catalog.dropTempView(name)
