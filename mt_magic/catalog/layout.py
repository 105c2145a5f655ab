"""A store of an earlier layout, moved into its own folder when first opened.

Layout 1 kept every record in the store file; layout 2 a file per record in `tables/` beside the store
file, with the lease, mailbox, notes and history beside it too, so every store of one folder was one
store. Layout 3 keeps all of that in the store's own folder (`jsonfile.store_home`). A layout-2 store
takes what lies beside it only when no other store of that layout shares the folder: records do not
name their store, so shared records cannot be attributed, and they stay where they are, named in the
store's warnings, until a user adopts them (`mt-magic adopt`).
"""

from __future__ import annotations

import os
import shutil

from mt_magic.catalog.jsonfile import read_json

LAYOUT = 3                      # the store's layout (meta's schema_version): 3 = a folder per store
SHARED_LAYOUT = 2               # records in `tables/` beside the store file, shared by its folder's stores
META = "meta"
RECORDS = "materialized_tables"     # layout 1: every record in the store file itself
# What a layout-2 store kept beside its file, moved into its folder (history.jsonl: the oldest history).
_MOVED = ("tables", "history", ".pending", "history.jsonl")
_STORE_FILE_MAX_BYTES = 4096    # a store file of layout 2 or 3 holds only its meta


def meta_of(path: str) -> dict | None:
    """The meta of the store file at `path`, or None when it is no store of layout 2 or 3."""
    try:
        if os.path.getsize(path) > _STORE_FILE_MAX_BYTES:
            return None
        document = read_json(path)
    except (OSError, ValueError):
        return None
    meta = document.get(META, {}).get("1") if isinstance(document, dict) else None
    return meta if isinstance(meta, dict) else None


def sharing(store_path: str) -> list[str]:
    """The other stores of the folder that used its `tables/` with this one: layout 2 still, or moved
    from it without taking what was there."""
    folder, mine = os.path.split(os.path.abspath(store_path))
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name == mine or not entry.is_file():
            continue
        meta = meta_of(entry.path)
        if meta and (meta.get("schema_version") == SHARED_LAYOUT or meta.get("shared")):
            found.append(entry.name)
    return found


def legacy_records_folder(store_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(store_path)), "tables")


def move_beside_into(store_path: str, home: str) -> None:
    """What a lone layout-2 store kept beside its file, moved into its folder, entry by entry (a kill
    midway leaves each entry in one place or the other; the next open moves the rest)."""
    folder = os.path.dirname(os.path.abspath(store_path))
    for name in _MOVED:
        source = os.path.join(folder, name)
        if os.path.isdir(source):
            target = os.path.join(home, name)
            os.makedirs(target, exist_ok=True)
            for entry in os.listdir(source):
                merge_file(os.path.join(source, entry), os.path.join(target, entry))
            _remove_if_empty(source)
        elif os.path.isfile(source):
            merge_file(source, os.path.join(home, name))


def merge_file(source: str, target: str) -> None:
    """`source` moved to `target`; a history file both have is appended to the target's."""
    if os.path.exists(target) and target.endswith(".jsonl"):
        with open(source, "rb") as old, open(target, "ab") as new:
            shutil.copyfileobj(old, new)
        os.unlink(source)
    else:
        os.replace(source, target)


def _remove_if_empty(folder: str) -> None:
    try:
        os.rmdir(folder)
    except OSError:
        pass
