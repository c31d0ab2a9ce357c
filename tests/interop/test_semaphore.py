"""The counting semaphore shared with Redisson (issue #13 items 1 and 6), against a Java
service played by ``redlease.testing.RedissonSemaphore`` (Redisson's keys, arguments, effects,
channel and messages), both ways, on names with and without braces of their own."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
import redis

from redlease.testing.redisson.synchronizers import RedissonSemaphore, semaphore_channel

from .helpers import Beside, Crowd, braced, eventually, woken


@pytest.fixture(params=["plain", "braced"])
def sem_name(request: pytest.FixtureRequest, name: str) -> str:
    return name if request.param == "plain" else braced(name, "sem")


@pytest.fixture
def java(server: Any, sem_name: str) -> Any:
    driver = RedissonSemaphore(server.url, sem_name)
    yield driver
    assert driver.odd == [], "messages a Redisson listener could not take"
    driver.close()


def test_the_driver_speaks_redissons_layout(server, sem_name):
    """The driver's keys and channel are Redisson's (``getChannelName``), independently of
    redlease's own key code."""
    driver = RedissonSemaphore(server.url, sem_name)
    expected = f"redisson_sc:{sem_name}" if "{" in sem_name else f"redisson_sc:{{{sem_name}}}"
    assert driver.channel == semaphore_channel(sem_name) == expected
    driver.close()


async def test_permits_are_shared_both_ways(side, server, sem_name, java):
    sem = side.client(server.url).semaphore(sem_name)
    assert java.try_set_permits(5)
    assert not await side(sem.try_set_permits(9))  # set already, by Java
    assert await side(sem.acquire(2))
    assert java.available_permits() == 3
    assert java.try_acquire(3)
    assert not await side(sem.acquire(1, timeout=0))
    assert await side(sem.available()) == 0
    java.release(2)  # Java gives back 2 of its 3
    await side(sem.release(2))
    assert java.available_permits() == 4
    # zero permits: at once, changing nothing, on both sides (Redisson's testZero)
    assert await side(sem.acquire(0, timeout=0)) and java.try_acquire(0)
    await side(sem.release(0))
    java.release(0)
    assert java.available_permits() == 4
    java.release(1)  # the last one Java held
    assert await side(sem.available()) == 5 == java.available_permits()
    assert (await side(sem.statistics())).permits is None  # set by Java: no total known


async def test_drain_takes_what_is_free_and_redisson_sees_it(side, server, sem_name, java):
    sem = side.client(server.url).semaphore(sem_name)
    assert await side(sem.drain_permits()) == 0  # never set: nothing to take
    assert java.drain_permits() == 0
    assert await side(sem.try_set_permits(5))
    assert await side(sem.acquire(2))
    assert await side(sem.drain_permits()) == 3
    assert java.available_permits() == 0
    java.release(1)
    assert await side(sem.drain_permits()) == 1
    await side(sem.release(5))  # everything back: 2 taken + 3 + 1 drained, less the Java one
    assert java.available_permits() == 5
    assert java.drain_permits() == 5
    await side(sem.release(5))
    assert java.available_permits() == 5


async def test_redisson_changes_to_the_count_are_followed_and_lose_no_permit(
    side, server, sem_name, java
):
    """Redisson's ``addPermits``, ``release`` (no upper bound) and ``delete`` +
    ``trySetPermits`` change only the count key: redlease follows the count, never refuses a
    valid call, and never loses a permit (issue #13 item 1)."""
    sem = side.client(server.url).semaphore(sem_name)
    assert await side(sem.try_set_permits(1))
    java.add_permits(1)  # the count is 2
    assert await side(sem.acquire(2))  # all of them, though redlease set only 1
    await side(sem.release(1))
    await side(sem.release(1))
    assert java.available_permits() == 2  # no permit lost
    await side(sem.release(1))  # Redisson's testReleaseWithoutPermits: more than taken
    assert java.available_permits() == 3
    assert (await side(sem.statistics())).permits == 3
    assert java.delete()
    assert java.try_set_permits(10)
    assert await side(sem.acquire(5))  # more than the 3 redlease knew of
    await side(sem.release(5))
    assert java.available_permits() == 10


async def test_permits_taken_away_as_redisson_does(side, server, sem_name, java):
    """Redisson's ``testReducePermits``, played by each side against the other:
    ``addPermits(-n)`` may leave the count below zero, and releases bring it back."""
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    listen = raw.pubsub()
    listen.subscribe(semaphore_channel(sem_name))
    assert listen.get_message(timeout=5) is not None  # the confirmation
    sem = side.client(server.url).semaphore(sem_name)
    assert await side(sem.try_set_permits(10))
    assert java.try_acquire(10)
    await side(sem.add_permits(-5))
    assert java.available_permits() == -5
    stats = await side(sem.statistics())
    assert (stats.available, stats.permits, stats.holders) == (-5, 5, 10)
    assert not await side(sem.acquire(1, timeout=0))  # below zero: nothing to take
    java.release(10)
    assert await side(sem.available()) == 5
    assert await side(sem.acquire(5))
    assert java.available_permits() == 0
    java.add_permits(-5)  # now Java takes permits away
    assert await side(sem.available()) == -5
    await side(sem.release(5))
    assert java.available_permits() == 0
    await side(sem.add_permits(0))  # Redisson's addPermits(0): no change
    await side(sem.add_permits(3))
    assert java.try_acquire(3)
    # on the channel: redlease's try_set (10), Java's release (5) and addPermits(-5) (-5,
    # which Redisson's own listeners cannot take), redlease's add_permits(3); redlease sent
    # nothing for its add_permits(-5), its release back to 0 and its add_permits(0)
    messages = []
    while (message := listen.get_message(timeout=0.5)) is not None:
        if message["type"] == "message":
            messages.append(int(message["data"]))
    assert messages == [10, 5, -5, 3]
    listen.close()
    raw.close()


async def test_set_permits_keeps_the_held_permits_counted(side, server, sem_name, java):
    sem = side.client(server.url).semaphore(sem_name)
    await side(sem.set_permits(5))  # never set: now it has 5
    assert java.available_permits() == 5 and not java.try_set_permits(7)
    assert java.try_acquire(3)
    await side(sem.set_permits(2))  # fewer in all than Java holds
    assert java.available_permits() == -1
    await side(sem.set_permits(2))  # again: no change (a retried request counts once)
    java.release(3)
    assert await side(sem.available()) == 2
    await side(sem.set_permits(4))
    assert java.available_permits() == 4
    stats = await side(sem.statistics())
    assert (stats.permits, stats.holders) == (4, 0)


@pytest.mark.parametrize("change", ["release", "add_permits", "try_set_permits"])
async def test_a_redisson_change_wakes_a_redlease_waiter(
    side, server, sem_name, java, change, long_recheck
):
    sem = side.client(server.url).semaphore(sem_name)
    if change != "try_set_permits":
        assert java.try_set_permits(2) and java.try_acquire(2)
    waiter = Beside(lambda: sem.acquire(2, timeout=30), is_async=side.is_async)
    await eventually(waiter.parked, "the redlease waiter is blocked in its wait")
    since = time.monotonic()
    if change == "release":
        java.release(2)
    elif change == "add_permits":
        java.add_permits(2)
    else:
        assert java.try_set_permits(2)
    assert await woken(waiter, since) is True
    assert java.available_permits() == 0


@pytest.mark.parametrize("change", ["release", "add_permits", "set_permits", "try_set_permits"])
async def test_a_redlease_change_wakes_a_redisson_waiter(side, server, sem_name, java, change):
    sem = side.client(server.url).semaphore(sem_name)
    if change == "release":
        assert await side(sem.try_set_permits(2)) and await side(sem.acquire(2))
    elif change in ("add_permits", "set_permits"):
        assert await side(sem.try_set_permits(1)) and await side(sem.acquire(1))
    waiter = Beside(lambda: java.acquire(2, wait=30), is_async=False)
    await eventually(lambda: java.waiting, "the Redisson waiter is blocked in its wait")
    since = time.monotonic()
    if change == "release":
        await side(sem.release(2))
    elif change == "add_permits":
        await side(sem.add_permits(2))
    elif change == "set_permits":
        await side(sem.set_permits(3))  # 1 held: 2 free
    else:
        assert await side(sem.try_set_permits(2))
    assert await woken(waiter, since) is True
    assert await side(sem.available()) == 0


async def test_no_permit_is_lost_to_a_mixed_crowd(side, server, sem_name, java):
    """Java threads and redlease callers take and give back 1 or 2 of 3 permits at random:
    never more than 3 are out at once, and all 3 are there at the end."""
    permits, cycles = 3, 15
    client = side.client(server.url)
    assert java.try_set_permits(permits)
    crowd = Crowd(permits)

    def java_work(seed: int) -> int:
        driver, rng = RedissonSemaphore(server.url, sem_name), random.Random(seed)
        try:
            for _ in range(cycles):
                k = rng.choice((1, 2))
                assert driver.acquire(k, wait=30)
                crowd.enter(k)
                time.sleep(rng.random() * 0.003)
                crowd.leave(k)
                driver.release(k)
            assert driver.odd == []
            return cycles
        finally:
            driver.close()

    async def redlease_work(seed: int) -> int:
        sem, rng = client.semaphore(sem_name), random.Random(seed)
        for _ in range(cycles):
            k = rng.choice((1, 2))
            assert await side(sem.acquire(k, timeout=30))
            crowd.enter(k)
            await asyncio.sleep(rng.random() * 0.003)
            crowd.leave(k)
            await side(sem.release(k))
        return cycles

    assert await crowd.run(side, java_work, redlease_work) == ([cycles] * 2, [cycles] * 2)
    assert 1 <= crowd.peak <= permits
    assert java.available_permits() == permits
    assert (await side(client.semaphore(sem_name).statistics())).available == permits
