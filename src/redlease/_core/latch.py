"""The count-down latch as pure operations, in Redisson's RCountDownLatch layout.

The key is the name, a string holding the count; no key means count 0 (open). Counting down to
zero deletes the key and publishes on ``redisson_countdownlatch__channel__{<name>}``: ``0``
(Redisson's zero-count message, which opens the latch for every waiter, Redisson's and
redlease's) then ``2`` (for older redlease clients, on which a ``0`` woke one waiter each).
Any message on a latch channel wakes every redlease waiter to re-check the count; every wait is
bounded and re-checks the count.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError
from ..stats import LatchStatistics
from . import arguments
from .keys import CLASSIC, PubSub, hash_slot, same_slot_key
from .lock import PLACE_MS
from .receipts import receipt_ms
from .requests import Call, Operation
from .scripts import Script
from .waiting import leave_call, wait_loop

LATCH_TRY_SET = Script.load("latch_try_set")
LATCH_COUNT_DOWN = Script.load("latch_count_down")
LATCH_WAIT = Script.load("latch_wait")
LATCH_STATUS = Script.load("latch_status")
LATCH_DELETE = Script.load("latch_delete")

SCRIPTS = (LATCH_TRY_SET, LATCH_COUNT_DOWN, LATCH_WAIT, LATCH_STATUS, LATCH_DELETE)
"""The latch's own scripts; a waiter that gives up uses ``semaphore.SEMAPHORE_LEAVE``."""

ZERO_COUNT_MESSAGE = "0"
WAKE_ALL_MESSAGE = "2"
NEW_COUNT_MESSAGE = "1"


def count_arg(value: object) -> int:
    """A latch count: an int from 1 to ``MAX_COUNT`` (a latch at zero is simply open: no key)."""
    return arguments.count(value, "count", hint=" (a latch at 0 is already open)")


@dataclass(frozen=True)
class LatchKeys:
    """The keys and channel of one count-down latch (Redisson RCountDownLatch layout)."""

    name: str
    channel: str
    waiters: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    """How count changes publish on ``channel`` (the client's; see ``PubSub``)."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> LatchKeys:
        return cls(
            name=name,
            # Redisson: "redisson_countdownlatch__channel__{" + name + "}"
            channel=f"redisson_countdownlatch__channel__{{{name}}}",
            waiters=same_slot_key(name, "redlease:latch-waiters:"),
            receipt_prefix=same_slot_key(name, "redlease:latch-receipt:", ":"),
            pubsub=pubsub,
        )

    def receipt(self, request_id: str) -> str:
        return self.receipt_prefix + request_id


def keys_for(name: str, *, cluster: bool, pubsub: PubSub = CLASSIC) -> LatchKeys:
    """The latch's keys; on a cluster a name with a hash tag of its own is refused, because
    Redisson's channel for it (``...__{<name>}``) would hash to another slot."""
    keys = LatchKeys.for_name(name, pubsub)
    if cluster and hash_slot(keys.channel) != hash_slot(name):
        raise InvalidArgumentError(
            f"latch name {name!r}: on a cluster a name cannot carry a hash tag of its own "
            "('{...}'), because Redisson's latch channel for it would hash elsewhere"
        )
    return keys


def try_set_count(keys: LatchKeys, count: int, *, request_id: str | None = None) -> Operation[bool]:
    """Arm the latch with ``count`` if it is open; ``False`` when it is armed. A retry of the
    request (same id) that armed it answers ``True`` again and arms nothing (even if the latch
    was counted down to zero meanwhile)."""
    request_id = request_id or uuid.uuid4().hex
    reply = yield Call(
        LATCH_TRY_SET,
        (keys.name, keys.channel, keys.receipt(request_id)),
        (count, keys.pubsub.command, receipt_ms()),
    )
    return bool(int(reply))


def count_down(keys: LatchKeys, *, request_id: str | None = None) -> Operation[int]:
    """Count down by one; returns the count left. A retry of the same request (same id)
    counts nothing twice."""
    request_id = request_id or uuid.uuid4().hex
    reply = yield Call(
        LATCH_COUNT_DOWN,
        (keys.name, keys.channel, keys.receipt(request_id)),
        (receipt_ms(), keys.pubsub.command),
    )
    return int(reply)


def delete(keys: LatchKeys, *, request_id: str | None = None) -> Operation[bool]:
    """Delete the latch, which opens it and wakes every waiter (Redisson's ``delete``);
    ``False`` when it did not exist (open already). A retry of the same request (same id)
    answers ``True`` again."""
    request_id = request_id or uuid.uuid4().hex
    reply = yield Call(
        LATCH_DELETE,
        (keys.name, keys.channel, keys.receipt(request_id)),
        (receipt_ms(), keys.pubsub.command),
    )
    return bool(int(reply))


def check_call(keys: LatchKeys, owner: str, register: bool) -> Call:
    return Call(LATCH_WAIT, (keys.name, keys.waiters), (owner, PLACE_MS if register else 0))


def wait(
    keys: LatchKeys,
    owner: str,
    *,
    timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> Operation[bool]:
    """Wait until the count is zero, up to ``timeout``; ``False`` when it ran out first."""

    def attempt(register: bool) -> Generator[Any, Any, tuple[bool | None, float]]:
        count = int((yield check_call(keys, owner, register)))
        return (True if count == 0 else None), math.inf

    result = yield from wait_loop(
        keys.channel,
        owner,
        leave_call(keys.waiters, owner),
        attempt,
        timeout=timeout,
        clock=clock,
    )
    return bool(result)


def status(keys: LatchKeys) -> Operation[tuple[int, float | None, int]]:
    """(count, ttl seconds or ``None``, waiters)."""
    reply = yield Call(LATCH_STATUS, (keys.name, keys.waiters), ())
    count, ttl_ms, waiters = (int(v) for v in reply)
    return count, (None if ttl_ms < 0 else ttl_ms / 1000), waiters


def statistics(
    state: tuple[int, float | None, int], name: str, local_waiters: int
) -> LatchStatistics:
    count, ttl, waiters = state
    return LatchStatistics(
        name=name, count=count, waiters=waiters, local_waiters=local_waiters, ttl=ttl
    )
