"""This gateway's part in its catalog store: the owner, which runs the pipelines and the statements
clients send it, or a client, which sends its statements to the owner and takes over when it dies.

Three threads, so that nothing long (a restore, a statement) ever delays a heartbeat: one renews the
lease every second while this process holds it; one, while it does not, follows the store
(`on_store_change`) and takes the lease when the owner is gone; one answers the mailbox every 100 ms
once this gateway runs the pipelines (role OWNER).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from enum import StrEnum

from mt_magic.catalog.lease import HEARTBEAT_S, Holder, Lease, OwnerKind
from mt_magic.catalog.mailbox import Mailbox
from mt_magic.errors import MaterializedTableError

log = logging.getLogger(__name__)

POLL_S = 0.1
CLIENT_CHECK_S = 2.0
HANDOVER_WAIT_S = 30.0


class Role(StrEnum):
    OWNER = "owner"
    CLIENT = "client"


class OwnershipError(MaterializedTableError):
    """The store's owner cannot be reached, or will not let go."""


class Ownership:
    def __init__(self, store_path: str, me: Holder, *, become_owner: Callable[[], None],
                 become_client: Callable[[], None], serve: Callable[[dict], dict],
                 on_store_change: Callable[[], None], store_stamp: Callable[[], Hashable]) -> None:
        self.me = me
        self.lease = Lease(store_path)
        self.mailbox = Mailbox(store_path)
        self._store_path = store_path
        self._stamp = store_stamp
        self._become_owner = become_owner
        self._become_client = become_client
        self._serve = serve
        self._on_store_change = on_store_change
        self.role = Role.CLIENT
        self._holding = False          # the lease is ours (heartbeats), before and while role is OWNER
        self._stop = threading.Event()
        self._handing_over = threading.Event()
        self._threads: list[threading.Thread] = []
        self._store_stamp: Hashable = None

    # ---------------------------------------------------------------- start
    def start(self) -> None:
        """Take the lease if nobody live holds it (a service asks a kernel owner to hand it over, and
        refuses to run beside another service); then watch in the background."""
        holder = self.lease.acquire(self.me)
        if holder is not None and self.me.kind is OwnerKind.SERVICE:
            holder = self._handover(holder)
        self._holding = holder is None
        self._store_stamp = self._stamp()
        self._threads = [threading.Thread(target=self._guarded, args=(loop,), name=f"mt_magic-{name}", daemon=True)
                         for name, loop in (("lease", self._lease_step), ("watch", self._watch_step),
                                            ("mailbox", self._mailbox_step))]
        for thread in self._threads:
            thread.start()
        if self._holding:
            self._take()

    def _take(self) -> None:
        self.mailbox.clear_taken()
        self._become_owner()
        self.role = Role.OWNER

    def _handover(self, holder: Holder) -> Holder | None:
        if holder.kind is OwnerKind.SERVICE:
            raise OwnershipError(f"The catalog store {self._store_path} is owned by a running {holder.text}; "
                                 "stop it first (one service per store).")
        log.info("Asking %s to hand over the catalog store", holder.text)
        self.lease.ask_handover(self.me)
        deadline = time.monotonic() + HANDOVER_WAIT_S
        while time.monotonic() < deadline:
            holder = self.lease.acquire(self.me)
            if holder is None:
                return None
            time.sleep(POLL_S)
        raise OwnershipError(f"The {holder.text} that owns the catalog store did not hand it over within "
                             f"{HANDOVER_WAIT_S:.0f} s.")

    # ----------------------------------------------------------------- loop
    def _guarded(self, step: Callable[[], float]) -> None:
        """Run `step` until stopped; it returns the seconds to wait before the next run."""
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = step()
            except Exception:   # noqa: BLE001 - the watcher must outlive any one failure
                log.exception("Catalog store ownership step failed")
                wait = HEARTBEAT_S

    def _lease_step(self) -> float:
        if self._holding:
            self._beat()
        return HEARTBEAT_S

    def _watch_step(self) -> float:
        if not self._holding:
            self._follow()
        return CLIENT_CHECK_S

    def _mailbox_step(self) -> float:
        if self.role is Role.OWNER and not self._handing_over.is_set():
            for request_id, request in self.mailbox.take():
                self.mailbox.answer(request_id, self._serve(request))
        return POLL_S

    def _beat(self) -> None:
        renewed = self.lease.renew(self.me)
        if self._handing_over.is_set():
            return
        if renewed is None:
            log.warning("Lost the catalog store's lease; this process is now a client")
            self._demote()
        elif renewed.handover_to is not None:
            # The pipelines stop after the statements running here end; heartbeats go on meanwhile.
            self._handing_over.set()
            threading.Thread(target=self._hand_over, name="mt_magic-handover", daemon=True).start()

    def _hand_over(self) -> None:
        log.info("Handing the catalog store over to a service")
        self._demote()
        self.lease.release(self.me)
        self._holding = False
        self._handing_over.clear()

    def _demote(self) -> None:
        self.role = Role.CLIENT     # statements from here on go to the next owner
        self._become_client()
        self._store_stamp = self._stamp()
        if not self._handing_over.is_set():
            self._holding = False

    def _follow(self) -> None:
        if self.lease.owner() is None and self.lease.acquire(self.me) is None:
            log.info("The catalog store had no live owner; this process takes it over")
            self._holding = True
            self._take()
            return
        stamp = self._stamp()
        if stamp != self._store_stamp:
            self._store_stamp = stamp
            self._on_store_change()

    # --------------------------------------------------------------- client
    def send(self, request: dict, take_timeout_s: float) -> dict:
        """A statement for the owner; its answer once run. Withdrawn unchanged if nobody takes it."""
        request_id = self.mailbox.post(request)
        deadline = time.monotonic() + take_timeout_s
        while True:
            answer = self.mailbox.answer_of(request_id)
            if answer is not None:
                return answer
            owner = self.lease.owner()
            if not self.mailbox.taken(request_id):
                if (owner is None or time.monotonic() > deadline) and self.mailbox.withdraw(request_id):
                    who = owner.text if owner else "no live owner"
                    raise OwnershipError(f"The owner of the catalog store ({who}) did not take the statement "
                                         f"within {take_timeout_s:.0f} s; nothing was changed.")
            elif owner is None:
                raise OwnershipError("The owner of the catalog store stopped while running the statement; "
                                     "its outcome is unknown (DESCRIBE or SHOW tells).")
            time.sleep(0.02)

    def owner(self) -> Holder | None:
        return self.me if self.role is Role.OWNER else self.lease.owner()

    # ----------------------------------------------------------------- stop
    def stop(self) -> None:
        """No more heartbeats, takeovers or answers; the lease stays until `release`."""
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def release(self) -> None:
        if self._holding:
            self.lease.release(self.me)
