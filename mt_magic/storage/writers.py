"""Who writes which version: each refresh notes `<version>.writing@<host>@<pid>` beside the version
it writes and removes the note when it is done, so that a sweep tells a write in flight (its process
lives) from what a killed writer left (its process is gone, and its version goes by age)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from typing import Any

from mt_magic.catalog.lease import process_alive

WRITER_NOTE = ".writing@"


def note_of(version: str) -> str:
    """This process's note for writing `version`."""
    return f"{version.rstrip('/')}{WRITER_NOTE}{socket.gethostname()}@{os.getpid()}"


class Writers:
    """The writers' notes among the entries of a table's folder."""

    def __init__(self, root: str, entries: Iterable[Any]) -> None:
        self._root = root.rstrip("/")
        self._by_version: dict[str, list[tuple[str, int]]] = {}
        for entry in entries:
            version, mark, writer = entry.name.partition(WRITER_NOTE)
            host, _, pid = writer.rpartition("@")
            if mark and pid.isdigit():
                self._by_version.setdefault(version, []).append((host, int(pid)))

    def versions(self) -> list[str]:
        return list(self._by_version)

    def writing(self, version_name: str) -> bool:
        """A noted writer may still be writing it: it lives, or it runs on another host (unknowable)."""
        return any(host != socket.gethostname() or process_alive(pid)
                   for host, pid in self._by_version.get(version_name, ()))

    def notes(self, version_name: str) -> list[str]:
        return [f"{self._root}/{version_name}{WRITER_NOTE}{host}@{pid}"
                for host, pid in self._by_version.get(version_name, ())]
