"""Versions that carry files over: a new version holding the published data's files, linked, plus new
ones — what an incremental publish of an appended change is, so that the tables reading this one see
an append (every old file still there, by its name inside the version)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mt_magic.catalog.model import MaterializedTable
from mt_magic.storage.versions import TableStorage, same_path


def version_relative(root: str) -> Callable[[str], str]:
    """A file of a table's versions named from its version folder on: the same file, carried (linked)
    into a later version, keeps its name."""
    prefix = same_path(root) + "/"

    def relative(path: str) -> str:
        same = same_path(path)
        if not same.startswith(prefix):
            return path
        _, _, inside = same[len(prefix):].partition("/")
        return inside or same[len(prefix):]
    return relative


def extended(storage: TableStorage, table: MaterializedTable, added: Iterable[str],
             rewritten: Iterable[str] = ()) -> str:
    """A new version holding the published data's files (linked, or copied where links are not
    possible) but the `rewritten` ones (their rows are in an `added` folder too), and the data files
    written to the `added` folders, moved in at the same places."""
    version = storage.new_version(table)
    published = table.storage
    inside = version_relative(published.root)
    if table.partition_keys and published.catalog_partitions:
        storage.files.mkdirs(version)
        for partition in published.partitions:
            target = f"{version}/{inside(partition.location)}"
            storage.files.mkdirs(target.rsplit("/", 1)[0])
            storage.files.link_tree(partition.location, target)
    elif storage.files.exists(published.location):
        storage.files.link_tree(published.location, version)
    else:
        storage.files.mkdirs(version)
    for path in rewritten:
        storage.files.delete(f"{version}/{inside(path)}")
    for folder in added:
        prefix = same_path(folder) + "/"
        for path in storage.files.listing(folder):
            target = f"{version}/{same_path(path)[len(prefix):]}"
            storage.files.mkdirs(target.rsplit("/", 1)[0])
            storage.files.rename(path, target)
    return version


def data_carried(storage: TableStorage, table: MaterializedTable) -> str:
    """A new version holding the published data's files alone (linked, or copied), at the same places:
    the data of a refresh that changed only what is kept beside it (its state, its partials)."""
    version = storage.new_version(table)
    inside = version_relative(table.storage.root)
    storage.files.mkdirs(version)
    for path in storage.published_files(table):
        target = f"{version}/{inside(path)}"
        storage.files.mkdirs(target.rsplit("/", 1)[0])
        storage.files.link_tree(path, target)
    return version
