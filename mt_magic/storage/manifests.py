"""The manifest of the files each source had when the published data was computed (path, size,
modification time), from which a refresh tells what each source did since (`refresh/changes`).

A table maintained from a hidden state (an aggregate's partials per group) names that state's folder,
schema and format in the same manifest, so data, state and files read are published together.

A manifest lies beside the table's data, under `<root>/_manifests/` (a name Spark's readers skip),
named by the digests of the snapshot the catalog record keeps: the record says which manifest is
the published one, and the catalog document stays small however many files the sources hold. Only
refreshes read manifests, under the table's lock; the ones the record no longer names are deleted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mt_magic.catalog.model import Storage
from mt_magic.incremental.provenance import Provenance
from mt_magic.spark.files import Files, Listing
from mt_magic.spark.frames import Fingerprint

MANIFESTS_DIR = "_manifests"
CARRIED = "__mt_state"      # the prefix of a state's columns written in the data's own files


def manifest_name(snapshot: dict[str, dict]) -> str:
    """The name of the manifest of a snapshot: its sources' digests, hashed."""
    text = "\n".join(f"{source}\t{facts.get('digest')}" for source, facts in sorted(snapshot.items()))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20] + ".json"


@dataclass(frozen=True)
class KeptState:
    """What the manifest records of a provenance state."""

    source: str
    provenance: Provenance
    folder: str
    schema: str             # the state's columns but the partition (JSON)
    previous: dict[str, str] = field(default_factory=dict)   # a small source → its content then (a folder)

    def document(self) -> dict[str, Any]:
        return {"source": self.source, **_provenance_document(self.provenance),
                "folder": self.folder, "schema": self.schema, "previous": self.previous}

    def fits(self, source: str, provenance: Provenance, columns: list[str]) -> bool:
        """Kept for this source and column, with the columns the rule's state has now."""
        return (self.source, self.provenance) == (source, provenance) and \
            [f["name"] for f in json.loads(self.schema)["fields"]] == columns


@dataclass(frozen=True)
class KeptRows:
    """What the manifest records of a linear table's rows by source partition: the names of the data
    files (in the version's folder) each partition's rows are in, no file holding two partitions'; and,
    of the partitions a write of their own (or an append to one) gave it, the rows' fingerprint, which
    tells a rewrite of the same rows (a compaction) without reading them again."""

    source: str
    provenance: Provenance
    files: dict[str, tuple[str, ...]]
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        return {"source": self.source, **_provenance_document(self.provenance),
                "files": {partition: list(names) for partition, names in sorted(self.files.items())},
                "fingerprints": {partition: list(found) for partition, found in sorted(self.fingerprints.items())}}

    def fits(self, source: str, provenance: Provenance) -> bool:
        return (self.source, self.provenance) == (source, provenance)


def _provenance_document(provenance: Provenance) -> dict[str, Any]:
    paired = provenance.paired
    return {"occurrence": provenance.occurrence, "column": provenance.column,
            "paired": [paired.occurrence, paired.column] if paired is not None else None}


def read_kept(document: dict[str, Any] | None) -> KeptState | KeptRows | None:
    """The provenance a manifest records, of either kind."""
    if not document:
        return None
    paired = document.get("paired")
    provenance = Provenance(int(document["occurrence"]), document["column"],
                            Provenance(int(paired[0]), paired[1]) if paired else None)
    if "files" in document:
        return KeptRows(document["source"], provenance,
                        {partition: tuple(names) for partition, names in document["files"].items()},
                        {partition: tuple(found) for partition, found in (document.get("fingerprints") or {}).items()})
    return KeptState(document["source"], provenance, document["folder"], document["schema"],
                     dict(document.get("previous") or {}))


@dataclass(frozen=True)
class Manifest:
    listings: dict[str, Listing | None]     # per source, the files the published data read
    state: str | None = None                # the hidden state's folder
    state_schema: str | None = None         # its schema (JSON), read without asking the files
    state_format: str = "parquet"           # the format its files are written in
    kept: KeptState | KeptRows | None = None    # an aggregate's partials, or a linear table's rows, by
    # source partition

    @cached_property
    def state_fields(self) -> tuple[dict, ...]:
        """The state's fields, from its schema (parsed once per manifest)."""
        return tuple(json.loads(self.state_schema)["fields"]) if self.state_schema else ()

    @property
    def state_columns(self) -> tuple[str, ...]:
        return tuple(f["name"] for f in self.state_fields)

    @property
    def hidden_columns(self) -> int:
        """How many of a carried state's columns the data's files hold beside the table's own (the
        others are read from the table's columns)."""
        return sum(1 for f in self.state_fields if "column" not in (f.get("metadata") or {}))

    @property
    def carried(self) -> bool:
        """The state's columns are in the data's files (its folder is the data's version)."""
        return any(name.startswith(CARRIED) for name in self.state_columns)

    @property
    def merged_from_partials(self) -> bool:
        """No state by group was written: an aggregate merges it from its partials kept by source
        partition as it reads them (`refresh.kept_partials`)."""
        return self.state is None and self.state_schema is not None and isinstance(self.kept, KeptState)

    @property
    def state_folder(self) -> str | None:
        """The folder the state is read from: its own, or the partials it is merged from."""
        return self.kept.folder if self.merged_from_partials else self.state

    def state_paths(self, published: Storage) -> list[str]:
        """Where the state's files are: a state in the data's files is the published data, whose
        partitions (where the catalog holds them) lie in the versions that last wrote them."""
        if self.carried and published.partitions:
            return [p.location for p in published.partitions]
        return [self.state_folder] if self.state_folder else []


class Manifests:
    def __init__(self, files: Files) -> None:
        self.files = files

    def write(self, root: str, snapshot: dict[str, dict], manifest: Manifest) -> None:
        """The listings the snapshot was taken from, before the record names the snapshot."""
        folder = f"{root.rstrip('/')}/{MANIFESTS_DIR}"
        self.files.mkdirs(folder)
        sources = {source: None if listing is None else {p: list(f) for p, f in sorted(listing.items())}
                   for source, listing in manifest.listings.items()}
        document = {"sources": sources, "state": manifest.state, "state_schema": manifest.state_schema,
                    "state_format": manifest.state_format,
                    "provenance": manifest.kept.document() if manifest.kept else None}
        self.files.write_text(f"{folder}/{manifest_name(snapshot)}", json.dumps(document, separators=(",", ":")))

    def read(self, root: str, snapshot: dict[str, dict]) -> Manifest | None:
        """The listings behind the snapshot the record names; None when there are none to read (a
        table published before manifests, or a manifest lost): its sources are UNKNOWN."""
        if not snapshot:
            return None
        text = self.files.read_text(f"{root.rstrip('/')}/{MANIFESTS_DIR}/{manifest_name(snapshot)}")
        if text is None:
            return None
        try:
            document = json.loads(text)
        except ValueError:
            return None
        if "sources" not in document:         # written before states were kept: the listings alone
            document = {"sources": document}
        return Manifest({source: None if files is None else {p: (int(f[0]), int(f[1])) for p, f in files.items()}
                         for source, files in document["sources"].items()},
                        document.get("state"), document.get("state_schema"),
                        document.get("state_format", "parquet"), read_kept(document.get("provenance")))

    def keep_only(self, root: str, snapshot: dict[str, dict]) -> None:
        """Every manifest but the snapshot's, deleted (the record no longer names them)."""
        keep = manifest_name(snapshot) if snapshot else None
        for entry in self.files.list(f"{root.rstrip('/')}/{MANIFESTS_DIR}"):
            if entry.name != keep:
                self.files.delete(entry.path)
