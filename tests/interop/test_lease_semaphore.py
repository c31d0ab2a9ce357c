"""The lease semaphore shared with Redisson's ``RPermitExpirableSemaphore`` (issue #13 item 6),
against a Java service played by ``redlease.testing.RedissonPermitExpirableSemaphore``: permit
ids taken by one side are given back by the other, several at once; permits, leases and
expiries set by either side hold for both; each side's changes wake the other's waiters by
pub/sub; names with and without braces of their own."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
import redis

from redlease import InvalidArgumentError, LeaseLostError
from redlease._core import lease_semaphore as lease_core
from redlease._core.keys import LeaseSemaphoreKeys
from redlease.testing.redisson.synchronizers import (
    NON_EXPIRABLE,
    RedissonError,
    RedissonPermitExpirableSemaphore,
    semaphore_channel,
    timeout_key,
)

from .helpers import Beside, Crowd, braced, eventually, woken


@pytest.fixture(params=["plain", "braced"])
def sem_name(request: pytest.FixtureRequest, name: str) -> str:
    return name if request.param == "plain" else braced(name, "slots")


@pytest.fixture
def java(server: Any, sem_name: str) -> Any:
    driver = RedissonPermitExpirableSemaphore(server.url, sem_name)
    yield driver
    assert driver.odd == [], "messages a Redisson listener could not take"
    driver.close()


def test_the_driver_speaks_redissons_layout(server, sem_name):
    driver = RedissonPermitExpirableSemaphore(server.url, sem_name)
    keys = LeaseSemaphoreKeys.for_name(sem_name)
    assert (driver.leases, driver.channel) == (keys.leases, keys.channel)
    assert driver.leases == (
        f"{sem_name}:timeout" if "{" in sem_name else f"{{{sem_name}}}:timeout"
    )
    assert timeout_key(sem_name) == driver.leases and semaphore_channel(sem_name) == keys.channel
    driver.close()


async def test_permit_ids_are_shared_and_given_back_several_at_once(side, server, sem_name, java):
    """Redisson's ``testBlockingAcquireMany`` / ``testReleaseAsyncMany``, across the two
    sides: ids taken by one are given back by the other, several at once."""
    slots = side.client(server.url).lease_semaphore(sem_name)
    assert await side(slots.try_set_permits(10))
    taken = java.try_acquire(6)  # no lease: Redisson's non-expirable mark
    assert len(taken) == 6 and {java.lease_end(i) for i in taken} == {NON_EXPIRABLE}
    assert await side(slots.available()) == 4
    assert await side(slots.release_many(taken[:4])) == 4
    assert java.available_permits() == 8
    started_ms = time.time() * 1000
    mine = await side(slots.acquire_many(3, lease=60))
    assert len(mine) == 3 and len(set(mine)) == 3
    ends = {java.lease_end(i) for i in mine}
    assert len(ends) == 1  # one lease for all three
    assert started_ms + 55_000 < ends.pop() < started_ms + 65_000
    assert java.acquired_permits() == 5 and java.get_permits() == 10
    java.release_many(mine)
    assert await side(slots.available()) == 8
    one = java.try_acquire(1)[0]
    await side(slots.release(one))  # one id, given back by its single-permit call
    java.release_many(taken[4:])
    assert await side(slots.available()) == 10 == java.available_permits()
    stats = await side(slots.statistics())
    assert (stats.permits, stats.holders) == (10, 0)


async def test_a_release_of_several_is_all_or_none_on_both_sides(side, server, sem_name, java):
    """Redisson's ``testReleaseManyNotExistOrExpired``: with one id not held, nothing is
    given back, whichever side asks."""
    slots = side.client(server.url).lease_semaphore(sem_name)
    assert java.try_set_permits(10)
    theirs = java.try_acquire(4)
    mine = await side(slots.acquire_many(2))
    stranger = lease_core.new_permit_id()
    with pytest.raises(InvalidArgumentError) as info:
        await side(slots.release_many([theirs[0], stranger]))
    assert stranger in str(info.value) and theirs[0] not in str(info.value)
    with pytest.raises(RedissonError):
        java.release_many([mine[0], stranger])
    assert java.available_permits() == 4 and java.acquired_permits() == 6
    assert await side(slots.release_many(theirs[:2])) == 2  # still held, so this works
    short = java.try_acquire(1, lease=0.2)
    await eventually(lambda: time.time() * 1000 > java.lease_end(short[0]), "the lease ended")
    with pytest.raises(LeaseLostError):
        await side(slots.release_many([theirs[2], short[0]]))  # a lease ran out: none
    assert java.lease_end(theirs[2]) is not None
    java.release_many([*theirs[2:], *mine])  # Java gives back redlease's two as well
    assert await side(slots.available()) == 10


async def test_set_and_add_permits_as_redisson_does(side, server, sem_name, java):
    """Redisson's ``testSetPermits`` and ``testAddPermits``, each step by either side."""
    slots = side.client(server.url).lease_semaphore(sem_name)
    await side(slots.set_permits(10))
    assert (java.get_permits(), java.available_permits(), java.acquired_permits()) == (10, 10, 0)
    assert not java.try_set_permits(15) and not await side(slots.try_set_permits(15))
    java.set_permits(15)
    assert await side(slots.available()) == 15
    await side(slots.set_permits(15))  # the same again: nothing changes
    await side(slots.set_permits(5))
    assert java.available_permits() == 5
    held = [java.try_acquire(1, lease=600)[0] for _ in range(2)]
    held.append(await side(slots.acquire(lease=600)))
    assert (java.get_permits(), java.available_permits(), java.acquired_permits()) == (5, 2, 3)
    await side(slots.set_permits(3))
    assert java.available_permits() == 0
    java.set_permits(2)  # fewer in all than are held: -1 free
    stats = await side(slots.statistics())
    assert (stats.available, stats.holders, stats.permits) == (-1, 3, 2)
    await side(slots.add_permits(5))
    assert java.available_permits() == 4
    java.add_permits(-10)
    assert await side(slots.available()) == -6
    await side(slots.add_permits(0))
    assert await side(slots.acquire(timeout=0)) is None  # below zero: nothing to take
    java.add_permits(6)
    java.release_many(held[:2])
    await side(slots.release(held[2]))
    assert java.available_permits() == 3 == await side(slots.available())


async def test_lease_times_are_updated_by_either_side(side, server, sem_name, java):
    """Redisson's ``testUpdateLeaseTime``: either side sets a held permit's lease, shorter or
    longer, on the other's permits too; an id not held answers False."""
    slots = side.client(server.url).lease_semaphore(sem_name)
    assert await side(slots.try_set_permits(2))
    assert not java.update_lease_time("ab" * 16, 1) and not await side(
        slots.update_lease_time("ab" * 16, 1)
    )
    theirs = java.try_acquire(1)[0]  # no lease: never runs out
    before = time.time() * 1000
    assert await side(slots.update_lease_time(theirs, 0.3))
    assert java.lease_end(theirs) < before + 1_000  # shorter now, as Redisson's own update
    await eventually(lambda: java.available_permits() == 2, "Java's permit ran out")
    assert not java.update_lease_time(theirs, 1)
    mine = await side(slots.acquire())  # renewed by the client's watchdog
    assert java.update_lease_time(mine, 600)  # Java gives it ten minutes
    assert time.time() * 1000 + 590_000 < java.lease_end(mine)
    assert await side(slots.update_lease_time(mine, 0.3))  # and redlease shortens it again
    await eventually(lambda: java.available_permits() == 2, "redlease's permit ran out")
    with pytest.raises(LeaseLostError):
        await side(slots.release(mine))
    assert not await side(slots.update_lease_time(mine, 5))


async def test_expiry_set_by_either_side_takes_both_keys(side, server, sem_name, java):
    """Redisson's ``testExpiration``: ``expire`` puts the count and the leases on one expiry,
    and a permit taken later on that semaphore takes it too."""
    raw = redis.Redis.from_url(server.url)
    slots = side.client(server.url).lease_semaphore(sem_name)
    assert not await side(slots.expire(60)) and not java.expire(60)  # nothing there yet
    assert java.try_set_permits(2)
    assert await side(slots.expire(60))
    permit = await side(slots.acquire(lease=600))  # the leases key is new: it gets the expiry
    assert 0 < raw.pttl(java.leases) <= 60_000 and 0 < raw.pttl(sem_name) <= 60_000
    assert java.expire(0.5)
    await eventually(lambda: raw.exists(sem_name, java.leases) == 0, "both keys expired")
    assert await side(slots.available()) == 0
    with pytest.raises((LeaseLostError, InvalidArgumentError)):
        await side(slots.release(permit))
    assert await side(slots.try_set_permits(1))  # a fresh semaphore
    ids = java.try_acquire(1, lease=600)
    assert await side(slots.expire(600)) and 0 < raw.pttl(java.leases) <= 600_000
    await side(slots.release_many(ids))
    raw.close()


@pytest.mark.parametrize("change", ["release_many", "release", "add_permits", "set_permits"])
async def test_a_redisson_change_wakes_a_redlease_waiter(
    side, server, sem_name, java, change, long_recheck
):
    slots = side.client(server.url).lease_semaphore(sem_name)
    assert await side(slots.try_set_permits(2))
    theirs = java.try_acquire(2)
    waiter = Beside(lambda: slots.acquire_many(2, timeout=30), is_async=side.is_async)
    await eventually(waiter.parked, "the redlease waiter is blocked in its wait")
    since = time.monotonic()
    if change == "release_many":
        java.release_many(theirs)
    elif change == "release":
        for permit in theirs:
            java.release(permit)
    elif change == "add_permits":
        java.add_permits(2)
    else:
        java.set_permits(4)
    got = await woken(waiter, since)
    assert len(got) == 2 and set(got).isdisjoint(theirs)
    assert all(java.lease_end(p) is not None for p in got)
    await side(slots.release_many(got))


@pytest.mark.parametrize("change", ["release_many", "release", "add_permits", "set_permits"])
async def test_a_redlease_change_wakes_a_redisson_waiter(side, server, sem_name, java, change):
    slots = side.client(server.url).lease_semaphore(sem_name)
    assert await side(slots.try_set_permits(2))
    mine = await side(slots.acquire_many(2))
    waiter = Beside(lambda: java.acquire(2, wait=30), is_async=False)
    await eventually(lambda: java.waiting, "the Redisson waiter is blocked in its wait")
    since = time.monotonic()
    if change == "release_many":
        assert await side(slots.release_many(mine)) == 2
    elif change == "release":
        for permit in mine:
            await side(slots.release(permit))
    elif change == "add_permits":
        await side(slots.add_permits(2))
    else:
        await side(slots.set_permits(4))
    got = await woken(waiter, since)
    assert len(got) == 2
    assert await side(slots.release_many(got)) == 2  # Java's ids, given back by redlease


async def test_no_permit_is_lost_to_a_mixed_crowd(side, server, sem_name, java):
    """Java threads and redlease callers take 1 or 2 of 3 permits at a time and give them
    back by id, either side giving back what the other took now and then."""
    permits, cycles = 3, 12
    client = side.client(server.url)
    assert java.try_set_permits(permits)
    crowd = Crowd(permits)

    def java_work(seed: int) -> int:
        driver = RedissonPermitExpirableSemaphore(server.url, sem_name)
        rng = random.Random(seed)
        try:
            for _ in range(cycles):
                ids = driver.acquire(rng.choice((1, 2)), wait=30, lease=60)
                assert ids
                crowd.enter(len(ids))
                time.sleep(rng.random() * 0.003)
                crowd.leave(len(ids))
                driver.release_many(ids)
            assert driver.odd == []
            return cycles
        finally:
            driver.close()

    async def redlease_work(seed: int) -> int:
        slots, rng = client.lease_semaphore(sem_name), random.Random(seed)
        for _ in range(cycles):
            ids = await side(slots.acquire_many(rng.choice((1, 2)), timeout=30))
            assert ids
            crowd.enter(len(ids))
            await asyncio.sleep(rng.random() * 0.003)
            crowd.leave(len(ids))
            assert await side(slots.release_many(ids)) == len(ids)
        return cycles

    assert await crowd.run(side, java_work, redlease_work) == ([cycles] * 2, [cycles] * 2)
    assert 1 <= crowd.peak <= permits
    assert java.available_permits() == permits and java.acquired_permits() == 0
    stats = await side(client.lease_semaphore(sem_name).statistics())
    assert (stats.available, stats.holders) == (permits, 0)
