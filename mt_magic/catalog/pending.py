"""Work a process leaves for later, a note per item in the store's folder.

Writes in flight: a CREATE TABLE AS notes its staging and replaced names before it touches anything
and removes the note when it is done; a note whose process is known dead (this host, process gone)
is what a kill left, and the owner of the store finishes or undoes that write when it starts.
Retired folders: data a replaced or dropped table no longer reads, deleted by the owner once older
than the retention, so that a reader planned before the change can finish.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

from mt_magic.catalog.jsonfile import read_json, store_home, write_json
from mt_magic.catalog.lease import process_alive

PENDING_DIR = ".pending"
_RETIRED = "retired-"


class PendingWrites:
    def __init__(self, store_path: str) -> None:
        self.folder = os.path.join(store_home(store_path), PENDING_DIR)

    def add(self, note: dict[str, Any]) -> str:
        os.makedirs(self.folder, exist_ok=True)
        write_id = uuid.uuid4().hex
        write_json(self._path(write_id), {**note, "host": socket.gethostname(), "pid": os.getpid()},
                   durable=True)
        return write_id

    def end(self, write_id: str) -> None:
        try:
            os.unlink(self._path(write_id))
        except FileNotFoundError:
            pass

    def abandoned(self) -> list[tuple[str, dict[str, Any]]]:
        """The notes of writers known dead, with their ids."""
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if name.startswith(_RETIRED):
                continue
            note = read_json(os.path.join(self.folder, name))
            if note and note.get("host") == socket.gethostname() and not process_alive(note["pid"]):
                found.append((name.removesuffix(".json"), note))
        return found

    def retire(self, folder: str) -> None:
        os.makedirs(self.folder, exist_ok=True)
        write_json(self._path(_RETIRED + uuid.uuid4().hex), {"folder": folder, "retired_at": time.time()})

    def expired(self, retention_s: float) -> list[tuple[str, str]]:
        """Retired folders older than the retention, with their note ids (`end` them once deleted)."""
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.startswith(_RETIRED) and n.endswith(".json"))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            note = read_json(os.path.join(self.folder, name))
            if note and time.time() - note["retired_at"] >= retention_s:
                found.append((name.removesuffix(".json"), note["folder"]))
        return found

    def _path(self, write_id: str) -> str:
        return os.path.join(self.folder, write_id + ".json")
