"""What a client tells its listeners: one frozen ``LockEvent`` per thing that happened.

``client.add_listener(fn)`` calls ``fn(event)`` for every acquisition, release, failed
acquisition (timed out or would block), failed renewal and lost lease of that client's locks,
in the thread (or task) where it happened; the watchdog's events come from the watchdog.
A semaphore whose abandoned request (an acquire or a drain whose replies were lost) could not
be confirmed undone sends ``permits_may_stay_taken``: its permits may stay taken (a counting
semaphore's for good, a lease semaphore's until their lease ends).
A counting semaphore's release that pushed the free count past the total it was set to
(permits given back twice, typically after a failover or a restart lost an acquire: the total
now follows the count) sends ``semaphore_total_raised``.
A scheduled lock (``client.scheduled_lock``) that found its slot taken, so its job did not run,
sends ``skipped``; so does a call of an ``@exclusive(..., on_busy="skip")`` function that found its
lock busy (it returned ``None`` without running).
An asyncio task that ended while it still held a lock (it never released it) sends
``owner_ended``: the client no longer renews that hold, which runs out within its lease.
A listener must be quick and must not raise (an exception is logged and ignored).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ._shared import fork

__all__ = ["EventKind", "Listener", "LockEvent"]

EventKind = Literal[
    "acquired",
    "acquire_failed",
    "released",
    "renewal_failed",
    "lease_lost",
    "permits_may_stay_taken",
    "semaphore_total_raised",
    "skipped",
    "owner_ended",
]


@dataclass(frozen=True)
class LockEvent:
    """One thing that happened to a lock of the client: what ``client.add_listener(fn)``
    passes to ``fn``. Fields that do not apply to its ``kind`` are ``None``."""

    kind: EventKind
    """What happened: ``acquired``, ``acquire_failed``, ``released``, ``renewal_failed``,
    ``lease_lost``, ``permits_may_stay_taken``, ``semaphore_total_raised``, ``skipped`` or
    ``owner_ended``."""
    name: str
    """The lock's (or semaphore's, or scheduled job's) name."""
    owner: str | None
    """The owner id of the thread or task concerned."""
    wait: float | None = None
    """Seconds the acquire took, waiting included (``acquired``, ``acquire_failed``,
    ``skipped``)."""
    held: float | None = None
    """Seconds since the owner first took the hold (``released``, ``lease_lost``,
    ``owner_ended``)."""
    hold_count: int | None = None
    """The owner's holds after the event (``acquired``, ``released``); the holds left behind
    (``owner_ended``)."""
    fencing_token: int | None = None
    """The hold's fencing token (``acquired``, ``released``, ``lease_lost``,
    ``owner_ended``)."""
    error: BaseException | None = None
    """Why (``renewal_failed``, ``lease_lost``, ``permits_may_stay_taken``)."""
    cause: str | None = None
    """Why a hold was lost (``lease_lost``): ``expired``, ``forced``, ``server_lost`` or
    ``unknown``, as ``LeaseLostError.cause``."""


Listener = Callable[[LockEvent], None]

_log = logging.getLogger("redlease")


class Listeners:
    """A client's listeners; thread-safe to add to while events are being sent."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._listeners: tuple[Listener, ...] = ()
        fork.in_child(self._fresh_after_fork)

    def _fresh_after_fork(self) -> None:
        """In a forked child: a fresh mutex (a parent thread may have held it at the fork)."""
        self._mutex = threading.Lock()

    def add(self, listener: Listener) -> None:
        with self._mutex:
            self._listeners = (*self._listeners, listener)

    def remove(self, listener: Listener) -> None:
        with self._mutex:
            self._listeners = tuple(fn for fn in self._listeners if fn != listener)

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def send(self, event: LockEvent) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                _log.exception(
                    "redlease event listener failed on %s of lock %r", event.kind, event.name
                )
