"""Folder operations through Hadoop's FileSystem, so table data may live on any store Spark reads."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Entry:
    path: str
    name: str
    is_dir: bool


class Files:
    def __init__(self, spark: SparkSession) -> None:
        self._path_class = spark._jvm.org.apache.hadoop.fs.Path   # a lookup costs JVM round trips
        self._conf = spark._jsc.hadoopConfiguration()

    def _fs(self, path: str):
        jpath = self._path_class(path)
        return jpath.getFileSystem(self._conf), jpath

    def qualify(self, path: str) -> str:
        """The fully qualified URI (file:/..., hdfs://...) that Spark's catalog stores."""
        fs, jpath = self._fs(path)
        return fs.makeQualified(jpath).toString()

    def uri(self, path: str):
        fs, jpath = self._fs(path)
        return fs.makeQualified(jpath).toUri()

    def exists(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def mkdirs(self, path: str) -> None:
        fs, jpath = self._fs(path)
        fs.mkdirs(jpath)

    def delete(self, path: str) -> None:
        fs, jpath = self._fs(path)
        fs.delete(jpath, True)

    def rename(self, source: str, target: str) -> None:
        """One atomic step on HDFS and local disks; False from Hadoop becomes an error."""
        fs, jsource = self._fs(source)
        if not fs.rename(jsource, self._path_class(target)):
            raise OSError(f"Could not rename {source} to {target}.")

    def touch(self, path: str) -> None:
        fs, jpath = self._fs(path)
        fs.create(jpath, True).close()

    def list(self, path: str) -> list[Entry]:
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return []
        entries = []
        for status in fs.listStatus(jpath):   # each JVM call costs a round trip: as few as possible
            path = status.getPath().toString()
            entries.append(Entry(path, path.rstrip("/").rsplit("/", 1)[-1], bool(status.isDirectory())))
        return entries

    def age(self, path: str) -> float | None:
        """Seconds since the file was last modified, or None when there is no such file."""
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return None
        return time.time() - fs.getFileStatus(jpath).getModificationTime() / 1000.0

    def is_empty_dir(self, path: str) -> bool:
        return not [e for e in self.list(path) if not e.name.startswith((".", "_"))]
