"""A few small files read by this process into a local relation, where Spark would scan them.

Spark scans a file with a task that opens it and reads its footer. An append to a source partitioned
by month adds a file to each month (TPC-H's RF1: 79 files of `lineitem`, 8,483 rows, 0.6 MB): on two
cores a query over them took 0.36-0.64 s, and 0.10-0.17 s over the same rows read here by pyarrow
(0.04 s) into a local relation — which Spark's optimizer also sees whole (a filter over it is evaluated
as it plans, a join with no match dropped), in one partition (`frames.in_one_task`). Only where pyarrow
reads what Spark's reader would: Parquet on a local disk, no reader options, columns of plain types
under their exact names and Parquet types, dates only from files Spark 3 or later wrote in its own
calendar, partition values of text, whole numbers or dates; and only a few rows (Spark's optimizer
evaluates a filter over a local relation row by row as it plans). Elsewhere (or a file pyarrow cannot
read) Spark reads them. The rows read, and the relation made of them, are kept for the process: every
table over a source reads the same append, one after another.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import types as T

from mt_magic.spark.files import is_local, local_path
from mt_magic.spark.footers import footer
from mt_magic.spark.frames import in_one_task
from mt_magic.spark.partition_folders import folder_value

MAX_BYTES = 8 * 2**20       # the files' own size; their rows travel to Spark in one piece,
MAX_ROWS = 100_000          # and Spark's optimizer evaluates what it can over them as it plans
_SPARK_VERSION = b"org.apache.spark.version"
_READERS = 4                # threads reading files: 79 small ones 0.15 s in one, 0.04 s in four (two cores)
_WHOLE = {T.ByteType: "int8", T.ShortType: "int16", T.IntegerType: "int32", T.LongType: "int64"}
_PLAIN = {**_WHOLE, T.FloatType: "float", T.DoubleType: "double", T.BooleanType: "bool",
          T.DateType: "date32[day]", T.BinaryType: "binary", T.StringType: "string"}
_LEGACY_DATES = b"org.apache.spark.legacyDateTime"
KEPT_BYTES = 64 * 2**20     # the rows read kept for the process: every table over a source reads its append
KEPT_FRAMES = 8             # and the relations made of them, per session
_FILE_NAME = re.compile(r"[A-Za-z0-9._=-]+")


def read_here(spark: Any, fmt: str, schema: T.StructType, options: dict[str, str], files: Sequence[str],
              partition_columns: Sequence[str], file_column: str | None = None) -> tuple[Any, int] | None:
    """The rows of exactly these files as `files_frame` reads them, with their count; None where
    Spark must read them (see the module docstring)."""
    if fmt.lower() != "parquet" or options or not files or importlib.util.find_spec("pyarrow") is None \
            or not all(map(is_local, files)) or not all(_plain(f.dataType) for f in schema.fields):
        return None
    try:
        stamps = [os.stat(local_path(path)) for path in files]
    except OSError:
        return None
    if sum(found.st_size for found in stamps) > MAX_BYTES:
        return None
    reading = (schema.json(), tuple(partition_columns), file_column)
    keys = tuple((path, found.st_mtime_ns, found.st_size, *reading) for path, found in zip(files, stamps))
    return _FRAMES.frame(spark, keys, lambda: _frame(spark, schema, files, keys, partition_columns, file_column))


def _frame(spark: Any, schema: T.StructType, files: Sequence[str], keys: tuple[tuple, ...],
           partition_columns: Sequence[str], file_column: str | None) -> tuple[Any, int] | None:
    try:
        with ThreadPoolExecutor(min(_READERS, len(files))) as pool:     # (pyarrow decodes without the GIL)
            tables = list(pool.map(lambda at: _KEPT.rows(keys[at], lambda: _file_rows(
                files[at], schema, partition_columns, file_column)), range(len(files))))
    except (OSError, ValueError):    # a file gone or unreadable (ArrowIOError, ArrowInvalid): Spark's to say
        return None
    if any(table is None for table in tables) or sum(table.num_rows for table in tables) > MAX_ROWS:
        return None
    import pyarrow
    rows = pyarrow.concat_tables(tables)
    fields = [T.StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields]   # a file read: all nullable
    if file_column:
        fields.append(T.StructField(file_column, T.StringType(), True))
    return in_one_task(spark.createDataFrame(rows, schema=T.StructType(fields)), 0), rows.num_rows


def _plain(data_type: T.DataType) -> bool:
    if isinstance(data_type, T.StringType):
        return data_type.simpleString() == "string"       # not a collation's
    return isinstance(data_type, (T.DecimalType, *_PLAIN))


def _arrow_type(data_type: T.DataType) -> str:
    if isinstance(data_type, T.DecimalType):
        return f"decimal128({data_type.precision}, {data_type.scale})"
    return _PLAIN[type(data_type)]


class _Kept:
    """Files' rows as read here, by the file's name, modification time and size and the reading (a file
    written again under its name is read again); past KEPT_BYTES, the least recently read go first."""

    def __init__(self) -> None:
        self._rows: OrderedDict[tuple, Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def rows(self, key: tuple, read: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._rows:
                self._rows.move_to_end(key)
                return self._rows[key]
        table = read()
        size = table.nbytes if table is not None else 0
        with self._lock:
            if key not in self._rows and size <= KEPT_BYTES:
                self._rows[key] = table
                self._bytes += size
                while self._bytes > KEPT_BYTES:
                    _, dropped = self._rows.popitem(last=False)
                    self._bytes -= dropped.nbytes if dropped is not None else 0
        return table


class _Frames:
    """The last few relations made of files' rows, per session: the tables over a source read the same
    append one after another, and each would send its rows to Spark again."""

    def __init__(self) -> None:
        self._frames: weakref.WeakKeyDictionary[Any, OrderedDict[tuple, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def frame(self, spark: Any, key: tuple, make: Callable[[], Any]) -> Any:
        with self._lock:
            kept = self._frames.setdefault(spark, OrderedDict())
            if key in kept:
                kept.move_to_end(key)
                return kept[key]
        made = make()
        with self._lock:
            kept[key] = made
            while len(kept) > KEPT_FRAMES:
                kept.popitem(last=False)
        return made


_KEPT, _FRAMES = _Kept(), _Frames()


def _file_rows(path: str, schema: T.StructType, partition_columns: Sequence[str],
               file_column: str | None) -> Any | None:
    """One file's rows in the schema's columns, or None where its columns, calendar, partition folders
    or name are not read here as Spark reads them."""
    import pyarrow
    from pyarrow import parquet
    values = _partition_values(path, schema, partition_columns)
    name = path.rsplit("/", 1)[-1]
    if values is None or file_column and not _FILE_NAME.fullmatch(name):
        return None
    with parquet.ParquetFile(local_path(path), metadata=footer(path)) as opened:
        table = opened.read(use_threads=False)
    found = {field.name: field.type for field in table.schema}
    if len({n.lower() for n in found}) < len(found):        # Spark matches names ignoring case
        return None
    columns = []
    for field in schema.fields:
        if field.name in partition_columns:
            columns.append(pyarrow.array([values[field.name]] * table.num_rows, type=_arrow_type(field.dataType)))
        elif str(found.get(field.name)) != _arrow_type(field.dataType):
            return None
        else:
            columns.append(table.column(field.name))
    if any(isinstance(f.dataType, T.DateType) and f.name not in partition_columns for f in schema.fields) \
            and not _own_calendar(table.schema.metadata):
        return None
    names = schema.fieldNames()
    if file_column:
        columns.append(pyarrow.array([name] * table.num_rows, type=pyarrow.string()))
        names = [*names, file_column]
    return pyarrow.table(columns, names=names)


def _own_calendar(metadata: dict[bytes, bytes] | None) -> bool:
    """Dates kept in the proleptic Gregorian calendar, as pyarrow reads them: written by Spark 3 or
    later, not in its legacy mode (a file without Spark's version is read per a setting: Spark's)."""
    version = (metadata or {}).get(_SPARK_VERSION)
    return version is not None and _LEGACY_DATES not in metadata and int(version.split(b".")[0]) >= 3


def _partition_values(path: str, schema: T.StructType, partition_columns: Sequence[str]) -> dict[str, Any] | None:
    """The values of the file's `column=value` folders, one per partition column right above it, in
    order, typed as Spark reads them; None where one is not read here."""
    if not partition_columns:
        return {}
    folders = path.rsplit("/", len(partition_columns) + 1)[1:-1]
    if len(folders) != len(partition_columns):
        return None
    types = {f.name: f.dataType for f in schema.fields}
    values = {}
    for column, folder in zip(partition_columns, folders, strict=True):
        named, _, text = folder.partition("=")
        if named.lower() != column.lower():
            return None
        value = folder_value(text)
        typed = _typed(value, types[column])
        if value is not None and typed is None:
            return None
        values[column] = typed
    return values


def _typed(value: str | None, data_type: T.DataType) -> Any:
    """A folder's text as its column's value, where it is plainly one (else None)."""
    if value is None:
        return None
    if isinstance(data_type, T.StringType):
        return value
    if isinstance(data_type, tuple(_WHOLE)) and re.fullmatch(r"-?[0-9]{1,18}", value):
        return int(value)
    if isinstance(data_type, T.DateType) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            return None
    return None
