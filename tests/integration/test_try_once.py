"""``timeout=0`` means "try once" everywhere (issue #25, section 3), as
``threading.Lock.acquire(timeout=0)``, redis-py's ``blocking_timeout=0`` and
``redlease run --wait 0``: on a free primitive it takes it, on a taken one it answers at once
(``False``, ``None`` or ``LockTimeoutError``, as that call does for a timeout) and never waits
for a wake-up. ``blocking=False`` is the same single try, ``hold(blocking=False)`` included.

Every taken primitive below stays taken for the whole test (a watchdog-renewed hold, a permit
never given back): a call that waited for a wake-up would never return (the test would time
out), so an answer at all shows it did not wait. Each test on the sync and asyncio side."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from redlease import InvalidArgumentError, LockTimeoutError
from redlease.testing import RedisServer

from . import redlock_fixtures as fixtures
from .helpers import eventually
from .redlock_fixtures import redlock

redlock_binary, five, three = fixtures.redlock_binary, fixtures.five, fixtures.three

LOCKS: dict[str, Callable[[Any, str], Any]] = {
    "lock": lambda client, name: client.lock(name),
    "fair": lambda client, name: client.fair_lock(name),
    "fair-redisson": lambda client, name: client.fair_lock(name, layout="redisson"),
    "read": lambda client, name: client.rw_lock(name).read_lock(),
    "write": lambda client, name: client.rw_lock(name).write_lock(),
    "write-redisson": lambda client, name: client.rw_lock(name, layout="redisson").write_lock(),
}


def taker(kind: str, client: Any, name: str) -> Any:
    """What takes the lock away from ``kind``: the write side for a reader, else the same."""
    if kind == "read":
        return client.rw_lock(name).write_lock()
    return LOCKS[kind](client, name)


@pytest.mark.parametrize("kind", LOCKS)
async def test_timeout_zero_takes_a_free_lock_and_answers_at_once_when_taken(
    side: Any, server: RedisServer, name: str, kind: str
) -> None:
    client = side.client(server.url)
    lock = LOCKS[kind](client, name)
    assert await side(lock.acquire(timeout=0))
    assert await side(lock.acquire(timeout=0))  # a re-entry is a try that succeeds
    assert await side(lock.hold_count()) == 2
    await side(lock.release())
    await side(lock.release())
    assert await side(lock.acquire(blocking=False, timeout=0))  # both say "one try"
    await side(lock.release())

    holder = taker(kind, side.client(server.url), name)
    assert await side(holder.acquire())  # watchdog-renewed: taken for the whole test
    assert not await side(lock.acquire(timeout=0))
    assert not await side(lock.acquire(timeout=0.0))
    assert not await side(lock.acquire(blocking=False))
    assert not await side(lock.acquire(blocking=False, timeout=0))
    for kwargs in ({"timeout": 0}, {"blocking": False}):
        with pytest.raises(LockTimeoutError) as info:
            async with side.hold(lock, **kwargs):
                pytest.fail("entered a taken lock")
        assert "single try" in str(info.value)
        assert info.value.name.startswith(name)  # a side: "<name> (read)"
    stats = await side(lock.statistics())
    assert stats.waiters == 0 and stats.local_waiters == 0  # nobody joined a line
    await side(holder.release())

    async with side.hold(lock, timeout=0) as lease:
        assert lease.hold_count == 1
    async with side.hold(lock, blocking=False) as lease:
        assert lease.hold_count == 1
    assert not await side(lock.locked())


@pytest.mark.parametrize("kind", LOCKS)
async def test_bad_timeouts_stay_refused(side: Any, server: RedisServer, name: str, kind: str):
    lock = LOCKS[kind](side.client(server.url), name)
    for bad in (-1, -1e-9, float("nan"), float("inf"), "0", True):
        with pytest.raises(InvalidArgumentError, match="timeout"):
            await side(lock.acquire(timeout=bad))
        with pytest.raises(InvalidArgumentError, match="timeout"):
            async with side.hold(lock, timeout=bad):
                pass
    with pytest.raises(InvalidArgumentError, match="blocking=False"):
        await side(lock.acquire(blocking=False, timeout=1))
    with pytest.raises(InvalidArgumentError, match="blocking=False"):
        async with side.hold(lock, timeout=1, blocking=False):
            pass
    assert not await side(lock.locked())


async def test_timeout_zero_skips_the_local_line(side: Any, server: RedisServer, name: str):
    """A task (thread) of a client whose other task waits for the lock in the client's local
    line tries once at the server: ``False`` at once, without queueing behind the waiter."""
    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    client = side.client(server.url)
    lock = client.lock(name)
    waited: list[bool] = []
    if side.is_async:

        async def wait_task() -> None:  # a hold belongs to its task: released there
            waited.append(await lock.acquire(timeout=60))
            await lock.release()

        waiter: Any = asyncio.ensure_future(wait_task())
    else:

        def wait() -> None:
            waited.append(lock.acquire(timeout=60))
            lock.release()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()

    async def queued() -> bool:
        return (await side(lock.statistics())).local_waiters >= 1

    await eventually(queued)
    assert not await side(lock.acquire(timeout=0))
    with pytest.raises(LockTimeoutError):
        async with side.hold(lock, timeout=0):
            pass
    await side(holder.release())
    if side.is_async:
        await asyncio.wait_for(waiter, 60)
    else:
        await asyncio.to_thread(waiter.join, 60)
    assert waited == [True]


async def test_timeout_zero_on_semaphores_and_latches(side: Any, server: RedisServer, name: str):
    client = side.client(server.url)
    other = side.client(server.url)

    sem = client.semaphore(f"{name}:sem")
    assert await side(sem.try_set_permits(1))
    assert await side(sem.acquire(timeout=0))  # free: taken
    assert not await side(other.semaphore(f"{name}:sem").acquire(timeout=0))  # none left
    with pytest.raises(LockTimeoutError, match="single try"):
        async with side.hold(other.semaphore(f"{name}:sem"), timeout=0):
            pass
    await side(sem.release())
    async with side.hold(sem, timeout=0):
        assert await side(sem.available()) == 0

    leases = client.lease_semaphore(f"{name}:lease")
    assert await side(leases.try_set_permits(1))
    permit = await side(leases.acquire(timeout=0))
    assert permit is not None
    assert await side(other.lease_semaphore(f"{name}:lease").acquire(timeout=0)) is None
    with pytest.raises(LockTimeoutError, match="single try"):
        async with side.hold(other.lease_semaphore(f"{name}:lease"), timeout=0):
            pass
    await side(leases.release(permit))
    async with side.hold(leases, timeout=0) as permit_id:
        assert permit_id is not None

    gate = client.latch(f"{name}:latch")
    assert await side(gate.wait(timeout=0))  # never set: open
    assert await side(gate.try_set_count(1))
    assert not await side(gate.wait(timeout=0))
    await side(gate.count_down())
    assert await side(gate.wait(timeout=0))


async def test_timeout_zero_on_redlock_and_multilock(side: Any, three: list[Any], name: str):
    from redlease._async.multilock import AsyncMultiLock
    from redlease._sync.multilock import MultiLock

    multi: Callable[..., Any] = AsyncMultiLock if side.is_async else MultiLock
    lock = redlock(side, three).lock(name)
    assert await side(lock.acquire(timeout=0))
    await side(lock.release())
    holder = redlock(side, three).lock(name)
    assert await side(holder.acquire())
    assert not await side(lock.acquire(timeout=0))
    assert not await side(lock.acquire(blocking=False))
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await side(lock.acquire(timeout=-1))

    single = side.client(three[0].url)
    members = multi(single.lock(f"{name}:a"), lock)
    assert not await side(members.acquire(timeout=0))  # one member taken: none held
    assert not await side(single.lock(f"{name}:a").locked())
    await side(holder.release())
    assert await side(members.acquire(timeout=0))
    assert await side(single.lock(f"{name}:a").owned())
    await side(members.release())
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await side(members.acquire(timeout=-1))


async def test_locked_with_timeout_zero_raises_at_once(side: Any, server: RedisServer, name: str):
    client = side.client(server.url)
    runs: list[int] = []
    if side.is_async:

        @client.exclusive(name, timeout=0)
        async def job(n: int) -> int:
            runs.append(n)
            return n

    else:

        @client.exclusive(name, timeout=0)
        def job(n: int) -> int:
            runs.append(n)
            return n

    def call(n: int) -> Awaitable[int] | int:
        return job(n)

    assert await side(call(1)) == 1
    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    with pytest.raises(LockTimeoutError):
        await side(call(2))
    await side(holder.release())
    assert await side(call(3)) == 3
    assert runs == [1, 3]
