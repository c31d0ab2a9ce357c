"""The group lock shared with Redisson (issue 35 part 4): a Java thread's ``RFasterMultiLock``
(``redlease.testing.RedissonFasterMultiLock``: Redisson's hash, fields, client-clock ends,
unlock latch, channel and message, with ``StringCodec`` values) and redlease's
``client.group_lock`` on the same group, both ways: a set overlapping a held value gets
nothing, the unlock message wakes the other side's waiter, disjoint values do not exclude
each other, Redisson's watchdog and unlock keep working on the hash redlease writes into."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
import redis
from integration.helpers import reply_bytes

import redlease
from redlease.testing import RedissonFasterMultiLock

WOKEN_WITHIN = 10.0
"""A waiter woken by the unlock message holds within this, however loaded the machine;
without it a redlease waiter looks again only after the holder's 30 s lease or the end of its
30 s wait (under ``long_recheck``; else at its 5 s re-check), a Redisson one after the TTL
(60 s) or its 30 s wait."""


def beside(call: Callable[[], Any]) -> Future[Any]:
    """``call()`` in a thread of its own (a Java thread, or a redlease owner)."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


@pytest.fixture
def group() -> str:
    return f"seats-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(server: Any) -> Iterator[Any]:
    c = redlease.Client.from_url(server.url)
    yield c
    c.close()


def fields(url: str, group: str) -> dict[bytes, bytes]:
    raw = redis.Redis.from_url(url)
    try:
        return {reply_bytes(k): reply_bytes(v) for k, v in raw.hgetall(group).items()}
    finally:
        raw.close()


def test_java_holds_a_value_redlease_gets_nothing_then_is_woken(
    server: Any, client: Any, group: str, long_recheck: float
) -> None:
    java = RedissonFasterMultiLock(server.url, group, ["A1", "A2"])
    assert java.try_lock(0)
    before = fields(server.url, group)
    ours = client.group_lock(group, ["A2", "A3"])
    assert not ours.acquire(timeout=0)
    assert fields(server.url, group) == before  # A3 not taken: all or nothing
    # a disjoint set of the group is not held up by Java's hold
    with client.group_lock(group, ["B1"]).hold(timeout=0):
        pass
    other_java = RedissonFasterMultiLock(server.url, group, ["A2"], thread_id=2)

    def wait_hold_release() -> tuple[bool, float, bool]:
        got = ours.acquire(timeout=30)
        at = time.monotonic()
        java_blocked = not other_java.try_lock(0)  # redlease holds A2 now
        ours.release()
        return got, at, java_blocked

    waiter = beside(wait_hold_release)
    time.sleep(0.3)
    unlocked = time.monotonic()
    assert java.unlock()  # publishes "0" on redisson_lock__channel:{group}
    got, at, java_blocked = waiter.result(timeout=10)
    assert got and java_blocked and at - unlocked < WOKEN_WITHIN
    assert other_java.try_lock(0)
    other_java.unlock()


def test_redlease_holds_java_waits_and_is_woken(server: Any, client: Any, group: str) -> None:
    ours = client.group_lock(group, ["A1", "A2", "A3"], lease=60)
    assert ours.acquire()
    java = RedissonFasterMultiLock(server.url, group, ["A3", "A4"])
    assert not java.try_lock(0)
    assert b"A4" not in b" ".join(fields(server.url, group))  # nothing of Java's written
    waiter = beside(lambda: java.try_lock(30))
    time.sleep(0.3)
    released = time.monotonic()
    ours.release()  # publishes "0": Java's waiter tries again at once
    assert waiter.result(timeout=10) is True
    assert time.monotonic() - released < WOKEN_WITHIN
    assert not ours.acquire(timeout=0)
    assert java.renew()  # Redisson's watchdog renews its values in redlease's hash
    assert java.unlock()
    assert ours.acquire(timeout=0)
    ours.release()


def test_the_same_strings_are_the_same_fields(server: Any, client: Any, group: str) -> None:
    java = RedissonFasterMultiLock(server.url, group, ["Jack_001", "Mary_002"])
    assert java.try_lock(0)
    java_fields = {k for k in fields(server.url, group) if b":" not in k}
    java.unlock()
    ours = client.group_lock(group, ["Mary_002", "Jack_001"])
    with ours.hold(timeout=0):
        owner = next(iter(ours.statistics().holders)).encode()
        mine = {k for k, v in fields(server.url, group).items() if v == owner}
    assert java_fields == mine and len(mine) == 2


def test_java_and_redlease_exclude_each_other_under_load(server: Any, group: str) -> None:
    """Two Java threads and two redlease threads take overlapping sets in turn; no two holders
    of a shared value at once (a counter read and written by each holder)."""
    raw = redis.Redis.from_url(server.url)
    counter = f"{group}:counter"
    sets = [["A1", "A2"], ["A2", "A3"], ["A3", "A1"], ["A1", "A2", "A3"]]

    def java_work(i: int) -> int:
        java = RedissonFasterMultiLock(server.url, group, sets[i], thread_id=i + 1)
        done = 0
        for _ in range(15):
            if java.try_lock(30):
                value = int(raw.get(counter) or 0)
                raw.set(counter, value + 1)
                java.unlock()
                done += 1
        return done

    def ours_work(i: int) -> int:
        with redlease.Client.from_url(server.url) as c:
            lock = c.group_lock(group, sets[i])
            for _ in range(15):
                with lock.hold(timeout=30):
                    value = int(raw.get(counter) or 0)
                    raw.set(counter, value + 1)
        return 15

    workers = [beside(partial(java_work, i)) for i in (0, 1)]
    workers += [beside(partial(ours_work, i)) for i in (2, 3)]
    done = sum(w.result(timeout=180) for w in workers)
    assert done == 60 and int(raw.get(counter) or 0) == 60
    raw.close()
