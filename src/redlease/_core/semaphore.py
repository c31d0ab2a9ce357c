"""The counting semaphore as pure operations (the lease semaphore is ``lease_semaphore``; the
wait loop both share with the latch, ``waiting``; their arguments, ``arguments``).

Two kinds, both in Redisson's data layout so that Java and Python clients share them:

- the counting semaphore (Redisson ``RSemaphore``): the key is the name, a string holding the
  permits available now. redlease also keeps the total (set plus added) under a key of its own,
  which lets an acquire of more permits than there are at all be refused at once, and the
  statistics say how many are held. Redisson changes only the count (its ``addPermits``, its
  ``release``, which has no upper bound, and ``delete`` + ``trySetPermits``), so the total
  follows the count up wherever a script sees the count above it, and a release is never
  refused for giving back more than was taken: no permit is ever lost to a stale total. As in
  Redisson, ``add_permits`` may take permits away and ``set_permits`` may set fewer in all
  than are held: the count goes below zero until releases bring it back up (a total that
  would go below zero becomes unknown), and only a count that rose above zero is published;
- the lease semaphore (Redisson ``RPermitExpirableSemaphore``): the same counter, plus a zset
  ``{<name>}:timeout`` of permit id -> lease end (ms, server clock). A permit whose lease ran out
  is given back by the next caller, so a crashed holder's permits come back by themselves.

Every acquire, drain, add, release and "set if never set" carries a request id (or, for a
lease permit, its id; a release of several permits, one per permit) so that a request retried
after a lost reply takes, adds, gives back or sets nothing twice; setting the permits in all
is the same however often it is sent. An acquire or a drain that ends in an error with its
outcome unknown is undone by its request id (``undo_call``): its permits come back if it ran,
and a late copy of it takes none. An undo that cannot reach the server is kept and retried by
the client's watchdog (``PermitTable.undo_later``). Receipts outlive every retry and undo the
client sends (``Windows``); an undo that cannot tell whether its request ran is reported by
the shells, never counted as done.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError, ServerUnavailableError
from ..stats import SemaphoreStatistics
from . import arguments
from .keys import SemaphoreKeys
from .lock import PLACE_MS
from .receipts import Unsure, receipt_ms
from .requests import Call, Operation
from .scripts import Script
from .waiting import leave_call, wait_loop

SEMAPHORE_TRY_SET = Script.load("semaphore_try_set")
SEMAPHORE_ADD = Script.load("semaphore_add")
SEMAPHORE_SET = Script.load("semaphore_set")
SEMAPHORE_ACQUIRE = Script.load("semaphore_acquire")
SEMAPHORE_RELEASE = Script.load("semaphore_release")
SEMAPHORE_DRAIN = Script.load("semaphore_drain")
SEMAPHORE_STATUS = Script.load("semaphore_status")
SEMAPHORE_UNDO = Script.load("semaphore_undo")

SCRIPTS = (
    SEMAPHORE_TRY_SET,
    SEMAPHORE_ADD,
    SEMAPHORE_SET,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_RELEASE,
    SEMAPHORE_DRAIN,
    SEMAPHORE_STATUS,
    SEMAPHORE_UNDO,
)
"""The counting semaphore's scripts (its waiters' leave: ``waiting.SEMAPHORE_LEAVE``)."""

# reply codes (first element of the scripts' replies)
GRANTED = 1
RELEASED = 1
SHORT = 0
UNKNOWN = 0
LOST = -1
TOO_MANY = -2
NOT_SET = -3
UNDONE = -4
"""An acquire's reply: that request was given up (undone) before it reached the server."""
RELEASED_BEFORE = 2
"""A permit of a several-permit release: given back before by this same request (a retry)."""


def new_request_id() -> str:
    """A fresh request id (a semaphore request's, or a lease permit release's)."""
    return uuid.uuid4().hex


def try_set_permits(
    keys: SemaphoreKeys, permits: int, request_id: str | None = None
) -> Operation[bool]:
    """Set the permits if they were never set; ``False`` when they were. A retry of the
    request (same id) that set them answers ``True`` again."""
    request_id = request_id or new_request_id()
    reply = yield Call(
        SEMAPHORE_TRY_SET,
        (keys.name, keys.total, keys.channel, keys.receipt(request_id)),
        (permits, keys.pubsub.command, receipt_ms()),
    )
    return bool(int(reply))


def add_permits(keys: SemaphoreKeys, permits: int, request_id: str | None = None) -> Operation[int]:
    """Add ``permits`` (a negative count takes permits away, as Redisson's ``addPermits``);
    returns the permits available now. ``InvalidArgumentError`` (nothing added) when the
    available or total permits would pass ``MAX_COUNT`` (or ``-MAX_COUNT``). A retry of the
    request (same id) adds nothing twice."""
    request_id = request_id or new_request_id()
    reply = yield Call(
        SEMAPHORE_ADD,
        (keys.name, keys.total, keys.channel, keys.receipt(request_id)),
        (permits, keys.pubsub.command, receipt_ms(), arguments.MAX_COUNT),
    )
    if len(reply) > 2 and int(reply[2]) == TOO_MANY:
        raise past_bound(keys.name, f"add_permits({permits})", int(reply[0]), "added")
    return int(reply[0])


def past_bound(name: str, call: str, available: int, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"semaphore {name!r}: {call} would make more than {arguments.MAX_COUNT} permits, or fewer "
        f"than -{arguments.MAX_COUNT} ({available} free now); nothing was {what}"
    )


def set_permits(keys: SemaphoreKeys, permits: int) -> Operation[int]:
    """Make the semaphore have ``permits`` in all, held ones included; returns the permits
    available now (below zero while more are held than ``permits``). With the total unknown
    (set by a Redisson client) the available count becomes ``permits``."""
    reply = yield Call(
        SEMAPHORE_SET,
        (keys.name, keys.total, keys.channel),
        (permits, keys.pubsub.command, arguments.MAX_COUNT),
    )
    if int(reply[2]) == TOO_MANY:
        raise past_bound(keys.name, f"set_permits({permits})", int(reply[0]), "changed")
    return int(reply[0])


def drain_permits(
    keys: SemaphoreKeys,
    request_id: str,
    unsure: Unsure | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Operation[int]:
    """Take every permit free now; returns how many (a retry after a lost reply answers the
    same count: the request's receipt keeps it). ``unsure`` records its first send, for the
    undo a caller sends when this raises."""
    unsure = Unsure() if unsure is None else unsure
    unsure.sending(clock())
    reply = yield Call(SEMAPHORE_DRAIN, (keys.name, keys.receipt(request_id)), (receipt_ms(),))
    unsure.answered()
    return int(reply)


def release_call(keys: SemaphoreKeys, permits: int, request_id: str) -> Call:
    return Call(
        SEMAPHORE_RELEASE,
        (keys.name, keys.total, keys.channel, keys.receipt(request_id)),
        (permits, receipt_ms(), keys.pubsub.command),
    )


def undo_call(keys: SemaphoreKeys, permits: int, request_id: str) -> Call:
    """Give up the acquire ``request_id``: its permits come back if it was granted, and a
    copy of it that reaches the server later takes none. Safe to send any number of times."""
    return Call(
        SEMAPHORE_UNDO,
        (keys.name, keys.channel, keys.receipt(request_id)),
        (permits, receipt_ms(), keys.pubsub.command),
    )


def acquire_call(
    keys: SemaphoreKeys, owner: str, permits: int, request_id: str, register: bool
) -> Call:
    """One try; if the caller is cancelled after the server granted it, the undo gives the
    permits back."""

    def undo(reply: Any) -> Call | None:
        if int(reply[0]) == GRANTED:
            return undo_call(keys, permits, request_id)
        return None

    return Call(
        SEMAPHORE_ACQUIRE,
        (keys.name, keys.total, keys.waiters, keys.receipt(request_id)),
        (permits, owner, PLACE_MS if register else 0, receipt_ms()),
        undo=undo,
    )


def _too_many(name: str, permits: int, total: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"semaphore {name!r}: permits={permits} is more than its {total} permits in total"
    )


def acquire(
    keys: SemaphoreKeys,
    owner: str,
    *,
    permits: int,
    timeout: float | None,
    request_id: str | None = None,
    unsure: Unsure | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Operation[bool]:
    """Take ``permits`` at once, waiting up to ``timeout`` (``None``: as long as it takes).

    One request id serves every try of this call, so a try retried after a lost reply finds
    its receipt and takes nothing twice. A caller that sees this raise anything but
    ``InvalidArgumentError`` sends ``undo_call`` with that request id (the shells do), and
    ``unsure.since`` says when the first try whose outcome is unknown was sent: its undo must
    land within ``WINDOWS.unsure_for`` of it. Tries are sent again only in the first half of
    that window (``Unsure.retry_until``), and a "not granted" read after the receipt of a lost
    try may have gone proves nothing: the call then raises ``ServerUnavailableError`` (and is
    undone). ``permits=0`` succeeds at once and sends nothing (Redisson's ``tryAcquire(0)``).
    """
    if permits == 0:
        return True
    request_id = request_id or new_request_id()
    tracked = Unsure() if unsure is None else unsure

    def attempt(register: bool) -> Generator[Any, Any, tuple[bool | None, float]]:
        tracked.sending(clock())
        reply = yield acquire_call(keys, owner, permits, request_id, register)
        code = int(reply[0])
        if code == GRANTED:
            return True, 0.0
        if code == UNDONE:  # this request id was given up already: it can never be granted
            return False, 0.0
        if tracked.tries > 1 and not tracked.conclusive(clock()):
            # an earlier try's reply was lost, and its receipt may be gone by now: it may
            # have taken the permits, and this answer cannot tell
            raise ServerUnavailableError(
                f"semaphore {keys.name!r}: the outcome of a try of this acquire whose reply "
                "was lost is no longer knowable (its receipt may be gone)",
                name=keys.name,
            )
        tracked.answered()
        if code == TOO_MANY:
            raise _too_many(keys.name, permits, int(reply[2]))
        return None, math.inf

    result = yield from wait_loop(
        keys.channel,
        owner,
        leave_call(keys.waiters, owner),
        attempt,
        timeout=timeout,
        clock=clock,
        retry_until=tracked.retry_until,
    )
    return bool(result)


@dataclass(frozen=True)
class Released:
    """What a counting-semaphore release did."""

    available: int
    """Permits free after it."""
    passed: int | None = None
    """The total this release pushed the free count past (the total now follows the count:
    permits given back twice, after a failover or a restart lost an acquire, or more given
    back than were taken), else ``None``."""


def release(keys: SemaphoreKeys, *, permits: int, request_id: str) -> Operation[Released]:
    """Give back ``permits``. As in Redisson, a release may give back more than was taken
    (the total follows the count up, and ``Released.passed`` says which total it passed);
    one to a semaphore never set, or past ``MAX_COUNT``, raises ``InvalidArgumentError``."""
    reply = yield release_call(keys, permits, request_id)
    code, available = int(reply[0]), int(reply[1])
    if code == NOT_SET:
        raise InvalidArgumentError(
            f"semaphore {keys.name!r}: release(permits={permits}) gives back permits that were "
            "never taken: it has no permits set (use try_set_permits or add_permits)"
        )
    if code == TOO_MANY:
        raise InvalidArgumentError(
            f"semaphore {keys.name!r}: release(permits={permits}) would make more than "
            f"{arguments.MAX_COUNT} permits ({available} are free already)"
        )
    passed = int(reply[3]) if len(reply) > 3 else -1
    return Released(available=available, passed=None if passed < 0 else passed)


def over_total(name: str, permits: int, released: Released) -> str:
    """What a release that pushed the free count past the total says (a WARNING)."""
    return (
        f"semaphore {name!r}: release({permits}) pushed the free count to {released.available}, "
        f"past the {released.passed} permits it was set to, and its total now follows the "
        "count: permits were given back that were not taken (an acquire the server lost in "
        "a failover or a restart without persistence, then released; or a release of more "
        "than was taken). If the server lost data, set the total back with "
        f"set_permits({released.passed})"
    )


@dataclass(frozen=True)
class SemaphoreStatus:
    available: int | None
    """``None``: never set."""
    total: int | None
    waiters: int
    ttl: float | None


def status(keys: SemaphoreKeys) -> Operation[SemaphoreStatus]:
    reply = yield Call(SEMAPHORE_STATUS, (keys.name, keys.total, keys.waiters), ())
    available, total, waiters, ttl_ms = (int(v) for v in reply)
    return SemaphoreStatus(
        available=None if ttl_ms == -2 else available,
        total=None if total < 0 else max(total, available),  # (see the module's docstring)
        waiters=waiters,
        ttl=None if ttl_ms < 0 else ttl_ms / 1000,
    )


def statistics(status: SemaphoreStatus, name: str, local_waiters: int) -> SemaphoreStatistics:
    available = status.available or 0
    return SemaphoreStatistics(
        name=name,
        permits=status.total,
        available=available,
        holders=None if status.total is None else max(0, status.total - available),
        waiters=status.waiters,
        local_waiters=local_waiters,
        ttl=status.ttl,
    )
