"""The spin lock's acquire: the reentrant lock's own keys and scripts, without pub/sub.

A spin lock is the reentrant lock (``lock.py``: the same hash, the same acquire and release
scripts, tokens and renewals; a spin lock, a lock and Redisson's RLock of one name exclude
each other) whose waiter never listens: it tries, and while the lock is held sleeps a growing
pause (``ExponentialBackoff``) and tries again, as Redisson's ``RSpinLock`` does, for servers
and proxies without pub/sub. It takes no place in the lock's line (each try is a single try),
so a release never hands it the lock and nothing is left behind when it gives up."""

from __future__ import annotations

import contextlib
import math
import random as _random
import time
import uuid
from collections.abc import Callable

from ..errors import LeaseLostError, ReplicaError, ServerUnavailableError
from . import codes
from .backoff import ExponentialBackoff, Outage
from .keys import LockKeys
from .lock import OUTAGE_TOLERANCE, REDLEASE, Acquired, GoneHold, Layout, drift, place_lease
from .requests import Operation, Sleep


def acquire(
    keys: LockKeys,
    owner: str,
    *,
    held: int,
    lease: float,
    blocking: bool,
    timeout: float | None,
    wait_id: str,
    backoff: ExponentialBackoff,
    token: int = 0,
    clock: Callable[[], float] = time.monotonic,
    random: Callable[[], float] = _random.random,
    on_gone: Callable[[], None] = lambda: None,
    layout: Layout = REDLEASE,
) -> Operation[Acquired | None]:
    """Try; while allowed, sleep the next pause of ``backoff`` and try again; ``None`` when
    not acquired. The last try is made at the deadline (a pause never runs past it).

    Each try is ``lock.acquire``'s call without a place in line (``queue`` off), with its
    rules: a grant counts only with lease time left by the local clock, counted from before
    the request, minus the drift allowance (one that came too late is given back and the
    waiter pauses); a LOST reply (the owner's hold gone on the server) goes on from the
    server's count; ``token`` is the hold a re-entry joins. A waiter that saw the lock held
    rides out a server outage of up to ``OUTAGE_TOLERANCE``; giving up then gives back a hold
    the server made for this call (``wait_id``) whose reply was lost."""
    deadline = None if timeout is None else clock() + timeout
    leave = layout.leave_call(keys, owner, wait_id, timeout, place_lease(lease, False))
    gone = GoneHold(on_gone)
    pauses = backoff.pauses(random)
    outage = Outage(clock, deadline, OUTAGE_TOLERANCE)
    waited = False  # a reply said the lock is held: the caller waits for it
    while True:
        sent_at = clock()
        try:
            reply = yield layout.acquire_call(
                keys,
                owner,
                held=held,
                lease=lease,
                queue=False,
                wait_id=wait_id,
                timeout=timeout,
                fair=False,
                handover=False,
                token=token,
            )
        except ReplicaError as exc:
            # not confirmed by enough replicas: a failover could lose it, so give it back
            reply = exc.reply
            if isinstance(reply, list) and int(reply[0]) == codes.GRANTED and reply[1] == held + 1:
                yield layout.release_call(
                    keys, owner, held + 1, request_id=uuid.uuid4().hex, token=int(reply[3])
                )
            raise
        except ServerUnavailableError:
            pause = outage.failed(listening=waited)
            if pause is None:
                if held == 0:
                    # a grant whose reply was lost must not hold the lock for a whole lease
                    with contextlib.suppress(ServerUnavailableError):
                        yield leave
                raise
            yield Sleep(pause)
            continue
        outage.ended()
        code, count, ttl_ms = int(reply[0]), int(reply[1]), int(reply[2])
        if code == codes.GRANTED:
            left = lease if ttl_ms < 0 else min(lease, ttl_ms / 1000)
            if clock() - sent_at < left - drift(left):
                return Acquired(
                    count=count, ttl=ttl_ms / 1000, requested_at=sent_at, token=int(reply[3])
                )
            # it came too late: give it back, then pause as after a held lock
            yield layout.release_call(
                keys, owner, count, request_id=uuid.uuid4().hex, token=int(reply[3])
            )
        elif code == codes.LOST:
            if count == 0:
                token = 0  # (the hold there, if any, is not the caller's: a first acquire now)
            held = gone.follow(
                count,
                lambda: LeaseLostError(
                    f"lock {keys.name!r}: owner {owner}'s hold count keeps changing",
                    name=keys.name,
                    owner=owner,
                ),
            )
            continue
        if not blocking:
            return None
        waited = True
        remaining = math.inf if deadline is None else deadline - clock()
        if remaining <= 0:
            return None
        yield Sleep(min(remaining, next(pauses)))
