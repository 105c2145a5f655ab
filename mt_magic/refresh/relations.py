"""The DataFrames one refresh run reads, by the names its generated SQL gives them: each source
occurrence's old, new and appended files, the kept state, and what the run wrote itself — built only
when a query names them, in the run's job group, with the files' statuses fetched by the driver."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.occurrences import Version
from mt_magic.refresh.changes import SourceDelta
from mt_magic.refresh.choice import Reading
from mt_magic.refresh.full import job_group
from mt_magic.refresh.key_bounds import Bounds, KeyBound
from mt_magic.spark.frames import counting_rows, files_frame, listed_by_driver, query_over, within_ranges
from mt_magic.spark.jobs import job_scope
from mt_magic.spark.local_reads import read_here
from mt_magic.sql.statements import quote_identifier


class Names:
    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.tables: dict[int, str] = {}       # occurrence → the source's name, read as it is now
        self.bounded: set[tuple[int, Version, int]] = set()    # (occurrence, version, beside): read within its keys

    def name(self, index: int, version: Version, beside: int | None = None) -> str:
        if version is Version.NEW and index in self.tables:
            return self.tables[index]
        return self.relation(index, version, beside if (index, version, beside) in self.bounded else None)

    def relation(self, index: int, version: Version, beside: int | None = None) -> str:
        return f"mt_{self.nonce}_{index}_{'' if beside is None else f'by_{beside}_'}{version.value}"   # none holds another


class Relations:
    """The DataFrames one incremental run reads, by the names its SQL gives them, in its job group."""

    def __init__(self, spark: Any, table: MaterializedTable, what: str) -> None:
        self.spark = spark
        self.table = table
        self.what = what
        self.nonce = uuid.uuid4().hex[:10]
        self.frames: dict[str, Any] = {}
        self._delta_counts: list[Callable[[], int | None]] = []
        self._here: dict[tuple[tuple[str, ...], str | None], tuple[Any, int] | None] = {}   # read by this process
        self.group = job_group(table)
        self.names = Names(self.nonce)
        self.readings: dict[str, Reading] = {}
        self.changes: dict[str, SourceDelta] = {}
        self.verify: Callable[[], None] | None = None     # before the publish: what was read may be published
        self._scopes = ExitStack()

    def __enter__(self) -> Relations:
        self._scopes.enter_context(job_scope(self.spark, self.group, f"refresh {self.table.identifier} ({self.what})"))
        return self

    def __exit__(self, *exc: object) -> None:
        self._scopes.__exit__(*exc)

    def on_exit(self, action: Callable[[], object]) -> None:
        """`action` done as the run ends, however it ends (a stage it wrote removed)."""
        self._scopes.callback(action)

    def naming(self, sources: tuple[str, ...], changes: dict[str, SourceDelta], readings: dict[str, Reading],
               by_name: bool = False, bounds: Bounds = Bounds()) -> Names:
        """`by_name`: the sources Spark reads as listed are read as they are now, by their names;
        `bounds`: an appended occurrence's rows are read within its join keys' ranges, and the others it
        meets in an inner equality, in its term of the change, as only their files within them (`key_bounds`)."""
        names, self.readings, self.changes = self.names, readings, changes
        for index, source in enumerate(sources):
            if by_name and readings[source].as_listed:
                names.tables[index] = ".".join(map(quote_identifier, source.split(".", 2)))
        # Whether read as listed or by name (a source's folders listed again as Spark plans).
        self._scopes.enter_context(listed_by_driver(self.spark, (path for source in dict.fromkeys(sources)
                                                                 for path in changes[source].files)))
        for index, source in enumerate(sources):
            change, reading = changes[source], readings[source]
            for version, files in ((Version.OLD, change.kept), (Version.NEW, change.files),
                                   (Version.DELTA, change.added)):
                self.frames[names.relation(index, version)] = functools.partial(
                    self._counted, reading, files, bounds.keys.get(index, ())) if version is Version.DELTA else \
                    self._builder(reading, files)
        for (index, beside), read in bounds.reads.items():     # in the term of another's append, within its keys
            version = Version.NEW if index < beside else Version.OLD
            names.bounded.add((index, version, beside))
            self.frames[names.relation(index, version, beside)] = lambda reading=readings[sources[index]], \
                files=read.files: self._read(reading, files)[0]
        return names

    def _builder(self, reading: Reading, files: tuple[str, ...]) -> Callable[[], Any]:
        return functools.partial(files_frame, self.spark, reading.format, reading.schema, reading.options, files,
                                 reading.partition_columns, reading.file_column)

    def files(self, fmt: str, schema: Any, files: list[str], partition_columns: tuple[str, ...] = ()) -> Any:
        """Files the run wrote or keeps, read alone; their statuses fetched by the driver."""
        self._scopes.enter_context(listed_by_driver(self.spark, files))
        return files_frame(self.spark, fmt, schema, {}, files, partition_columns)

    def source_files(self, source: str, files: tuple[str, ...]) -> Any:
        """Some of a source's files, read alone."""
        reading = self.readings[source]
        return files_frame(self.spark, reading.format, reading.schema, reading.options, files,
                           reading.partition_columns, reading.file_column)

    def _counted(self, reading: Reading, files: tuple[str, ...], bounds: tuple[KeyBound, ...]) -> Any:
        """An appended files' frame that counts the rows read through it, with no job of its own, and
        keeps those within `bounds` (after the count: a row outside is one of a NULL key)."""
        frame, read = self._read(reading, files)
        if read is None:
            frame, rows = counting_rows(frame, unreported=None)
        else:
            rows = lambda: read        # noqa: E731
        self._delta_counts.append(rows)
        return within_ranges(frame, [(b.column, b.low, b.high) for b in bounds])

    def _read(self, reading: Reading, files: tuple[str, ...]) -> tuple[Any, int | None]:
        """These files of a source, and their rows where read already: a few small ones are read once a
        run by this process, for every query of the run that reads them (`local_reads`); others by Spark."""
        key = (files, reading.file_column)
        if key not in self._here:
            self._here[key] = read_here(self.spark, reading.format, reading.schema, reading.options, files,
                                        reading.partition_columns, reading.file_column)
        return self._here[key] or (self._builder(reading, files)(), None)

    def read_here_only(self) -> int | None:
        """The rows of the appended files the queries built so far read, where this process read them
        all (`local_reads`: a few); None where Spark read any, or none was read."""
        counts = [here and here[1] for here in self._here.values()] if self._here else [None]
        return None if None in counts else sum(counts)

    def delta_rows(self) -> int | None:
        """The rows read of the appended files, once the queries that read them ran; None when no
        query read any (a full refresh that keeps the state) or a count did not come back."""
        counts = [rows() for rows in self._delta_counts]
        return None if not counts or None in counts else sum(counts)

    def add(self, what: str, frame: Any) -> str:
        name = f"mt_{self.nonce}_{what}"
        self.frames[name] = frame
        return name

    def query(self, sql: str) -> AbstractContextManager:
        """The query over the relations it names (the others are not even built)."""
        return query_over(self.spark, sql, {n: f() if callable(f) else f for n, f in self.frames.items()
                                            if n in sql})     # unique names: none holds another
