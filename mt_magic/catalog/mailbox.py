"""Statements a client sends to the owner of the store, and the owner's answers: files in its folder.

A client posts a request; the owner claims it by renaming it (so a client can still withdraw a
request nobody took, and then nothing happened), runs it and writes the answer. Files work wherever
the store does: one host, or a shared folder between hosts.
"""

from __future__ import annotations

import os
import uuid

from mt_magic.catalog.jsonfile import read_json, store_home, write_json

MAILBOX_DIR = ".mailbox"
_REQUEST, _TAKEN, _ANSWER = ".request", ".taken", ".answer"


class Mailbox:
    def __init__(self, store_path: str) -> None:
        self.folder = os.path.join(store_home(store_path), MAILBOX_DIR)
        os.makedirs(self.folder, exist_ok=True)

    def _path(self, request_id: str, suffix: str) -> str:
        return os.path.join(self.folder, request_id + suffix)

    # --------------------------------------------------------------- client
    def post(self, request: dict) -> str:
        request_id = uuid.uuid4().hex
        write_json(self._path(request_id, _REQUEST), request)
        return request_id

    def withdraw(self, request_id: str) -> bool:
        """Take back a request nobody claimed; False when the owner has it already."""
        try:
            os.unlink(self._path(request_id, _REQUEST))
            return True
        except FileNotFoundError:
            return False

    def taken(self, request_id: str) -> bool:
        return not os.path.exists(self._path(request_id, _REQUEST))

    def answer_of(self, request_id: str) -> dict | None:
        path = self._path(request_id, _ANSWER)
        answer = read_json(path)
        if answer is not None:
            os.unlink(path)
        return answer

    # ---------------------------------------------------------------- owner
    def take(self) -> list[tuple[str, dict]]:
        """Every waiting request, oldest first, claimed."""
        waiting = []
        with os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.name.endswith(_REQUEST):
                    waiting.append((entry.stat().st_mtime_ns, entry.name[:-len(_REQUEST)]))
        claimed = []
        for _, request_id in sorted(waiting):
            try:
                os.rename(self._path(request_id, _REQUEST), self._path(request_id, _TAKEN))
            except FileNotFoundError:
                continue      # withdrawn meanwhile
            claimed.append((request_id, read_json(self._path(request_id, _TAKEN)) or {}))
        return claimed

    def answer(self, request_id: str, answer: dict) -> None:
        write_json(self._path(request_id, _ANSWER), answer)
        os.unlink(self._path(request_id, _TAKEN))

    def clear_taken(self) -> None:
        """A new owner drops what a dead one had claimed: its client was told the outcome is unknown."""
        with os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.name.endswith(_TAKEN):
                    os.unlink(entry.path)
