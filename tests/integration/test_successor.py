"""A dead holder's successor: the first waiter in line re-checks the moment the dead holder's
lease ends (it is told the holder's remaining lease), and the waiters behind it do not (they
are told the hold's whole lease, or their own, whichever is shorter), on a real server, sync
and asyncio. See docs/guarantees.md, "A dead holder's successor"; the figures are in
``benchmarks/successor.py``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

from redlease._core import codes, scripts
from redlease._core import lock as core
from redlease._core.fair import REDISSON_FAIR_ACQUIRE, RedissonFairLayout
from redlease._core.keys import CLASSIC, LockKeys
from redlease._core.rwlock import RW_WRITE_ACQUIRE, RwKeys

from .helpers import eventually

DEAD_LEASE_MS = 60_000
"""The dead holder's lease: what a waiter was told before (capped by ``core.RECHECK``)."""

LEFT_MS = 3_000
"""What is left of it when the waiters come: the first re-checks then. (Time for two waiters
to line up on a loaded machine before it runs out: 1.5 s was little.)"""


def _dead_holder(raw: redis.Redis, key: str) -> float:
    """A redlease hold whose holder died with ``LEFT_MS`` of its lease left; returns when the
    lease ends (``time.time()``)."""
    raw.hset(
        key,
        mapping={
            "dead-client:1": 1,
            "redlease:fence": 1,
            "redlease:wait": "w0",
            "redlease:lease": DEAD_LEASE_MS,
        },
    )
    raw.pexpire(key, LEFT_MS)
    before = time.time()
    left = raw.pttl(key)
    return before + left / 1000


def _acquire_reply(raw: redis.Redis, keys: LockKeys, owner: str, fair: bool) -> Any:
    """One try of a waiter (its retries: the same wait id) with a lease of 30 s."""
    call = core._acquire_call(
        keys, owner, 0, 30.0, True, f"wait-of-{owner}", fair=fair, handover=True
    )
    return raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)


@pytest.mark.parametrize("fair", [False, True], ids=["lock", "fair_lock"])
async def test_the_first_waiter_is_told_the_holders_remaining_lease(server, name, fair):
    raw = redis.Redis.from_url(server.url)
    keys = LockKeys.for_name(name)
    raw.script_load(scripts.LOCK_ACQUIRE.source)
    _dead_holder(raw, name)
    listeners = []
    replies = []
    for client_id in ("first-client", "second-client"):
        # a live waiter: its client listens on its own channel of the lock
        listener = raw.pubsub()
        listener.subscribe(keys.handover(f"{client_id}:1"))
        assert listener.get_message(timeout=5)["type"] == "subscribe"
        listeners.append(listener)
        replies.append(_acquire_reply(raw, keys, f"{client_id}:1", fair))
    first, second = replies
    assert int(first[0]) == codes.HELD and int(second[0]) == codes.HELD
    # the first in line: what is left of the dead holder's lease (not its whole lease)
    assert 0 < int(first[2]) <= LEFT_MS
    # behind a live waiter: the hold's lease or its own (30 s), whichever is shorter
    assert int(second[2]) == 30_000
    # the first waiter's client is gone: the second is the first live waiter now
    listeners[0].close()
    gone = keys.handover("first-client:1")
    await eventually(lambda: raw.pubsub_numsub(gone)[0][1] == 0)
    again = _acquire_reply(raw, keys, "second-client:1", fair)
    assert int(again[0]) == codes.HELD and 0 < int(again[2]) <= LEFT_MS
    listeners[1].close()
    raw.close()


@pytest.mark.parametrize("kind", ["lock", "fair_lock", "election"])
async def test_the_first_waiter_takes_a_dead_holders_lock_as_its_lease_ends(
    side, server, name, kind, long_recheck
):
    raw = redis.Redis.from_url(server.url)
    clients = [side.client(server.url) for _ in range(2)]
    key = clients[0].election(name).lock.name if kind == "election" else name
    keys = LockKeys.for_name(key)
    held: list[tuple[int, float]] = []
    ends = _dead_holder(raw, key)

    async def take(i: int) -> None:
        client = clients[i]
        if kind == "election":
            leadership = client.election(name).leadership(timeout=30)
            if side.is_async:
                async with leadership:
                    held.append((i, time.time()))
                    await asyncio.sleep(0.05)
            else:
                with leadership:
                    held.append((i, time.time()))
                    time.sleep(0.05)
            return
        lock = client.lock(name) if kind == "lock" else client.fair_lock(name)
        assert await side(lock.acquire(timeout=30))
        held.append((i, time.time()))
        await asyncio.sleep(0.05)
        await side(lock.release())

    runners: list[Any] = []
    for i in range(2):  # one after the other: the first is first in line
        if side.is_async:
            runners.append(asyncio.create_task(take(i)))
        else:
            thread = threading.Thread(target=asyncio.run, args=(take(i),))
            thread.start()
            runners.append(thread)

        def in_line(i: int = i) -> bool:
            return raw.zcard(keys.line) == i + 1

        await eventually(in_line)
    if side.is_async:
        await asyncio.wait_for(asyncio.gather(*runners), 60)
    else:
        for thread in runners:
            thread.join(60)
    # the first in line took it first, and it did so at the lease's end: a waiter told the
    # whole lease (the old behaviour) would re-check only at the end of its 30 s wait (no
    # re-check before it: long_recheck); the first waiter now re-checks at the end itself (a
    # round trip; 10 s of room for a loaded machine)
    assert [i for i, _ in held] == [0, 1]
    assert ends - 0.01 <= held[0][1] < ends + long_recheck
    raw.close()


def test_redissons_fair_line_first_waiter_is_told_the_remaining_lease(server, name):
    """Redisson's fair-lock layout: the first in line is told the holder's remaining lease,
    the one behind it its own lease (it does not re-check at the lease's end with the first)."""
    raw = redis.Redis.from_url(server.url)
    layout = RedissonFairLayout()
    keys = layout.keys(name, CLASSIC)
    raw.hset(name, "dead-client:1", 1)  # a Redisson holder that died
    raw.pexpire(name, LEFT_MS)
    raw.script_load(REDISSON_FAIR_ACQUIRE.source)
    replies = []
    for owner in ("first-client:1", "second-client:1"):
        call = layout.acquire_call(
            keys,
            owner,
            held=0,
            lease=30.0,
            join_line=True,
            wait_id=f"wait-of-{owner}",
            timeout=None,
            fair=True,
            handover=False,
        )
        replies.append(raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args))
        # its retry (same call) is told the same
        replies.append(raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args))
    assert [int(r[0]) for r in replies] == [codes.HELD] * 4
    assert all(0 < int(r[2]) <= LEFT_MS for r in replies[:2])
    assert [int(r[2]) for r in replies[2:]] == [30_000, 30_000]
    raw.close()


def test_the_first_writer_in_line_is_told_the_dead_writers_remaining_lease(server, name):
    """The read-write lock (redlease's layout): the first writer in line is told what is left
    of a dead writer's lease, the one behind it its own lease."""
    raw = redis.Redis.from_url(server.url)
    keys = RwKeys.for_name(name)
    seconds, micros = raw.time()
    now_ms = seconds * 1000 + micros // 1000
    raw.hset(
        keys.writer,
        mapping={
            "writer": "dead-client:1",
            "count": 1,
            "deadline": now_ms + LEFT_MS,
            "token": 1,
            "wait": "w0",
        },
    )
    raw.pexpire(keys.writer, LEFT_MS)
    raw.script_load(RW_WRITE_ACQUIRE.source)
    replies = []
    for owner in ("first-client:1", "second-client:1"):
        call = keys.acquire_call("write", owner, 0, 30.0, True, f"wait-of-{owner}")
        for _ in range(2):  # a try and its retry
            replies.append(raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args))
    assert [int(r[0]) for r in replies] == [codes.HELD] * 4
    assert all(0 < int(r[2]) <= LEFT_MS for r in replies[:2])
    assert [int(r[2]) for r in replies[2:]] == [30_000, 30_000]
    raw.close()
