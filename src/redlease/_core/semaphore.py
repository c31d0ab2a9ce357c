"""Semaphores as pure operations, and the bounded wait loop they share with the latch.

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
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import InvalidArgumentError, LeaseLostError, LossCause, ServerUnavailableError
from ..stats import SemaphoreStatistics
from . import arguments
from .backoff import LateGrants, Outage
from .keys import (
    CLASSIC,
    PubSub,
    hash_tag,
    redisson_prefixed,
    redisson_suffixed,
    same_slot_key,
)
from .lock import OUTAGE_TOLERANCE, PLACE_MS, RECHECK, drift, to_ms
from .requests import Call, Operation, Sleep, Subscribe, WaitWake
from .scripts import Script

R = TypeVar("R")


@dataclass(frozen=True)
class Windows:
    """How long a request whose outcome is not known stays resolvable, in one place.

    A request (an acquire, a drain, a release, an add, a count-down...) leaves a receipt on
    the server when it runs, so that a retry or an undo of it is recognised. The client sends
    retries and undos of a request only within ``unsure_for`` seconds of its FIRST send, and
    every receipt lives ``receipt_ms``: ``unsure_for`` plus ``margin`` (a retry or undo still
    on its way at the end of the window, the server's clock running faster than the
    client's). Since a request runs after it is sent, its receipt outlives every retry and
    undo the client sends of it. Tests lower these through ``WINDOWS``; everything reads it
    when it needs it.
    """

    unsure_for: float = 45.0
    """Seconds after the first send of a request during which it may be sent again or undone."""
    margin: float = 15.0
    """How much longer than ``unsure_for`` a receipt lives."""

    @property
    def receipt_ms(self) -> int:
        """How long a receipt (or an undo's tombstone) lives on the server, ms."""
        return round((self.unsure_for + self.margin) * 1000)

    @property
    def conclusive_for(self) -> float:
        """How long after a request's first send a reply read by the client still proves what
        the receipt says: "no receipt" then means the request never ran (or was undone). The
        receipt's life less the drift allowance (the server's clock may run faster)."""
        life = self.receipt_ms / 1000
        return life - drift(life)


WINDOWS = Windows()
"""The windows in force (production values; a test may replace it)."""


def receipt_ms() -> int:
    """How long a receipt is kept, ms (``WINDOWS.receipt_ms``): what every script is sent."""
    return WINDOWS.receipt_ms


@dataclass
class Unsure:
    """When a request whose outcome is not known was first sent (client clock), shared by
    the operation that sends it and the shell that undoes it. ``since`` is ``None`` while
    every try sent has been answered; it is set (before the send) by the first try whose
    reply has not come, and cleared by a reply that settles the outcome."""

    since: float | None = None
    tries: int = 0
    """Tries sent since ``since`` (the first included)."""

    def sending(self, now: float) -> None:
        if self.since is None:
            self.since = now
        self.tries += 1

    def answered(self) -> None:
        self.since, self.tries = None, 0

    def retry_until(self) -> float:
        """The latest time a try of the request may be sent again (``inf``: nothing unknown):
        the first half of its window, so that its undo has the other half at least."""
        return math.inf if self.since is None else self.since + WINDOWS.unsure_for / 2

    def conclusive(self, now: float) -> bool:
        """Whether a reply read at ``now`` still proves what a receipt of this request says."""
        return self.since is None or now - self.since <= WINDOWS.conclusive_for


BATCH = 256
"""Permits of one semaphore renewed by one script call."""

SEMAPHORE_TRY_SET = Script.load("semaphore_try_set")
SEMAPHORE_ADD = Script.load("semaphore_add")
SEMAPHORE_SET = Script.load("semaphore_set")
SEMAPHORE_ACQUIRE = Script.load("semaphore_acquire")
SEMAPHORE_RELEASE = Script.load("semaphore_release")
SEMAPHORE_DRAIN = Script.load("semaphore_drain")
SEMAPHORE_STATUS = Script.load("semaphore_status")
SEMAPHORE_LEAVE = Script.load("semaphore_leave")
SEMAPHORE_UNDO = Script.load("semaphore_undo")
LEASE_SEMAPHORE_TRY_SET = Script.load("lease_semaphore_try_set")
LEASE_SEMAPHORE_ACQUIRE = Script.load("lease_semaphore_acquire")
LEASE_SEMAPHORE_RELEASE = Script.load("lease_semaphore_release")
LEASE_SEMAPHORE_RENEW = Script.load("lease_semaphore_renew")
LEASE_SEMAPHORE_STATUS = Script.load("lease_semaphore_status")
LEASE_SEMAPHORE_ADD = Script.load("lease_semaphore_add")
LEASE_SEMAPHORE_SET = Script.load("lease_semaphore_set")
LEASE_SEMAPHORE_RELEASE_MANY = Script.load("lease_semaphore_release_many")
LEASE_SEMAPHORE_UPDATE = Script.load("lease_semaphore_update")
LEASE_SEMAPHORE_EXPIRE = Script.load("lease_semaphore_expire")

SCRIPTS = (
    SEMAPHORE_TRY_SET,
    SEMAPHORE_ADD,
    SEMAPHORE_SET,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_RELEASE,
    SEMAPHORE_DRAIN,
    SEMAPHORE_STATUS,
    SEMAPHORE_LEAVE,
    SEMAPHORE_UNDO,
    LEASE_SEMAPHORE_TRY_SET,
    LEASE_SEMAPHORE_ACQUIRE,
    LEASE_SEMAPHORE_RELEASE,
    LEASE_SEMAPHORE_RENEW,
    LEASE_SEMAPHORE_STATUS,
    LEASE_SEMAPHORE_ADD,
    LEASE_SEMAPHORE_SET,
    LEASE_SEMAPHORE_RELEASE_MANY,
    LEASE_SEMAPHORE_UPDATE,
    LEASE_SEMAPHORE_EXPIRE,
)

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

MAX_AT_ONCE = 10_000
"""The most permits one lease-semaphore call takes or gives back by id (``acquire_many``,
``release_many``): each id travels in the one request."""


# --- arguments ------------------------------------------------------------------------------


def primitive_name(name: object, what: str) -> str:
    """A non-empty name whose braces, if any, form a hash tag (so every key shares its slot)."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what} name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError(f"{what} name must not be empty")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{what} name {name!r} is not valid text (UTF-8)") from None
    if ("{" in name and hash_tag(name) == name) or ("}" in name and "{" not in name):
        # a '}' alone would end the hash tag Redisson's key names wrap the name in: those
        # keys would hash to another slot than the name
        raise InvalidArgumentError(
            f"{what} name {name!r} has braces that do not form a hash tag; use '{{tag}}' or none"
        )
    return name


def positive_int(value: object, what: str) -> int:
    """``value`` as an int from 1 to ``MAX_COUNT``; ``InvalidArgumentError`` naming ``what``
    otherwise."""
    return arguments.count(value, what)


def permits_arg(value: object, what: str = "permits") -> int:
    """Permits to take or give back: an int from 0 (nothing, at once, as Redisson's
    ``tryAcquire(0)`` and ``release(0)``) to ``MAX_COUNT``."""
    return arguments.count(value, what, minimum=0)


def delta_arg(value: object, what: str = "permits") -> int:
    """Permits to add (Redisson's ``addPermits``): an int from ``-MAX_COUNT`` to ``MAX_COUNT``;
    a negative one takes permits away, 0 changes no count."""
    return arguments.count(value, what, minimum=-arguments.MAX_COUNT)


def many_arg(value: object, what: str = "permits") -> int:
    """How many lease permits one call takes: an int from 0 to ``MAX_AT_ONCE``."""
    count = arguments.count(value, what, minimum=0)
    if count > MAX_AT_ONCE:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_AT_ONCE} (permits taken by one call), got {count}"
        )
    return count


def permit_ids(values: object) -> list[str]:
    """Permit ids given back together: a list (or other iterable, not a str) of at most
    ``MAX_AT_ONCE`` ids as ``acquire`` returns them, no two alike."""
    if isinstance(values, str | bytes | bytearray) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"permit_ids must be a list of permit ids, got {type(values).__name__}"
        )
    ids = []
    for value in values:
        ids.append(permit_id(value))
        if len(ids) > MAX_AT_ONCE:
            raise InvalidArgumentError(
                f"permit_ids must hold at most {MAX_AT_ONCE} ids (given back by one call)"
            )
    seen: set[str] = set()
    for permit in ids:
        if permit in seen:
            raise InvalidArgumentError(f"permit_ids names a permit twice: {permit}")
        seen.add(permit)
    return ids


def wait_timeout(value: object) -> float | None:
    """A wait's ``timeout``: ``None`` (as long as it takes) or seconds >= 0 (0: try once),
    however long but finite."""
    return arguments.wait(value, "timeout", zero=True)


def lease_seconds(value: object) -> float:
    """A lease: seconds from ``MIN_LEASE`` to ``MAX_LEASE`` (``timedelta`` accepted)."""
    return arguments.lease(value, "lease")


def expiry_seconds(value: object) -> float:
    """A time to live for a primitive's keys: seconds ``> 0`` (sent in whole ms, at least 1)
    up to ``MAX_LEASE`` (``timedelta`` accepted)."""
    return arguments.duration(value, "seconds")


def permit_id(value: object) -> str:
    """A permit id as ``acquire`` returns it: 32 lowercase hex digits (16 bytes, as Redisson)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"permit_id must be a str, got {type(value).__name__}")
    text = value.lower()
    if len(text) != 32 or any(c not in "0123456789abcdef" for c in text):
        raise InvalidArgumentError(
            f"permit_id must be 32 hex digits as returned by acquire(), got {value!r}"
        )
    return text


def new_permit_id() -> str:
    """A fresh permit id: 16 random bytes in hex (Redisson's format)."""
    return uuid.uuid4().hex


def new_request_id() -> str:
    return uuid.uuid4().hex


# --- keys -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SemaphoreKeys:
    """The keys and channel of one counting semaphore (Redisson RSemaphore layout)."""

    name: str
    channel: str
    total: str
    waiters: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    """How changes publish on ``channel`` (the client's; see ``PubSub``)."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> SemaphoreKeys:
        return cls(
            name=name,
            channel=redisson_prefixed("redisson_sc", name),
            total=same_slot_key(name, "redlease:sem-total:"),
            waiters=same_slot_key(name, "redlease:sem-waiters:"),
            receipt_prefix=same_slot_key(name, "redlease:sem-receipt:", ":"),
            pubsub=pubsub,
        )

    def receipt(self, request_id: str) -> str:
        return self.receipt_prefix + request_id


@dataclass(frozen=True)
class LeaseSemaphoreKeys:
    """The keys and channel of one lease semaphore (Redisson RPermitExpirableSemaphore layout)."""

    name: str
    channel: str
    leases: str
    waiters: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    """How changes publish on ``channel`` (the client's; see ``PubSub``)."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> LeaseSemaphoreKeys:
        return cls(
            name=name,
            channel=redisson_prefixed("redisson_sc", name),
            leases=redisson_suffixed(name, "timeout"),
            waiters=same_slot_key(name, "redlease:sem-waiters:"),
            receipt_prefix=same_slot_key(name, "redlease:sem-receipt:", ":"),
            pubsub=pubsub,
        )

    def receipt(self, request_id: str) -> str:
        return self.receipt_prefix + request_id


# --- the wait loop shared by semaphores and the latch ---------------------------------------


def wait_loop(
    channel: str,
    owner: str,
    leave: Call | None,
    attempt: Callable[[bool], Generator[Any, Any, tuple[R | None, float]]],
    *,
    timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
    retry_until: Callable[[], float] | None = None,
) -> Operation[R | None]:
    """Try, and while time is left wait for a wake-up and try again; ``None`` on timeout.

    ``attempt(register)`` is one try: it returns the result (``None``: not yet) and how long
    until a re-check is worthwhile anyway (``math.inf``: only a wake-up helps; 0: at once).
    An attempt that cannot succeed however often it is sent paces itself (see
    ``lease_acquire``). Listening
    starts before the first try when the client already listens on ``channel``, else after
    the first failed try, which is then repeated at once (a wake-up between the two would be
    missed). Every wait is bounded by the hint, our own deadline and ``RECHECK``, so a lost
    message costs at most ``RECHECK``. A waiter that has listened rides out a server outage of
    up to ``OUTAGE_TOLERANCE``, but never sends a try after ``retry_until()`` (a request whose
    outcome is unknown past its window: see ``Windows``). ``timeout=0`` tries once. Giving up
    runs ``leave``.
    """
    deadline = None if timeout is None else clock() + timeout
    blocking = timeout is None or timeout > 0
    subscribed = bool(blocking and (yield Subscribe(channel, owner, leave, True)))
    outage = Outage(clock, deadline, OUTAGE_TOLERANCE)
    while True:
        try:
            result, hint = yield from attempt(blocking)
        except ServerUnavailableError:
            pause = outage.failed(listening=subscribed)
            if pause is None or (retry_until is not None and clock() + pause >= retry_until()):
                raise
            yield Sleep(pause)
            continue
        outage.ended()
        if result is not None:
            return result
        if not blocking:
            return None
        remaining = math.inf if deadline is None else deadline - clock()
        if remaining <= 0:
            if leave is not None:
                yield leave
            return None
        if not subscribed:
            yield Subscribe(channel, owner, leave)  # listens, or raises
            subscribed = True
            continue
        yield WaitWake(max(0.0, min(remaining, hint, RECHECK)))


def leave_call(waiters: str, owner: str) -> Call:
    """A waiter drops its registration (it gave up)."""
    return Call(SEMAPHORE_LEAVE, (waiters,), (owner,))


# --- the counting semaphore -----------------------------------------------------------------


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
        raise _past_bound(keys.name, f"add_permits({permits})", int(reply[0]), "added")
    return int(reply[0])


def _past_bound(name: str, call: str, available: int, what: str) -> InvalidArgumentError:
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
        raise _past_bound(keys.name, f"set_permits({permits})", int(reply[0]), "changed")
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


# --- the lease semaphore --------------------------------------------------------------------


@dataclass(frozen=True)
class Granted:
    """A permit just granted: its id and the lease left when the server granted it."""

    permit_id: str
    ttl: float
    requested_at: float
    more: tuple[str, ...] = ()
    """The other permits granted with it, under the same lease (``acquire_many``)."""

    @property
    def ids(self) -> list[str]:
        return [self.permit_id, *self.more]

    def each(self) -> list[Granted]:
        """One ``Granted`` per permit (the client records each on its own)."""
        return [Granted(p, self.ttl, self.requested_at) for p in self.ids]


def lease_try_set_permits(
    keys: LeaseSemaphoreKeys, permits: int, request_id: str | None = None
) -> Operation[bool]:
    """Set the permits if they were never set; ``False`` when they were. A retry of the
    request (same id) that set them answers ``True`` again."""
    request_id = request_id or new_request_id()
    reply = yield Call(
        LEASE_SEMAPHORE_TRY_SET,
        (keys.name, keys.leases, keys.channel, keys.receipt(request_id)),
        (permits, keys.pubsub.command, receipt_ms()),
    )
    return bool(int(reply))


def lease_release_call(keys: LeaseSemaphoreKeys, permit: str, request_id: str) -> Call:
    return Call(
        LEASE_SEMAPHORE_RELEASE,
        (keys.name, keys.leases, keys.channel, keys.receipt(request_id)),
        (bytes.fromhex(permit), receipt_ms(), keys.pubsub.command),
    )


def lease_add_permits(
    keys: LeaseSemaphoreKeys, permits: int, request_id: str | None = None
) -> Operation[int]:
    """Add ``permits`` (a negative count takes permits away, as Redisson's ``addPermits``);
    returns the permits available now. A retry of the request (same id) adds nothing twice."""
    request_id = request_id or new_request_id()
    reply = yield Call(
        LEASE_SEMAPHORE_ADD,
        (keys.name, keys.channel, keys.receipt(request_id)),
        (permits, keys.pubsub.command, receipt_ms(), arguments.MAX_COUNT),
    )
    if int(reply[1]) == TOO_MANY:
        raise _past_bound(keys.name, f"add_permits({permits})", int(reply[0]), "added")
    return int(reply[0])


def lease_set_permits(keys: LeaseSemaphoreKeys, permits: int) -> Operation[int]:
    """Make the semaphore have ``permits`` in all, leased ones included (Redisson's
    ``setPermits``); returns the permits available now (below zero while more are leased)."""
    reply = yield Call(
        LEASE_SEMAPHORE_SET,
        (keys.name, keys.leases, keys.channel),
        (permits, keys.pubsub.command, arguments.MAX_COUNT),
    )
    if int(reply[1]) == TOO_MANY:
        raise _past_bound(keys.name, f"set_permits({permits})", int(reply[0]), "changed")
    return int(reply[0])


def release_many_call(
    keys: LeaseSemaphoreKeys,
    permits: Sequence[str],
    request_ids: Sequence[str],
    *,
    all_or_none: bool = True,
) -> Call:
    """Give back ``permits`` (each with the request id of its release, whose receipt makes a
    retry change nothing): all or none, or with ``all_or_none=False`` whichever are held."""
    assert len(permits) == len(request_ids)
    return Call(
        LEASE_SEMAPHORE_RELEASE_MANY,
        (keys.name, keys.leases, keys.channel, *(keys.receipt(r) for r in request_ids)),
        (
            receipt_ms(),
            keys.pubsub.command,
            "1" if all_or_none else "0",
            *(bytes.fromhex(p) for p in permits),
        ),
    )


def give_back_call(keys: LeaseSemaphoreKeys, permits: Sequence[str]) -> Call:
    """Give back the permits of an acquire that is abandoned (or whose grant came too late),
    whichever of them are held. Safe to send any number of times."""
    if len(permits) == 1:
        return lease_release_call(keys, permits[0], new_request_id())
    requests = [new_request_id() for _ in permits]
    return release_many_call(keys, permits, requests, all_or_none=False)


def lease_acquire_call(
    keys: LeaseSemaphoreKeys,
    owner: str,
    permit: str,
    lease: float,
    register: bool,
    more: Sequence[str] = (),
) -> Call:
    """One try for ``permit`` (and ``more``, all under one lease, all or none); a caller
    cancelled after the grant gives them back (undo)."""

    def undo(reply: Any) -> Call | None:
        if int(reply[0]) == GRANTED:
            return give_back_call(keys, (permit, *more))
        return None

    return Call(
        LEASE_SEMAPHORE_ACQUIRE,
        (keys.name, keys.leases, keys.channel, keys.waiters),
        (
            bytes.fromhex(permit),
            to_ms(lease),
            owner,
            PLACE_MS if register else 0,
            keys.pubsub.command,
            *(bytes.fromhex(p) for p in more),
        ),
        undo=undo,
    )


def lease_acquire(
    keys: LeaseSemaphoreKeys,
    owner: str,
    *,
    lease: float,
    timeout: float | None,
    permit: str | None = None,
    more: Sequence[str] = (),
    clock: Callable[[], float] = time.monotonic,
) -> Operation[Granted | None]:
    """Take one permit under ``lease`` (with ``more``: those too, all at once under the one
    lease), waiting up to ``timeout``; ``None`` when it ran out.

    The permit id is chosen here, once, so a try retried after a lost reply finds its own
    permit and takes no second one. Success needs lease time left by the local clock, counted
    from before the request was sent, minus the drift allowance; a grant that arrives too late
    is given back. While no permit is free, a wait is also bounded by the soonest lease end
    (an expired permit is given back by the next try).
    """
    permit = permit or new_permit_id()
    more = tuple(more)
    deadline = None if timeout is None else clock() + timeout
    late = LateGrants()  # grants in a row that came too late, and the pause after them

    def attempt(register: bool) -> Generator[Any, Any, tuple[Granted | None, float]]:
        sent_at = clock()
        reply = yield lease_acquire_call(keys, owner, permit, lease, register, more)
        code, ms = int(reply[0]), int(reply[1])
        if code == GRANTED:
            if clock() - sent_at < ms / 1000 - drift(lease):
                granted = Granted(permit_id=permit, ttl=ms / 1000, requested_at=sent_at, more=more)
                return granted, 0.0
            yield give_back_call(keys, (permit, *more))  # too late: give them back
            late.came()
            if late.must_sleep and register:
                # our own give-back wakes us at once: pause, more each time (see lock.acquire)
                remaining = math.inf if deadline is None else deadline - clock()
                yield Sleep(late.pause(max(0.0, remaining)))
            return None, 0.0
        late.reset()
        return None, math.inf if ms < 0 else ms / 1000

    return (
        yield from wait_loop(
            keys.channel,
            owner,
            leave_call(keys.waiters, owner),
            attempt,
            timeout=timeout,
            clock=clock,
        )
    )


def lease_release(keys: LeaseSemaphoreKeys, permit: str, *, request_id: str) -> Operation[int]:
    """Give back ``permit``; returns the code (``RELEASED``, ``UNKNOWN`` or ``LOST``)."""
    reply = yield lease_release_call(keys, permit, request_id)
    return int(reply[0])


@dataclass(frozen=True)
class ManyReleased:
    """The server's answer to a several-permit release: ``RELEASED`` (every permit given
    back) or ``SHORT`` (refused: nothing changed), and each permit's state (``RELEASED``: held;
    ``RELEASED_BEFORE``: given back before by this request; ``UNKNOWN``: no such permit;
    ``LOST``: its lease had run out)."""

    code: int
    states: tuple[int, ...]


def lease_release_many(
    keys: LeaseSemaphoreKeys, permits: Sequence[str], request_ids: Sequence[str]
) -> Operation[ManyReleased]:
    """Give back ``permits``, all or none (Redisson's ``release(List)``)."""
    reply = yield release_many_call(keys, permits, request_ids)
    return ManyReleased(code=int(reply[0]), states=tuple(int(v) for v in reply[3:]))


def finish_release_many(
    table: PermitTable, keys: LeaseSemaphoreKeys, permits: Sequence[str], done: ManyReleased
) -> Exception | None:
    """Apply a several-permit release's known outcome to the client's record; the error it
    reports, if any: ``InvalidArgumentError`` when an id is not a held permit, else
    ``LeaseLostError`` when a lease ran out (the other permits stay held, and are still
    renewed, as none was given back)."""
    unknown, lost = [], []
    for permit, state in zip(permits, done.states, strict=True):
        if done.code != RELEASED and state == RELEASED:
            table.release_refused(permit)  # still held
            continue
        was_lost = table.take_lost(permit)
        ours = table.released(permit) is not None
        if state in (RELEASED, RELEASED_BEFORE):
            continue
        if state == LOST or ours or was_lost is not None:
            lost.append(permit)
        else:
            unknown.append(permit)
    if done.code == RELEASED:
        return None
    what = f"lease semaphore {keys.name!r}: release_many"
    if unknown:
        also = f"; lost (their lease ran out): {', '.join(lost)}" if lost else ""
        return InvalidArgumentError(
            f"{what}: permit_ids {', '.join(unknown)} are not held permits (never granted, "
            f"already released, or their lease ran out){also}; none was given back"
        )
    return LeaseLostError(
        f"{what}: permits {', '.join(lost)} lost (their lease ran out); none was given back",
        name=keys.name,
        owner=lost[0],
    )


def update_lease(keys: LeaseSemaphoreKeys, permit: str, lease: float) -> Operation[bool]:
    """Set ``permit``'s lease to ``lease`` from now, shorter or longer (Redisson's
    ``updateLeaseTime``); ``False`` when it is not held."""
    reply = yield Call(
        LEASE_SEMAPHORE_UPDATE,
        (keys.name, keys.leases, keys.channel),
        (bytes.fromhex(permit), to_ms(lease), keys.pubsub.command),
    )
    return bool(int(reply))


def lease_expire(keys: LeaseSemaphoreKeys, seconds: float) -> Operation[bool]:
    """Give the semaphore's keys an expiry (Redisson's ``expire``); ``False`` when it has none."""
    reply = yield Call(LEASE_SEMAPHORE_EXPIRE, (keys.name, keys.leases), (to_ms(seconds),))
    return bool(int(reply))


def renew_call(keys: LeaseSemaphoreKeys, permits: Sequence[str], lease: float) -> Call:
    return Call(
        LEASE_SEMAPHORE_RENEW,
        (keys.name, keys.leases, keys.channel),
        (to_ms(lease), keys.pubsub.command, *(bytes.fromhex(p) for p in permits)),
    )


def renew(keys: LeaseSemaphoreKeys, permit: str, lease: float) -> Operation[bool]:
    """Extend one permit's lease to at least ``lease`` from now; ``False`` when it is gone."""
    reply = yield renew_call(keys, (permit,), lease)
    return bool(int(reply[0]))


@dataclass(frozen=True)
class LeaseSemaphoreStatus:
    available: int | None
    """Free now, counting run-out leases as free (below zero after permits were taken away);
    ``None``: never set."""
    held: int
    soonest: float | None
    waiters: int


def lease_status(keys: LeaseSemaphoreKeys) -> Operation[LeaseSemaphoreStatus]:
    reply = yield Call(LEASE_SEMAPHORE_STATUS, (keys.name, keys.leases, keys.waiters), ())
    available, held, expired, soonest_ms, waiters, exists = (int(v) for v in reply)
    never_set = not exists and held == 0 and expired == 0
    return LeaseSemaphoreStatus(
        available=None if never_set else available + expired,
        held=held,
        soonest=None if soonest_ms < 0 else soonest_ms / 1000,
        waiters=waiters,
    )


def lease_statistics(
    status: LeaseSemaphoreStatus, name: str, local_waiters: int
) -> SemaphoreStatistics:
    available = status.available or 0
    return SemaphoreStatistics(
        name=name,
        permits=None if status.available is None else available + status.held,
        available=available,
        holders=status.held,
        waiters=status.waiters,
        local_waiters=local_waiters,
        ttl=status.soonest,
    )


def release_error(
    keys: LeaseSemaphoreKeys, permit: str, code: int, ours: bool, lost: LeaseLostError | None
) -> Exception | None:
    """What a lease-permit release (or renew) reports: nothing when done; ``LeaseLostError``
    when the permit's lease ran out (the server says so, or this client held it or found it
    lost); else ``InvalidArgumentError``: an id that is not a held permit."""
    if code == RELEASED:
        return None
    if lost is not None:
        return lost
    if code == LOST or ours:
        return LeaseLostError(
            f"lease semaphore {keys.name!r}: permit {permit} lost (its lease ran out)",
            name=keys.name,
            owner=permit,
        )
    return InvalidArgumentError(
        f"lease semaphore {keys.name!r}: permit_id {permit} is not a held permit "
        "(never granted, already released, or its lease ran out)"
    )


# --- the client's record of lease permits, for renewal --------------------------------------


@dataclass
class Permit:
    """A lease permit this client holds: ``watched`` ones are renewed by the client."""

    keys: LeaseSemaphoreKeys
    permit_id: str
    watched: bool
    renewed_at: float
    listeners: list[Callable[[LeaseLostError], None]] = field(default_factory=list)
    releasing: bool = False
    """Set from when its release is sent until that release's outcome is known (it may have
    run even if its reply never came), so that renewal neither renews it nor calls it lost."""
    lease_left: float | None = None
    """The lease the server said was left at the grant, from ``renewed_at`` (a try retried
    after a lost reply finds its permit granted earlier, with less left than was asked);
    ``None`` once renewed (then it has at least the renewal's lease)."""


def lost_error(permit: Permit, why: str, cause: LossCause = "unknown") -> LeaseLostError:
    return LeaseLostError(
        f"lease semaphore {permit.keys.name!r}: permit {permit.permit_id} lost ({why})",
        name=permit.keys.name,
        owner=permit.permit_id,
        cause=cause,
    )


@dataclass(frozen=True, eq=False)
class PendingUndo:
    """An undo (or give-back) of an abandoned request that could not reach the server:
    retried until ``until``, ``WINDOWS.unsure_for`` after the request's first send."""

    call: Call
    name: str
    since: float
    """When the request it undoes was first sent with its outcome unknown (client clock)."""
    until: float

    @property
    def counting(self) -> bool:
        """A counting semaphore's undo (its permits have no lease: taken, they stay taken for
        good); else a lease semaphore's give-back (they come back when their lease ends)."""
        return self.call.script is SEMAPHORE_UNDO


def pending_undo(call: Call, name: str, since: float) -> PendingUndo:
    """The undo ``call`` of a request first sent at ``since``: sent within its window."""
    return PendingUndo(call=call, name=name, since=since, until=since + WINDOWS.unsure_for)


def undo_settled(pending: PendingUndo, reply: Any, now: float) -> bool:
    """Whether ``reply`` (read at ``now``) to ``pending`` tells for sure that nothing of the
    request it undoes stays taken. A counting semaphore's undo that found the grant's receipt
    gave the permits back; one that found none proves the acquire never ran (or was undone
    already) only while that receipt would still be there: read later, it cannot tell, and the
    permits may stay taken for good. A lease give-back always tells (a permit stays in the
    leases for as long as it is held)."""
    if not pending.counting or int(reply[0]) == 1:
        return True
    return now - pending.since <= WINDOWS.conclusive_for


class PermitTable:
    """Permits the server granted to this client, by id; the ones found lost, until their
    release reports it; the request ids of releases whose outcome is unknown, so that a
    retried release is the same request; and undos still to be sent. Not thread-safe by
    itself: the sync shell holds a mutex around it.

    Its renewal interface (``calls``, ``renewed``, ``renewal_failed``) is what a client-wide
    watchdog needs from any primitive whose holds it renews.
    """

    def __init__(self) -> None:
        self._permits: dict[str, Permit] = {}
        self._lost: dict[str, LeaseLostError] = {}
        self._releases: dict[str, tuple[str, float]] = {}  # permit -> (request id, sent at)
        self._undos: list[PendingUndo] = []

    def __len__(self) -> int:
        return len(self._permits)

    def get(self, permit: str) -> Permit | None:
        return self._permits.get(permit)

    def granted(
        self,
        keys: LeaseSemaphoreKeys,
        granted: Granted,
        *,
        watched: bool,
        listener: Callable[[LeaseLostError], None] | None,
    ) -> Permit:
        record = Permit(
            keys=keys,
            permit_id=granted.permit_id,
            watched=watched,
            renewed_at=granted.requested_at,
            listeners=[listener] if listener is not None else [],
            lease_left=granted.ttl,
        )
        self._permits[granted.permit_id] = record
        self._lost.pop(granted.permit_id, None)
        return record

    def begin_release(self, permit: str, now: float) -> str:
        """Mark ``permit`` as being released; returns the request id to send: that of an
        earlier release of it whose outcome is unknown (a retry must be recognised as the same
        release), else a new one. Until ``released`` it is neither renewed nor reported lost."""
        return self.begin_releases([permit], now)[0]

    def begin_releases(self, permits: Sequence[str], now: float) -> list[str]:
        """``begin_release`` for several permits given back together: their request ids."""
        starting = set(permits)
        for stale, (_, sent_at) in list(self._releases.items()):
            if now - sent_at > WINDOWS.unsure_for and stale not in starting:
                del self._releases[stale]  # too old to be recognised: resolved by its lease
                record = self._permits.get(stale)
                if record is not None and record.releasing:
                    del self._permits[stale]
        request_ids = []
        for permit in permits:
            record = self._permits.get(permit)
            if record is not None:
                record.releasing = True
            request_id, _ = self._releases.setdefault(permit, (new_request_id(), now))
            request_ids.append(request_id)
        return request_ids

    def release_refused(self, permit: str) -> None:
        """A release that the server refused (it changed nothing): ``permit`` is held still,
        renewed again, and its next release is a new request."""
        self._releases.pop(permit, None)
        record = self._permits.get(permit)
        if record is not None:
            record.releasing = False

    def lease_set(self, permit: str, held: bool, sent_at: float) -> bool:
        """Its lease was set to a length of the caller's choosing (``update_lease_time``): a
        held permit is no longer renewed by the client; one not held is forgotten. Returns
        whether it was this client's."""
        if not held:
            self._lost.pop(permit, None)
            return self.released(permit) is not None
        record = self._permits.get(permit)
        if record is not None:
            record.watched = False
            record.renewed_at = sent_at
        return record is not None

    def released(self, permit: str) -> Permit | None:
        """Forget a permit given back (or found gone), once its release's outcome is known;
        returns its record, if it was ours."""
        self._lost.pop(permit, None)
        self._releases.pop(permit, None)
        return self._permits.pop(permit, None)

    def take_lost(self, permit: str) -> LeaseLostError | None:
        return self._lost.pop(permit, None)

    def lost(self, record: Permit, error: LeaseLostError) -> bool:
        """Record that ``record`` is gone on the server; ``False`` if it was released meanwhile."""
        if self._permits.get(record.permit_id) is not record:
            return False
        del self._permits[record.permit_id]
        self._lost[record.permit_id] = error
        return True

    def watched(self) -> list[Permit]:
        return [p for p in self._permits.values() if p.watched and not p.releasing]

    def clear(self) -> None:
        self._permits.clear()
        self._lost.clear()
        self._releases.clear()
        self._undos.clear()

    def undo_later(self, call: Call, name: str, since: float) -> PendingUndo:
        """Keep an undo that could not be sent now, for the watchdog to retry within the
        window of its request, first sent at ``since``."""
        return self.keep_undo(pending_undo(call, name, since))

    def keep_undo(self, pending: PendingUndo) -> PendingUndo:
        """``undo_later`` for an undo already made."""
        self._undos.append(pending)
        return pending

    def undo_round(self, now: float) -> tuple[list[tuple[PendingUndo, Call]], list[PendingUndo]]:
        """The undos to retry this round, and those dropped now: past their window, they could
        no longer tell whether their request ran (its permits may stay taken)."""
        expired = [u for u in self._undos if now > u.until]
        self._undos = [u for u in self._undos if now <= u.until]
        return [(u, u.call) for u in self._undos], expired

    def undo_done(self, pending: PendingUndo) -> None:
        self._undos = [u for u in self._undos if u is not pending]

    @property
    def undos_pending(self) -> int:
        """Undos still to be sent (0: every abandoned request of this client is resolved)."""
        return len(self._undos)

    @staticmethod
    def calls(permits: Iterable[Permit], lease: float) -> list[tuple[list[Permit], Call]]:
        """Renewal calls: one per semaphore (its keys share a slot), at most ``BATCH`` each."""
        groups: dict[str, list[Permit]] = {}
        for record in permits:
            groups.setdefault(record.keys.name, []).append(record)
        out = []
        for group in groups.values():
            for start in range(0, len(group), BATCH):
                batch = group[start : start + BATCH]
                ids = [p.permit_id for p in batch]
                out.append((batch, renew_call(batch[0].keys, ids, lease)))
        return out

    def renewed(
        self, batch: Sequence[Permit], reply: Sequence[Any], sent_at: float
    ) -> list[tuple[Permit, LeaseLostError]]:
        """Apply a renewal reply; returns the permits found gone (now recorded as lost)."""
        gone = []
        for record, ok in zip(batch, reply, strict=True):
            if int(ok):
                record.renewed_at, record.lease_left = sent_at, None
            elif not record.releasing:
                error = lost_error(record, "renewal found it gone")
                if self.lost(record, error):
                    gone.append((record, error))
        return gone

    def renewal_failed(
        self, batch: Sequence[Permit], now: float, lease: float
    ) -> list[tuple[Permit, LeaseLostError]]:
        """A renewal could not reach the server: permits not renewed for a whole lease are
        certainly gone; returns them (now recorded as lost)."""
        gone = []
        for record in batch:
            left = lease if record.lease_left is None else min(lease, record.lease_left)
            if not record.releasing and now - record.renewed_at >= left:
                error = lost_error(record, "not renewed for a whole lease", "expired")
                if self.lost(record, error):
                    gone.append((record, error))
        return gone
