"""Folder operations where the table data lives.

A classic session goes through Hadoop's FileSystem in its JVM, so data may live on any store Spark
reads (HDFS, object stores, local disks). A Spark Connect client has no JVM: it works on `file:`
paths that it shares with the server (a local server, or a shared mount), and says so clearly for
any other scheme.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from mt_magic.errors import ValidationError
from mt_magic.spark.kind import is_connect


# path → (size in bytes, modification time in ms)
Listing = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Entry:
    path: str
    name: str
    is_dir: bool


class Files:
    """The operations the storage layer needs; `files_for(spark)` picks the implementation."""

    def qualify(self, path: str) -> str:
        """The fully qualified URI (file:/..., hdfs://...) that Spark's catalog stores."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def mkdirs(self, path: str) -> None:
        raise NotImplementedError

    def delete(self, path: str) -> None:
        raise NotImplementedError

    def rename(self, source: str, target: str) -> None:
        """One atomic step on HDFS and local disks."""
        raise NotImplementedError

    def touch(self, path: str) -> None:
        raise NotImplementedError

    def list(self, path: str) -> list[Entry]:
        raise NotImplementedError

    def modified(self, path: str) -> int | None:
        """A file's or folder's last change in ns since the epoch, None when there is none (a folder
        changes as entries in it are made, renamed or deleted)."""
        raise NotImplementedError

    def age(self, path: str) -> float | None:
        return None if (modified := self.modified(path)) is None else time.time() - modified / 1e9

    def link_tree(self, source: str, target: str) -> None:
        """The files under `source` (or the file) also under `target`: hard links where the store has them."""
        raise NotImplementedError

    def listing(self, path: str) -> Listing:
        """Every data file under `path` with its size and modification time: what a change of the
        data changes. Names Spark skips (`_x`, `.x`) are skipped here too."""
        raise NotImplementedError

    def write_text(self, path: str, text: str) -> None:
        """A small file, whole: written aside, then renamed into place (a reader sees all or nothing)."""
        raise NotImplementedError

    def read_text(self, path: str) -> str | None:
        """A small file's text, or None when there is none."""
        raise NotImplementedError

    def is_empty_dir(self, path: str) -> bool:
        return not [e for e in self.list(path) if not e.name.startswith((".", "_"))]

    def writing(self, path: str) -> bool:
        """A Spark job writes into the table folder now: its committer's staging folder is there (made
        less than WRITE_STALE_S ago: an older one is a killed job's). An overwrite deletes the old
        files before its job commits the new ones, so a listing meanwhile is a state no reader of the
        finished write ever sees."""
        return any((e.name == "_temporary" or e.name.startswith(_WRITE_STAGING))
                   and (self.age(e.path) or 0.0) < WRITE_STALE_S for e in self.list(path))

    def await_writes(self, folders: list[str], timeout_s: float) -> list[str]:
        """Wait until no Spark job writes into these folders, at most `timeout_s` (a killed writer's
        leftovers are the state its readers see too); the folders that were being written."""
        deadline, waited = time.monotonic() + timeout_s, []
        while True:
            writing = [folder for folder in folders if self.writing(folder)]
            waited += [folder for folder in writing if folder not in waited]
            if not writing or time.monotonic() >= deadline:
                return waited
            time.sleep(_WRITE_POLL_S)


def files_for(spark: Any) -> Files:
    return LocalFiles() if is_connect(spark) else HadoopFiles(spark)


class HadoopFiles(Files):
    def __init__(self, spark: Any) -> None:
        self._path_class = spark._jvm.org.apache.hadoop.fs.Path   # a lookup costs JVM round trips
        self._conf = spark._jsc.hadoopConfiguration()
        self._file_util = spark._jvm.org.apache.hadoop.fs.FileUtil
        self._jvm = spark._jvm

    def _fs(self, path: str):
        jpath = self._path_class(path)
        return jpath.getFileSystem(self._conf), jpath

    def qualify(self, path: str) -> str:
        fs, jpath = self._fs(path)
        return fs.makeQualified(jpath).toString()

    def exists(self, path: str) -> bool:
        if is_local(path):           # done here: no JVM round trip
            return LocalFiles().exists(path)
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def mkdirs(self, path: str) -> None:
        if is_local(path):           # done here: no JVM round trip
            LocalFiles().mkdirs(path)
            return
        fs, jpath = self._fs(path)
        fs.mkdirs(jpath)

    def delete(self, path: str) -> None:
        if is_local(path):
            LocalFiles().delete(path)
            return
        fs, jpath = self._fs(path)
        fs.delete(jpath, True)

    def rename(self, source: str, target: str) -> None:
        if is_local(source) and is_local(target):     # done here: two JVM round trips a file moved
            LocalFiles().rename(source, target)
            return
        fs, jsource = self._fs(source)
        if not fs.rename(jsource, self._path_class(target)):
            raise OSError(f"Could not rename {source} to {target}.")

    def touch(self, path: str) -> None:
        if is_local(path):
            LocalFiles().touch(path)
            return
        fs, jpath = self._fs(path)
        fs.create(jpath, True).close()

    def list(self, path: str) -> list[Entry]:
        if is_local(path):           # a sweep lists every table's root: no JVM round trip per entry
            return LocalFiles().list(path)
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return []
        entries = []
        for status in fs.listStatus(jpath):   # each JVM call costs a round trip: as few as possible
            found = status.getPath().toString()
            entries.append(Entry(found, found.rstrip("/").rsplit("/", 1)[-1], bool(status.isDirectory())))
        return entries

    def link_tree(self, source: str, target: str) -> None:
        if is_local(source) and is_local(target):
            LocalFiles().link_tree(source, target)
            return
        fs, jsource = self._fs(source)     # Hadoop's FileSystem has no hard links: a copy
        target_fs, jtarget = self._fs(target)
        self._file_util.copy(fs, jsource, target_fs, jtarget, False, self._conf)

    def listing(self, path: str) -> Listing:
        if is_local(path):      # read here: no JVM round trip per file
            return _walk(local_path(path))
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return {}
        found: Listing = {}
        files = fs.listFiles(jpath, True)
        while files.hasNext():
            status = files.next()
            name = status.getPath().toString()
            if not _hidden(name[len(path):]):
                found[name] = (int(status.getLen()), int(status.getModificationTime()))
        return found

    def modified(self, path: str) -> int | None:
        if is_local(path):
            return LocalFiles().modified(path)
        fs, jpath = self._fs(path)
        return int(fs.getFileStatus(jpath).getModificationTime()) * 1_000_000 if fs.exists(jpath) else None

    def write_text(self, path: str, text: str) -> None:
        if is_local(path):
            LocalFiles().write_text(path, text)
            return
        aside = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        fs, jaside = self._fs(aside)
        stream = fs.create(jaside, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        fs.delete(self._path_class(path), False)
        self.rename(aside, path)

    def read_text(self, path: str) -> str | None:
        if is_local(path):
            return LocalFiles().read_text(path)
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return None
        stream = fs.open(jpath)
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()


def is_local(path: str) -> bool:
    """A `file:` URI: this process reaches it directly."""
    return urlparse(path).scheme == "file"


def local_path(location: str) -> str:
    """The path of a `file:` location as Spark's catalog and Hadoop spell it: as it is, not a URI
    ('#', '%' and spaces are part of a folder's name, not a fragment or an escape)."""
    rest = location[len("file:"):]
    if rest.startswith("//"):           # file:///path, or file://host/path
        start = rest.find("/", 2)
        rest = rest[start:] if start >= 0 else "/"
    return rest


_WRITE_STAGING = (".spark-staging-", ".hive-staging")
_WRITE_POLL_S = 0.1
WRITE_WAIT_S = 60.0         # how long a reader of a source waits for a job writing into it
WRITE_STALE_S = 600.0       # a staging folder this old is what a killed job left


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/") if part)


def _walk(local: str) -> Listing:
    found: Listing = {}
    for folder, folders, names in os.walk(local):
        folders[:] = [f for f in folders if not f.startswith(("_", "."))]
        for name in names:
            if name.startswith(("_", ".")):
                continue
            full = os.path.join(folder, name)
            try:
                stat = os.stat(full)
            except FileNotFoundError:
                continue          # removed while listed: the next listing differs anyway
            found["file:" + full] = (stat.st_size, int(stat.st_mtime * 1000))
    return found


class LocalFiles(Files):
    """`file:` URIs and plain paths, on the file system this process shares with the server."""

    @staticmethod
    def _local(path: str) -> str:
        parsed = urlparse(path)
        if parsed.scheme in ("", "file"):
            return os.path.abspath(local_path(path) if parsed.scheme else path)
        raise ValidationError(
            f"Path '{path}': over Spark Connect, mt_magic manages table data on paths it shares with "
            "the server (file:); set 'materialized-table.data-dir' to such a folder, or use a classic "
            "session for other file systems.")

    def qualify(self, path: str) -> str:
        return "file:" + self._local(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._local(path))

    def mkdirs(self, path: str) -> None:
        os.makedirs(self._local(path), exist_ok=True)

    def delete(self, path: str) -> None:
        local = self._local(path)
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local, ignore_errors=True)
        elif os.path.lexists(local):
            os.unlink(local)

    def rename(self, source: str, target: str) -> None:
        local_target = self._local(target)
        if os.path.exists(local_target):
            raise OSError(f"Could not rename {source} to {target}: the target exists.")
        os.makedirs(os.path.dirname(local_target), exist_ok=True)     # as Hadoop's rename does
        os.rename(self._local(source), local_target)

    def touch(self, path: str) -> None:
        with open(self._local(path), "w", encoding="utf-8"):
            pass

    def list(self, path: str) -> list[Entry]:
        local = self._local(path)
        if not os.path.isdir(local):
            return []
        with os.scandir(local) as entries:
            return [Entry("file:" + entry.path, entry.name, entry.is_dir()) for entry in entries]

    def listing(self, path: str) -> Listing:
        return _walk(self._local(path))

    def link_tree(self, source: str, target: str) -> None:
        def link(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:       # another device, or links not supported: a copy
                shutil.copy2(src, dst)
        if os.path.isdir(self._local(source)):
            shutil.copytree(self._local(source), self._local(target), copy_function=link)
        else:
            link(self._local(source), self._local(target))

    def modified(self, path: str) -> int | None:
        try:
            return os.stat(self._local(path)).st_mtime_ns
        except FileNotFoundError:
            return None

    def write_text(self, path: str, text: str) -> None:
        local = self._local(path)
        aside = f"{local}.{uuid.uuid4().hex[:8]}.tmp"
        with open(aside, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(aside, local)

    def read_text(self, path: str) -> str | None:
        try:
            with open(self._local(path), encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
