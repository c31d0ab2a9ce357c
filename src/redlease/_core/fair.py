"""The fair lock in Redisson's ``RedissonFairLock`` layout: the calls the lock's core sends
(``lock.acquire``, ``lock.release``, ...) when a fair lock shares its keys with Java services.

Redisson's fair lock keeps the lock hash of its ``RLock`` (field ``<client-id>:<thread-id>``
-> hold count, the lease as the key's TTL), a list ``redisson_lock_queue:{<name>}`` of the
waiters' owner fields by arrival, and a sorted set ``redisson_lock_timeout:{<name>}`` of when
each waiter's place lapses (epoch ms). A waiter listens on its own channel,
``redisson_lock__channel:{<name>}:<owner field>``; a release publishes ``0`` on the first
waiter's channel only. A place lapses one wait (Redisson's ``threadWaitTime``, 5 minutes, or
the ``tryLock`` wait) after the one before it, and a waiter that gives up takes that wait off
every place behind it. The scripts here (``redisson_fair_*.lua``) have the same effects on
those keys as Redisson's, with redlease's reply convention, retries (the caller's believed
hold count, a release receipt), fencing tokens and clean-up on every way out of a wait.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .codes import GRANTED
from .keys import CLASSIC, LockKeys, PubSub, redisson_prefixed
from .lock import Layout, grant_undo, place_lease, to_ms
from .requests import Call
from .scripts import LOCK_STATUS, Script

REDISSON_FAIR_ACQUIRE = Script.load("redisson_fair_acquire")
REDISSON_FAIR_RELEASE = Script.load("redisson_fair_release")
REDISSON_FAIR_LEAVE = Script.load("redisson_fair_leave")
REDISSON_FAIR_FORCE_RELEASE = Script.load("redisson_fair_force_release")

SCRIPTS = (
    REDISSON_FAIR_ACQUIRE,
    REDISSON_FAIR_RELEASE,
    REDISSON_FAIR_LEAVE,
    REDISSON_FAIR_FORCE_RELEASE,
)

THREAD_WAIT_MS = 5 * 60 * 1000
"""Redisson's default ``fairLockWaitTimeout`` (``threadWaitTime``): the wait of an acquire
without a timeout of its own (a ``lock()``)."""

MAX_WAIT_MS = 10**12
"""The longest wait put in a place (about 31 years): keeps the scores exact doubles."""


@dataclass(frozen=True)
class RedissonFairKeys(LockKeys):
    """The keys of a fair lock in Redisson's layout: ``line`` is Redisson's queue (a list),
    ``places`` its timeouts (a sorted set), ``channel`` its unlock channel, which each waiter
    listens on followed by ``:<owner field>``. ``fence`` and the release receipts are
    redlease's, as for the plain lock (same hash slot)."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> RedissonFairKeys:
        plain = LockKeys.for_name(name, pubsub)  # checks the name's braces
        return cls(
            name=name,
            channel=plain.channel,
            # Redisson: prefixName("redisson_lock_queue", name), ("redisson_lock_timeout", name)
            line=redisson_prefixed("redisson_lock_queue", name),
            places=redisson_prefixed("redisson_lock_timeout", name),
            fence=plain.fence,
            receipt_prefix=plain.receipt_prefix,
            pubsub=pubsub,
            # redlease's own channels (no key): where a holder hears of a force release
            holder_prefix=plain.holder_prefix,
        )


def first_hold_undo(give_back: Call) -> Callable[[Any], Call | None]:
    """A first acquire's ``undo``: ``give_back`` (which frees only a hold made for that very
    call) when the reply shows a first hold granted."""

    def undo(reply: Any) -> Call | None:
        return give_back if int(reply[0]) == GRANTED and int(reply[1]) == 1 else None

    return undo


def wait_ms(timeout: float | None) -> int:
    """A waiter's wait as Redisson computes it: the acquire's timeout when it has one, else
    ``threadWaitTime``."""
    if timeout is None or timeout <= 0:
        return THREAD_WAIT_MS
    if timeout >= MAX_WAIT_MS / 1000:  # (a finite timeout may still overflow in ms)
        return MAX_WAIT_MS
    return to_ms(timeout)


class RedissonFairLayout(Layout):
    """The fair lock on Redisson's ``RedissonFairLock`` keys (see the module's docstring).

    The line is Redisson's, so a newcomer never passes a waiter (``fair`` is always on), and
    a release never hands the lock over: it wakes the first waiter, which takes the lock with
    its next try (``handover`` and the hand-over window do not apply). A waiter listens on
    Redisson's unlock channel (``0`` from a plain ``RLock`` on the same name is a hint too)
    and on its own, where a fair release wakes it."""

    def keys(self, name: str, pubsub: PubSub) -> LockKeys:
        return RedissonFairKeys.for_name(name, pubsub)

    def acquire_call(
        self,
        keys: LockKeys,
        owner: str,
        *,
        held: int,
        lease: float,
        join_line: bool,
        wait_id: str,
        timeout: float | None,
        fair: bool,
        handover: bool,
        token: int = 0,
    ) -> Call:
        if held == 0:
            # a first hold goes back by this call's wait id (the leave call): a give-back
            # delivered late never frees a hold that a later call of the owner was granted
            undo = first_hold_undo(
                self.leave_call(keys, owner, wait_id, timeout, place_lease(lease, handover))
            )
        else:
            undo = grant_undo(
                held,
                lambda count, granted: self.release_call(
                    keys, owner, count, request_id=uuid.uuid4().hex, token=granted
                ),
            )
        return Call(
            REDISSON_FAIR_ACQUIRE,
            (keys.name, keys.line, keys.places, keys.fence),
            (to_ms(lease), owner, held, wait_ms(timeout), int(join_line), wait_id, token),
            undo=undo,
        )

    def release_call(
        self,
        keys: LockKeys,
        owner: str,
        held: int,
        *,
        request_id: str,
        token: int,
        handover_ms: int = 0,
        unsure: bool = False,
        quiet: bool = False,
    ) -> Call:
        """``token``: the owner's hold's (the release acts on no other hold of the owner
        field: a stale copy after a failover is LOST); ``handover_ms`` and ``quiet`` do not
        apply (a release wakes the first waiter, never hands the lock over)."""
        return Call(
            REDISSON_FAIR_RELEASE,
            (keys.name, keys.line, keys.places, keys.channel, keys.receipt(owner)),
            (owner, held, request_id, keys.pubsub.command, int(unsure), token),
        )

    def leave_call(
        self, keys: LockKeys, owner: str, wait_id: str, timeout: float | None, place: str
    ) -> Call:
        return Call(
            REDISSON_FAIR_LEAVE,
            (keys.name, keys.line, keys.places, keys.channel),
            (owner, wait_ms(timeout), keys.pubsub.command, wait_id),
        )

    def listen(self, keys: LockKeys, owner: str) -> tuple[str, str | None]:
        # Redisson's waiter channel: getChannelName() + ":" + getLockName(threadId)
        return keys.channel, f"{keys.channel}:{owner}"

    def status_call(self, keys: LockKeys) -> Call:
        # lock_status.lua counts the waiters with ZCARD: Redisson's places, one per waiter
        return Call(LOCK_STATUS, (keys.name, keys.places), ())

    def force_release_call(self, keys: LockKeys) -> Call:
        return Call(
            REDISSON_FAIR_FORCE_RELEASE,
            (keys.name, keys.line, keys.places, keys.channel),
            (keys.pubsub.command, keys.holder_prefix),
        )


REDISSON_FAIR = RedissonFairLayout()
