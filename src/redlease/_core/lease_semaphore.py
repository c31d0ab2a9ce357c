"""The lease semaphore as pure operations (Redisson ``RPermitExpirableSemaphore``): the counter
of the counting semaphore plus a zset ``{<name>}:timeout`` of permit id -> lease end (ms, server
clock); a permit whose lease ran out is given back by the next caller. Its reply codes are the
counting semaphore's (``semaphore``)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError, LeaseLostError
from ..stats import SemaphoreStatistics
from . import arguments
from .backoff import LateGrants
from .keys import LeaseSemaphoreKeys
from .lock import PLACE_MS, drift, to_ms
from .receipts import receipt_ms
from .requests import Call, Operation, Sleep
from .scripts import Script
from .semaphore import (
    GRANTED,
    LOST,
    RELEASED,
    TOO_MANY,
    new_request_id,
    past_bound,
)
from .waiting import leave_call, wait_loop

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


def new_permit_id() -> str:
    """A fresh permit id: 16 random bytes in hex (Redisson's format)."""
    return uuid.uuid4().hex


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
        raise past_bound(keys.name, f"add_permits({permits})", int(reply[0]), "added")
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
        raise past_bound(keys.name, f"set_permits({permits})", int(reply[0]), "changed")
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
