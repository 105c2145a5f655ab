"""JSON files in the catalog store's folder, written whole or not at all (a temporary file renamed
over the old one)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

from filelock import FileLock


HOME_SUFFIX = ".d"


def store_home(store_path: str) -> str:
    """The store's own folder, named for its file (`stores/dev.json` → `stores/dev.json.d`): records,
    lease, mailbox, history, notes and default data of one store, never shared with a store beside it."""
    return os.path.abspath(store_path) + HOME_SUFFIX


def beside_store(store_path: str, name: str) -> tuple[str, FileLock]:
    """A file in the catalog store's folder, and its own lock in the store's `.locks` folder."""
    folder = store_home(store_path)
    os.makedirs(os.path.join(folder, ".locks"), exist_ok=True)
    return os.path.join(folder, name), FileLock(os.path.join(folder, ".locks", f"{name}.lock"))


def read_json(path: str) -> Any | None:
    """The file's document; None when it is missing or empty."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    return json.loads(text) if text.strip() else None


def write_json(path: str, document: Any, durable: bool = False) -> None:
    """Readers see the old document or the new one, never a torn file; `durable` also survives a
    power loss (fsync of the file and its folder), which the catalog store needs and a heartbeat not."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + "-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            # No indent: only then does json use its C encoder, several times faster.
            handle.write(json.dumps(document, sort_keys=True))
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def remove_stale_temporaries(folders: list[str], older_than_s: float, of: str | None = None) -> list[str]:
    """Temporary files a killed writer left (a write takes milliseconds: an old one is dead); `of`:
    only those of that file (a folder that holds other files too)."""
    prefix = "." + os.path.basename(of) + "-" if of else ""
    removed = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                if name.startswith(prefix) and name.endswith(".tmp") and time.time() - os.path.getmtime(path) > older_than_s:
                    os.unlink(path)
                    removed.append(path)
            except FileNotFoundError:
                pass
    return removed
