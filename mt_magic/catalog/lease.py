"""Who owns a catalog store: the one process that schedules and runs its pipelines.

The lease is a small JSON file in the store's folder, read and written under its own file lock, so a
heartbeat never rewrites the store. The holder renews it every second; it is alive while the
heartbeat is fresh and, on this host, while its process runs (a SIGKILLed owner is dead at once).
A service may ask a kernel that owns the store to hand it over.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, replace
from enum import StrEnum

from mt_magic.catalog.jsonfile import beside_store, read_json, write_json

LEASE_FILE = "owner.json"
TTL_S = 10.0            # a holder silent this long is dead, wherever it runs
HEARTBEAT_S = 1.0


class OwnerKind(StrEnum):
    SERVICE = "service"
    KERNEL = "kernel"


@dataclass(frozen=True)
class Holder:
    token: str
    kind: OwnerKind
    host: str
    pid: int
    application_id: str
    heartbeat: float            # epoch seconds
    started: float
    handover_to: str | None = None      # the token of a service that asked for the lease
    released_at: float | None = None    # handed over: the lease waits for that service a while

    @classmethod
    def me(cls, kind: OwnerKind, application_id: str) -> Holder:
        now = time.time()
        return cls(uuid.uuid4().hex, kind, socket.gethostname(), os.getpid(), application_id, now, now)

    def alive(self, now: float | None = None) -> bool:
        if self.released_at is not None or (now or time.time()) - self.heartbeat > TTL_S:
            return False
        return self.host != socket.gethostname() or process_alive(self.pid)

    @property
    def text(self) -> str:
        return f"{self.kind} pid {self.pid} on {self.host} ({self.application_id})"


def process_alive(pid: int) -> bool:
    """The process runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class Lease:
    """The lease of the store at `store_path`."""

    def __init__(self, store_path: str) -> None:
        self.path, self._lock = beside_store(store_path, LEASE_FILE)

    def holder(self) -> Holder | None:
        """The last holder written, alive or not."""
        doc = read_json(self.path)
        return None if doc is None else Holder(**{**doc, "kind": OwnerKind(doc["kind"])})

    def owner(self) -> Holder | None:
        """The holder if it is alive."""
        holder = self.holder()
        return holder if holder is not None and holder.alive() else None

    def acquire(self, me: Holder) -> Holder | None:
        """Take the lease unless a live process holds it; returns that process, or None when taken."""
        with self._lock:
            current = self.holder()
            if current is not None and current.token != me.token and (current.alive() or (
                    current.handover_to not in (None, me.token) and current.released_at is not None
                    and time.time() - current.released_at < TTL_S)):
                return current       # alive, or handed over to another that is on its way
            self._write(replace(me, heartbeat=time.time(), handover_to=None, released_at=None))
            return None

    def renew(self, me: Holder) -> Holder | None:
        """The heartbeat; None when the lease is no longer ours (taken over after a long pause)."""
        with self._lock:
            current = self.holder()
            if current is None or current.token != me.token:
                return None
            renewed = replace(current, heartbeat=time.time())
            self._write(renewed)
            return renewed

    def ask_handover(self, service: Holder) -> Holder | None:
        """A service asks the live kernel that holds the lease to hand it over; returns that kernel."""
        with self._lock:
            current = self.owner()
            if current is not None and current.kind is OwnerKind.KERNEL and current.handover_to is None:
                self._write(replace(current, handover_to=service.token))
            return current

    def release(self, me: Holder) -> None:
        """Let go: anyone may take the lease now, or, when a service asked for it, that service."""
        with self._lock:
            current = self.holder()
            if current is None or current.token != me.token:
                return
            if current.handover_to is None:
                os.unlink(self.path)
            else:
                self._write(replace(current, released_at=time.time()))

    def _write(self, holder: Holder) -> None:
        write_json(self.path, asdict(holder))
