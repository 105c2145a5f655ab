"""Where an aggregate's provenance state lives, and which source partitions a change touched.

The state (partials per source partition and group, `incremental/provenance`) is written partitioned by
the source partition it came from, under `<version>/_provenance/mt_partition=<partition>/` — a folder Spark's
readers of the table skip. A partition's folder text is the source's own (`ds=<text>` ↔ `mt_partition=<text>`:
both are Spark's escaping of the same value as text). A new version links the published state's
folders, drops the rewritten partitions' and moves the newly written ones in; a partition whose state
files grow past `FILES_KEPT` (appends add one each) is merged into one file by the refresh that adds
to it. A small source joined with the kept one (a dimension) has its files as read linked beside, under
`<version>/_previous/`: once it is rewritten, the rows it lost and gained are its content then and now
diffed, and their partials are subtracted and added.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import Enum

from mt_magic.incremental.below_join import Below
from mt_magic.incremental.provenance import FILE, PAIRED, PARTITION, Provenance
from mt_magic.spark.files import Files, Listing
from mt_magic.storage.manifests import KeptState
from mt_magic.storage.versions import same_path

PROVENANCE_FOLDER = "_provenance"
PREVIOUS_FOLDER = "_previous"
FILES_KEPT = 8


@dataclass(frozen=True)
class Keeping:
    """The source, and its partition column, an aggregate's partials are kept by."""

    source: str
    provenance: Provenance
    paired_source: str | None = None        # the second source an aggregate's partials are kept by (its
    # partition: `provenance.paired`)

    def describe(self, layout: Below | None = None) -> str:
        """Where the state's rows are kept by, in words (EXPLAIN): what a rewrite retracts; `layout`:
        kept below the joins."""
        by = "file" if self.provenance.column == FILE else f"partition ({self.provenance.column})"
        paired = f" and per partition of {self.paired_source}" if self.paired_source else ""
        kept = "" if layout is None else f", below its joins per value of {', '.join(layout.interface)}" + (
            " (the side a LEFT JOIN pads: every change joins them with the other side again)" if layout.padded else "")
        return f"per {by} of {self.source}{paired}{kept}: a rewrite of it is retracted, not recomputed"


class Way(Enum):
    """How a rewritten source's rows are taken out of the state."""

    PARTITIONS = "partitions"   # the kept source's: its rewritten partitions' partials out, their files now in
    DIFFED = "diffed"           # a small source's: its content kept diffed with its files now, the difference joined
    REJOINED = "rejoined"       # another source's: the partials kept below the joins joined with it again
    BRANCHES = "branches"       # a source of UNION ALL branches not reading the kept one: those branches' rows again


@dataclass(frozen=True)
class Retraction:
    """The partitions of the kept source a refresh retracts and computes again, and their files now
    (another source's: its files now)."""

    source: str
    partitions: tuple[str, ...]
    files: tuple[str, ...]
    way: Way = Way.PARTITIONS
    kept_by: str = ""           # REJOINED: the source whose partials are kept below the joins
    column: str = ""            # PARTITIONS: the kept source's partition column (FILE: by its files)
    paired_source: str = ""     # PARTITIONS kept by two sources: the second, its changed partitions and their files now
    paired: tuple[str, ...] = ()
    paired_files: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.way is Way.DIFFED:
            return "its previous content diffed with its files now, the difference joined"
        if self.way is Way.BRANCHES:
            return "the UNION ALL branches reading it computed again, the others' rows kept"
        if self.way is Way.REJOINED:
            return f"its files now joined with the partials kept of {self.kept_by}, whose rows are not read again"
        if self.paired_source:
            return (f"{counted(self.partitions, self.column)} of {self.source} and {counted(self.paired, '')} of "
                    f"{self.paired_source} retracted, each one's files now joined with the other's")
        return f"{counted(self.partitions, self.column)} of {self.source} retracted and read again"

    @property
    def files_read(self) -> tuple[str, ...]:
        """The sources' files it reads as they are now."""
        return self.files + self.paired_files


def counted(partitions: tuple[str, ...] | set[str], column: str) -> str:
    """"2 partitions", or, kept by FILE, "2 files"."""
    noun = "file" if column == FILE else "partition"
    return f"{len(partitions)} {noun}{'s' if len(partitions) != 1 else ''}"


def keep_previous(files: Files, version: str, sources: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Small sources' files as a refresh read them, linked beside the state (`<version>/_previous/<n>/`):
    their content then, once they are rewritten. A source whose file is gone meanwhile keeps none."""
    kept = {}
    for index, (source, paths) in enumerate(sorted(sources.items())):
        folder = f"{version}/{PREVIOUS_FOLDER}/{index}"
        files.mkdirs(folder)
        for number, path in enumerate(paths):
            if not files.exists(path):
                files.delete(folder)
                break
            files.link_tree(path, f"{folder}/{number:05d}-{path.rsplit('/', 1)[1]}")
        else:
            kept[source] = folder
    return kept


def partition_of(path: str, column: str) -> str:
    """The text of a file's `column=…` folder (the last such folder of its path; "" where none); kept
    by FILE, the file's name."""
    if column == FILE:
        return path.rsplit("/", 1)[-1]
    match = _last_folder(column).match(path)
    return match.group(1) if match else ""


@functools.lru_cache(maxsize=64)
def _last_folder(column: str) -> re.Pattern:
    """A decision reads the partition of each of a source's files: a pattern compiled once."""
    return re.compile(rf".*/{re.escape(column)}=([^/]*)/", re.IGNORECASE | re.DOTALL)


def partitions(listing: Listing, column: str) -> dict[str, Listing]:
    """A listing's files by the text of their `column=…` folder."""
    found: dict[str, Listing] = {}
    for path, facts in listing.items():
        found.setdefault(partition_of(path, column), {})[path] = facts
    return found


def changed_partitions(before: Listing, now: Listing, column: str) -> tuple[set[str], list[str]]:
    """The partitions whose files differ (rewritten, gone, new) and the files they have now."""
    old, new = partitions(before, column), partitions(now, column)
    if column == FILE:      # a file keeps its name in the versions it is carried into, not its path
        changed = old.keys() ^ new.keys()
    else:
        changed = {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}
    return changed, sorted(path for p in changed for path in new.get(p, {}))


def state_files(files: Files, folder: str) -> dict[str, Listing]:
    """A kept state's files by partition."""
    return partitions(files.listing(folder), PARTITION) if files.exists(folder) else {}


def files_in(by_partition: dict[str, Listing], partitions: set[str], paired: frozenset[str] = frozenset()) -> list[str]:
    """The files of those partitions, of a state's files by partition (kept by two sources: and those
    of the second's `paired` partitions in every one)."""
    return [path for partition, listing in by_partition.items() for path in listing
            if partition in partitions or paired and partition_of(path, PAIRED) in paired]


def assemble(files: Files, published: KeptState | None, version: str, stage: str | None,
             dropped: set[str], dropped_paired: frozenset[str] = frozenset()) -> str:
    """The new version's state folder: the published one's partitions (linked) but the `dropped` ones
    (and, kept by two sources, the second's `dropped_paired` in every one), and the files written to
    `stage` moved in at the same places."""
    target = f"{version}/{PROVENANCE_FOLDER}"
    if published is not None and files.exists(published.folder):
        files.link_tree(published.folder, target)
        for partition in dropped:
            files.delete(f"{target}/{PARTITION}={partition}")
        for folder in {path.rsplit("/", 1)[0] for path in files.listing(target) if dropped_paired and
                       partition_of(path, PAIRED) in dropped_paired}:
            files.delete(folder)
    else:
        files.mkdirs(target)
    if stage is not None:
        prefix = same_path(stage) + "/"
        for path in files.listing(stage):
            inside = same_path(path)[len(prefix):]
            files.mkdirs(f"{target}/{inside}".rsplit("/", 1)[0])
            files.rename(path, f"{target}/{inside}")
    return target
