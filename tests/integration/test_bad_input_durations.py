"""Bad durations and counts on a real server (issue #12 items 1, 2, 4): each is refused with an
``InvalidArgumentError`` naming the argument before anything is written; huge but valid
values work; each test on the sync and asyncio side."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

import redlease
from redlease import InvalidArgumentError, RedleaseError
from redlease._core.arguments import MAX_COUNT, MAX_LEASE, MIN_LEASE
from redlease.testing import RedisServer

HUGE_LEASES = [1e14, 1e306, 1e11, MAX_LEASE * 1.001, 10**400, timedelta(days=4000)]
TINY_LEASES = [0.002, 0.001, 1e-9, MIN_LEASE / 2, timedelta(milliseconds=2)]
NOT_LEASES = [0, -1, math.nan, math.inf, -math.inf, True, "10", b"10"]
BAD_COUNTS = [2**63, 2**63 - 1, 2**64, MAX_COUNT + 1, 10**30, 1.0, True, "3", math.nan]


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port)
    yield client
    client.close()


def written(raw: redis.Redis, name: str) -> list[bytes]:
    """Every key that mentions ``name`` (locks, semaphores, latches and their helper keys)."""
    return sorted(raw.scan_iter(match=f"*{name}*", count=1000))


async def refused(side: Any, call: Any, what: str) -> InvalidArgumentError:
    """``call()`` raises ``InvalidArgumentError`` naming ``what`` (nothing else, nothing raw)."""
    with pytest.raises(InvalidArgumentError) as info:
        await side(call())
    assert isinstance(info.value, RedleaseError) and isinstance(info.value, ValueError)
    assert what in str(info.value), str(info.value)
    return info.value


# --- item 1: huge leases --------------------------------------------------------------------


@pytest.mark.parametrize("lease", HUGE_LEASES + TINY_LEASES + NOT_LEASES, ids=repr)
async def test_a_bad_lease_is_refused_before_anything_is_written(
    side: Any, server: RedisServer, raw: redis.Redis, name: str, lease: Any
) -> None:
    client = side.client(server.url)
    lock = client.lock(name)
    await refused(side, lambda: lock.acquire(blocking=False, lease=lease), "lease")
    await refused(side, lambda: lock.acquire(timeout=1, lease=lease), "lease")
    await refused(side, lambda: client.lock(name, lease=lease), "lease")
    await refused(side, lambda: client.fair_lock(name).acquire(lease=lease), "lease")
    rw = client.rw_lock(name)
    await refused(side, lambda: rw.read_lock().acquire(lease=lease), "lease")
    await refused(side, lambda: rw.write_lock().acquire(lease=lease), "lease")
    await refused(side, lambda: client.rw_lock(name, lease=lease), "lease")
    sem = client.lease_semaphore(name)
    await refused(side, lambda: client.lease_semaphore(name, lease=lease), "lease")
    await refused(side, lambda: sem.acquire(timeout=0, lease=lease), "lease")
    assert written(raw, name) == []
    assert not await side(lock.locked())


@pytest.mark.parametrize("value", HUGE_LEASES + TINY_LEASES + NOT_LEASES, ids=repr)
async def test_a_bad_watchdog_timeout_or_handoff_window_is_refused(
    side: Any, server: RedisServer, value: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match="watchdog_timeout"):
        side.client(server.url, watchdog_timeout=value)
    if value != 0:  # 0 turns hand-overs off
        with pytest.raises(InvalidArgumentError, match="handoff_window"):
            side.client(server.url, handoff_window=value)


async def test_the_longest_lease_works_and_leaves_a_ttl(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    client = side.client(server.url)
    lock = client.lock(name)
    assert await side(lock.acquire(blocking=False, lease=MAX_LEASE))
    ttl = raw.pttl(name)
    assert MAX_LEASE * 1000 - 60_000 < ttl <= MAX_LEASE * 1000
    await side(lock.release())
    assert raw.exists(name) == 0
    write = client.rw_lock(name).write_lock()
    assert await side(write.acquire(lease=timedelta(days=3650)))
    assert await side(write.ttl()) > 3649 * 86400
    await side(write.release())
    sem = client.lease_semaphore(name)
    assert await side(sem.try_set_permits(1))
    permit = await side(sem.acquire(lease=MAX_LEASE))
    assert permit is not None
    await side(sem.release(permit))


async def test_the_longest_watchdog_timeout_works(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    """A watchdog lease of 10 years: the hold gets it as its TTL, and the watchdog (which
    sleeps a third of it) neither dies nor keeps the client from closing."""
    client = side.client(server.url, watchdog_timeout=MAX_LEASE, handoff_window=MAX_LEASE)
    lock = client.lock(name)
    assert await side(lock.acquire())
    assert raw.pttl(name) > (MAX_LEASE - 60) * 1000
    await side(lock.release())
    await side(client.close())


# --- item 2: tiny leases; no spinning -------------------------------------------------------


async def test_the_shortest_lease_can_succeed(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    """10 ms is enough for a grant on a server nearby; a retry never spins."""
    client = side.client(server.url)
    lock = client.lock(name)
    got = 0
    for _ in range(20):
        if await side(lock.acquire(timeout=2.0, lease=MIN_LEASE)):
            got += 1
            with contextlib.suppress(redlease.LeaseLostError):  # 10 ms: it may have run out
                await side(lock.release())
    assert got > 0


async def test_a_waiter_for_a_short_lease_does_not_spin(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    """A lock held by another (its lease 0.5 s): a waiter with the shortest lease sends a
    handful of scripts, not thousands, until it gets the lock."""
    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire(lease=0.5))
    before = _script_calls(raw)
    waiter = side.client(server.url).lock(name)
    assert await side(waiter.acquire(timeout=5.0, lease=MIN_LEASE))
    assert _script_calls(raw) - before < 200


def _script_calls(raw: redis.Redis) -> int:
    stats = raw.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k.startswith(("cmdstat_evalsha",)))


# --- waits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [1e300, 1e12, timedelta.max], ids=repr)
async def test_a_huge_wait_timeout_simply_waits(
    side: Any, server: RedisServer, name: str, timeout: Any
) -> None:
    client = side.client(server.url)
    other = side.client(server.url)
    lock = client.lock(name)
    assert await side(other.lock(name).acquire(lease=0.3))
    start = time.monotonic()
    assert await side(lock.acquire(timeout=timeout))  # after the other's lease ran out
    assert time.monotonic() - start < 10
    await side(lock.release())
    sem = client.semaphore(name + ":s")
    assert await side(sem.try_set_permits(1))
    assert await side(sem.acquire(timeout=timeout))
    lsem = client.lease_semaphore(name + ":l")
    assert await side(lsem.try_set_permits(1))
    assert await side(other.lease_semaphore(name + ":l").acquire(lease=0.3)) is not None
    assert await side(lsem.acquire(timeout=timeout)) is not None  # the other's lease ran out
    assert await side(client.latch(name + ":g").wait(timeout=timeout))  # never set: open
    read = client.rw_lock(name + ":rw").read_lock()
    assert await side(read.acquire(timeout=timeout))
    await side(read.release())


async def test_a_huge_wait_on_a_latch_is_woken(side: Any, server: RedisServer, name: str) -> None:
    client = side.client(server.url)
    gate = client.latch(name)
    assert await side(gate.try_set_count(1))
    opener = redlease.Client.from_url(server.url)
    timer = threading.Timer(0.2, lambda: opener.latch(name).count_down())
    timer.start()
    try:
        assert await side(gate.wait(timeout=1e300))
    finally:
        timer.join(5)
        opener.close()


@pytest.mark.parametrize("timeout", [-1, math.nan, math.inf, "5", True], ids=repr)
async def test_a_bad_wait_timeout_is_refused_before_anything_is_written(
    side: Any, server: RedisServer, raw: redis.Redis, name: str, timeout: Any
) -> None:
    client = side.client(server.url)
    await refused(side, lambda: client.lock(name).acquire(timeout=timeout), "timeout")
    await refused(side, lambda: client.semaphore(name).acquire(timeout=timeout), "timeout")
    await refused(side, lambda: client.lease_semaphore(name).acquire(timeout=timeout), "timeout")
    await refused(side, lambda: client.latch(name).wait(timeout=timeout), "timeout")
    assert written(raw, name) == []


# --- item 4: huge counts --------------------------------------------------------------------


@pytest.mark.parametrize("count", BAD_COUNTS, ids=repr)
async def test_a_count_out_of_range_is_refused_before_anything_is_written(
    side: Any, server: RedisServer, raw: redis.Redis, name: str, count: Any
) -> None:
    client = side.client(server.url)
    sem = client.semaphore(name)
    await refused(side, lambda: sem.try_set_permits(count), "permits")
    await refused(side, lambda: sem.add_permits(count), "permits")
    await refused(side, lambda: client.lease_semaphore(name).try_set_permits(count), "permits")
    await refused(side, lambda: client.latch(name).try_set_count(count), "count")
    assert written(raw, name) == []
    assert await side(sem.try_set_permits(2))
    await refused(side, lambda: sem.acquire(count, timeout=0), "permits")
    await refused(side, lambda: sem.release(count), "permits")
    assert raw.get(name) == b"2"


async def test_the_largest_count_works_and_cannot_be_passed(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    client = side.client(server.url)
    sem = client.semaphore(name)
    assert await side(sem.try_set_permits(MAX_COUNT))
    await refused(side, lambda: sem.add_permits(1), "nothing was added")
    assert int(raw.get(name) or 0) == MAX_COUNT
    assert await side(sem.acquire(MAX_COUNT, timeout=0))
    assert await side(sem.available()) == 0
    await side(sem.release(MAX_COUNT))
    assert await side(sem.available()) == MAX_COUNT
    assert await side(sem.acquire(3, timeout=0))
    await side(sem.release(3))  # still usable
    gate = client.latch(name + ":g")
    assert await side(gate.try_set_count(MAX_COUNT))
    await side(gate.count_down())
    assert await side(gate.count()) == MAX_COUNT - 1


async def test_adding_past_the_largest_count_changes_nothing(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    client = side.client(server.url)
    sem = client.semaphore(name)
    assert await side(sem.try_set_permits(MAX_COUNT - 5))
    await side(sem.add_permits(5))
    await refused(side, lambda: sem.add_permits(1), "more than")
    assert int(raw.get(name) or 0) == MAX_COUNT
    assert (await side(sem.statistics())).permits == MAX_COUNT


async def test_a_release_past_the_largest_count_of_a_semaphore_set_elsewhere_is_refused(
    side: Any, server: RedisServer, raw: redis.Redis, name: str
) -> None:
    """A semaphore set by a Redisson client (no total kept): a release may not push its
    count past the bound (the scripts' arithmetic would go wrong)."""
    raw.set(name, MAX_COUNT - 1)
    sem = side.client(server.url).semaphore(name)
    await side(sem.release(1))
    await refused(side, lambda: sem.release(1), "more than")
    assert int(raw.get(name) or 0) == MAX_COUNT


# --- the CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", ["1e14", "1e306", "0.002"])
def test_cli_run_refuses_a_lease_out_of_range_before_taking_the_lock(
    server: RedisServer, raw: redis.Redis, name: str, lease: str, capsys: Any
) -> None:
    from redlease import cli

    code = cli.main(
        ["run", "--url", server.url, "--wait", "0", "--lease", lease, name, "--", "true"]
    )
    assert code == 2
    assert "--lease must be" in capsys.readouterr().err
    assert written(raw, name) == []


def test_cli_run_takes_a_huge_wait(server: RedisServer, raw: redis.Redis, name: str) -> None:
    from redlease import cli

    code = cli.main(["run", "--url", server.url, "--wait", "1e300", name, "--", "true"])
    assert code == 0
    assert raw.exists(name) == 0  # taken, then released


# --- Redlock ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", [1e14, 0.002, math.nan], ids=repr)
async def test_redlock_refuses_a_bad_lease(
    side: Any, server: RedisServer, raw: redis.Redis, name: str, lease: Any
) -> None:
    factory = redlease.AsyncRedlockClient if side.is_async else redlease.RedlockClient
    for what, kwargs in (
        ("watchdog_timeout", {"watchdog_timeout": lease}),
        ("master_timeout", {"master_timeout": math.nan}),
    ):
        with pytest.raises(InvalidArgumentError, match=what):
            factory.from_urls([server.url], **kwargs)
    client = factory.from_urls([server.url])
    try:
        lock = client.lock(name)
        await refused(side, lambda: lock.acquire(blocking=False, lease=lease), "lease")
        await refused(side, lambda: client.lock(name, lease=lease), "lease")
        await refused(side, lambda: lock.acquire(timeout=math.inf), "timeout")
        assert written(raw, name) == []
        assert await side(lock.acquire(timeout=1e300, lease=MAX_LEASE))
        assert raw.pttl(name) > (MAX_LEASE - 60) * 1000
        await side(lock.release())
    finally:
        await side(client.close())
    await asyncio.sleep(0)
