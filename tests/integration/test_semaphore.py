"""The semaphore and the lease semaphore on a real server, each test on the sync and asyncio side.

Classes are built directly (``Semaphore(client, name)``) until the clients get factories.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redlease
from redlease import InvalidArgumentError, LeaseLostError, LockTimeoutError
from redlease._async.semaphore import AsyncLeaseSemaphore, AsyncSemaphore
from redlease._asyncio.subscriber import wait as subscriber_wait
from redlease._core import arguments
from redlease._core import lease_semaphore as lease_core
from redlease._core import semaphore as core
from redlease._core.keys import LeaseSemaphoreKeys, SemaphoreKeys
from redlease._sync.semaphore import LeaseSemaphore, Semaphore

from .helpers import eventually, reply_scores, ttl_rises

WORKER = str(Path(__file__).with_name("semaphore_worker.py"))


def semaphore(side: Any, client: Any, name: str) -> Any:
    return (AsyncSemaphore if side.is_async else Semaphore)(client, name)


def lease_semaphore(side: Any, client: Any, name: str, **kwargs: Any) -> Any:
    return (AsyncLeaseSemaphore if side.is_async else LeaseSemaphore)(client, name, **kwargs)


class Background:
    """One call run beside the test body: a task (async side) or a thread (sync side)."""

    def __init__(self, side: Any, call: Callable[[], Any]) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._thread: threading.Thread | None = None
        self._result: list[Any] = []
        if side.is_async:
            self._task = asyncio.create_task(call())
        else:

            def run() -> None:
                try:
                    self._result.append(call())
                except BaseException as exc:  # reported by result()
                    self._result.append(exc)

            self._thread = threading.Thread(target=run, daemon=True)
            self._thread.start()

    async def result(self, timeout: float = 30.0) -> Any:
        if self._task is not None:
            return await asyncio.wait_for(self._task, timeout)
        assert self._thread is not None
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not self._thread.is_alive(), f"background call still running after {timeout} s"
        value = self._result[0]
        if isinstance(value, BaseException):
            raise value
        return value


def parked(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is suspended in the subscriber's wait for a wake-up (after subscribing
    and re-trying). Cancel a waiter only there: Python 3.11's ``asyncio.wait_for``, which the
    subscriber uses to await its subscription, drops a cancellation that lands just as the
    confirmation arrives (CPython gh-86296), and the waiter would then wait on."""
    coro: Any = task.get_coro()
    for _ in range(50):  # the await chain: acquire -> _run -> wait -> wait_for -> ...
        if coro is None:
            return False
        if getattr(coro, "cr_code", None) is subscriber_wait.__code__:
            return True
        coro = getattr(coro, "cr_await", None)
    return False


async def waiters_are(side: Any, sem: Any, count: int) -> bool:
    return bool((await side(sem.statistics())).waiters == count)


# --- the counting semaphore -----------------------------------------------------------------


async def test_semaphore_set_take_give_and_statistics(side, server, name):
    sem = semaphore(side, side.client(server.url), name)
    assert await side(sem.available()) == 0
    stats = await side(sem.statistics())
    assert (stats.permits, stats.available, stats.holders) == (None, 0, None)
    assert not await side(sem.acquire(timeout=0))  # never set: nothing to take
    assert await side(sem.try_set_permits(3))
    assert not await side(sem.try_set_permits(5))  # only if never set
    assert await side(sem.acquire(2))
    assert await side(sem.available()) == 1
    assert not await side(sem.acquire(2, timeout=0))
    assert not await side(sem.acquire(2, timeout=0.2))
    stats = await side(sem.statistics())
    assert (stats.name, stats.permits, stats.available, stats.holders) == (name, 3, 1, 2)
    assert (stats.waiters, stats.local_waiters, stats.ttl) == (0, 0, None)
    await side(sem.release(2))
    await side(sem.add_permits(2))
    stats = await side(sem.statistics())
    assert (stats.permits, stats.available, stats.holders) == (5, 5, 0)


async def test_semaphore_bad_arguments_name_the_argument(side, server, name):
    client = side.client(server.url)
    sem = semaphore(side, client, name)
    assert await side(sem.try_set_permits(2))
    calls = (sem.acquire, sem.release, sem.try_set_permits, sem.add_permits, sem.set_permits)
    for bad in (True, 1.5, "1", None, 2**53, -(2**53)):
        for call in calls:
            with pytest.raises(InvalidArgumentError, match="permits"):
                await side(call(bad))
    # as in Redisson: 0 and negative counts are refused where they make no sense...
    for call in (sem.acquire, sem.release, sem.set_permits):
        with pytest.raises(InvalidArgumentError, match="permits"):
            await side(call(-1))
    with pytest.raises(InvalidArgumentError, match="permits"):
        await side(sem.try_set_permits(0))
    # ...and accepted where Redisson accepts them: tryAcquire(0), release(0), addPermits(0)
    # change nothing; addPermits(-n) takes permits away (tests/interop/)
    assert await side(sem.acquire(0, timeout=0))
    await side(sem.release(0))
    await side(sem.add_permits(0))
    for bad_timeout in (-1, float("nan"), "5", True):
        with pytest.raises(InvalidArgumentError, match="timeout"):
            await side(sem.acquire(1, timeout=bad_timeout))
    with pytest.raises(InvalidArgumentError, match="permits=3"):
        await side(sem.acquire(3))  # more than it has in total: it could never succeed
    assert await side(sem.available()) == 2  # nothing changed by the refused calls
    for bad_name in ("", "a}b{", "x{}y", 42):
        with pytest.raises(InvalidArgumentError, match="name"):
            semaphore(side, client, bad_name)  # type: ignore[arg-type]  # wrong on purpose


async def test_semaphore_waiter_is_woken_by_a_release(side, server, name, long_recheck):
    holder = semaphore(side, side.client(server.url), name)
    waiter = semaphore(side, side.client(server.url), name)
    assert await side(holder.try_set_permits(1))
    assert await side(holder.acquire())
    pending = Background(side, lambda: waiter.acquire(timeout=20))
    await eventually(lambda: waiters_are(side, holder, 1))

    async def listening() -> bool:  # registered on the server first, then listening
        stats = await side(waiter.statistics())
        return bool((stats.waiters, stats.local_waiters) == (1, 1))

    await eventually(listening)
    released_at = time.monotonic()
    await side(holder.release())
    assert await pending.result()
    # (no re-check within its 20 s: long_recheck)
    assert time.monotonic() - released_at < long_recheck, "woken by pub/sub, not a re-check"
    stats = await side(holder.statistics())
    assert (stats.available, stats.holders, stats.waiters) == (0, 1, 0)
    await side(waiter.release())


async def test_semaphore_timeout_leaves_nothing_behind(side, server, name):
    sem = semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(1))
    assert await side(sem.acquire())
    started = time.monotonic()
    assert not await side(semaphore(side, side.client(server.url), name).acquire(timeout=0.3))
    assert 0.25 < time.monotonic() - started < 5
    stats = await side(sem.statistics())
    assert (stats.available, stats.waiters) == (0, 0)
    await side(sem.release())


async def test_semaphore_permit_accounting_under_concurrency(side, server, name):
    permits, workers, cycles = 3, 6, 12
    clients = [side.client(server.url) for _ in range(2)]
    assert await side(semaphore(side, clients[0], name).try_set_permits(permits))
    in_use = peak = 0
    mutex = threading.Lock()

    def enter(k: int) -> None:
        nonlocal in_use, peak
        with mutex:
            in_use += k
            peak = max(peak, in_use)

    def leave(k: int) -> None:
        nonlocal in_use
        with mutex:
            in_use -= k

    if side.is_async:

        async def work(i: int) -> None:
            sem, rng = AsyncSemaphore(clients[i % 2], name), random.Random(i)
            for _ in range(cycles):
                k = rng.choice((1, 1, 2))
                assert await sem.acquire(k, timeout=30)
                enter(k)
                await asyncio.sleep(rng.random() * 0.002)
                leave(k)
                await sem.release(k)

        await asyncio.wait_for(asyncio.gather(*(work(i) for i in range(workers))), 60)
    else:

        def work_in_thread(i: int) -> None:
            sem, rng = Semaphore(clients[i % 2], name), random.Random(i)
            for _ in range(cycles):
                k = rng.choice((1, 1, 2))
                assert sem.acquire(k, timeout=30)
                enter(k)
                time.sleep(rng.random() * 0.002)
                leave(k)
                sem.release(k)

        threads = [threading.Thread(target=work_in_thread, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert 1 < peak <= permits
    stats = await side(semaphore(side, clients[1], name).statistics())
    assert (stats.permits, stats.available, stats.holders, stats.waiters) == (3, 3, 0, 0)


async def test_semaphore_retried_requests_count_once(side, server, name):
    client = side.client(server.url)
    sem = semaphore(side, client, name)
    keys = SemaphoreKeys.for_name(name)
    assert await side(sem.try_set_permits(3))
    take = core.acquire_call(keys, "some-client:1", 2, "request-1", register=False)
    for _ in range(2):  # the same request sent twice (a reply lost on the way back)
        assert int((await side(client._call(take, name)))[0]) == core.GRANTED
    assert await side(sem.available()) == 1
    give = core.release_call(keys, 2, "request-2")
    for _ in range(2):
        assert int((await side(client._call(give, name)))[0]) == core.RELEASED
    assert await side(sem.available()) == 3


async def test_added_set_and_several_permit_requests_retried_count_once(side, server, name):
    """A request sent again after its reply was lost (same request id) changes nothing more:
    add_permits (either sign), set_permits, acquire_many, release_many."""
    client = side.client(server.url)
    sem = semaphore(side, client, name)
    keys = SemaphoreKeys.for_name(name)
    assert await side(sem.try_set_permits(3))
    for _ in range(2):
        await side(client._run(core.add_permits(keys, -2, "request-1"), name))
    assert await side(sem.available()) == 1
    for _ in range(2):
        await side(client._run(core.set_permits(keys, 5), name))
    stats = await side(sem.statistics())
    assert (stats.available, stats.permits) == (5, 5)
    slots = lease_semaphore(side, client, name + ":slots")
    lkeys = LeaseSemaphoreKeys.for_name(name + ":slots")
    assert await side(slots.try_set_permits(4))
    for _ in range(2):
        await side(client._run(lease_core.lease_add_permits(lkeys, 2, "request-2"), name))
    assert await side(slots.available()) == 6
    ids = [lease_core.new_permit_id() for _ in range(3)]
    take = lease_core.lease_acquire_call(lkeys, "some-client:1", ids[0], 30.0, False, ids[1:])
    for _ in range(2):
        assert int((await side(client._call(take, name)))[0]) == core.GRANTED
    assert await side(slots.available()) == 3
    give = lease_core.release_many_call(lkeys, ids, ["r1", "r2", "r3"])
    for _ in range(2):
        reply = await side(client._call(give, name))
        assert int(reply[0]) == core.RELEASED
    assert list(reply[3:]) == [core.RELEASED_BEFORE] * 3  # the retry: already given back
    assert await side(slots.available()) == 6


async def test_lease_semaphore_several_permits_and_their_leases(side, server, name):
    """Redisson's ``testTryAcquireMany``, ``testReleaseManyExpiredDoesNotThrow`` and
    ``testTryReleaseManyExpired`` on the redlease side alone."""
    slots = lease_semaphore(side, side.client(server.url), name)
    assert await side(slots.try_set_permits(10))
    four = await side(slots.acquire_many(4, timeout=0))
    five = await side(slots.acquire_many(5, timeout=0))
    assert len(four) == 4 and len(five) == 5 and not set(four) & set(five)
    assert await side(slots.available()) == 1
    assert await side(slots.acquire_many(2, timeout=0)) is None  # all or none
    assert await side(slots.acquire_many(2, timeout=0.2)) is None
    assert await side(slots.available()) == 1
    assert await side(slots.release_many(five)) == 5
    short = await side(slots.acquire_many(3, lease=0.2))
    await eventually(lambda: _available_is(side, slots, 6))  # the 3 leases ran out
    with pytest.raises(LeaseLostError):
        await side(slots.release_many(short))
    assert await side(slots.release_many(four)) == 4
    assert await side(slots.available()) == 10
    stats = await side(slots.statistics())
    assert (stats.permits, stats.holders) == (10, 0)


async def _available_is(side: Any, slots: Any, available: int) -> bool:
    return bool(await side(slots.available()) == available)


async def test_semaphore_keeps_redisson_layout(side, server, name):
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    pubsub = raw.pubsub()
    pubsub.subscribe(f"redisson_sc:{{{name}}}")
    assert pubsub.get_message(timeout=5) is not None  # subscribe confirmation
    sem = semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(3))
    assert raw.get(name) == "3"
    assert await side(sem.acquire(2))
    assert raw.get(name) == "1"
    await side(sem.release(2))
    messages = [pubsub.get_message(timeout=5) for _ in range(2)]
    assert [m["data"] for m in messages if m] == ["3", "3"]  # set, then the count after release
    raw.decrby(name, 1)  # what a Redisson client's tryAcquire does
    assert await side(sem.available()) == 2
    pubsub.close()
    raw.close()


async def test_semaphore_with_statement_and_bounded_hold(side, server, name):
    sem = semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(1))
    if side.is_async:
        async with sem:
            assert await sem.available() == 0
    else:
        with sem:
            assert sem.available() == 0
    async with side.hold(sem, permits=1, timeout=1):
        other = semaphore(side, side.client(server.url), name)
        with pytest.raises(LockTimeoutError) as info:
            async with side.hold(other, timeout=0.2):
                pass
        assert isinstance(info.value, TimeoutError) and info.value.name == name
    assert await side(sem.available()) == 1


_OPS = st.lists(
    st.tuples(st.sampled_from(["set", "add", "take", "give"]), st.integers(1, 4)),
    max_size=25,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_semaphore_scripts_match_a_model(server, ops):
    """Any sequence of set/add/take/give leaves exactly what a simple model says, refuses
    what the model refuses, and never lets the count go below zero or above the total."""
    name = f"model:{os.urandom(6).hex()}"
    with redlease.Client.from_url(server.url) as client:
        sem = Semaphore(client, name)
        available, total = 0, None
        for op, n in ops:
            if op == "set":
                assert sem.try_set_permits(n) == (total is None)
                if total is None:
                    available = total = n
            elif op == "add":
                sem.add_permits(n)
                available += n
                total = n if total is None else total + n
            elif op == "take":
                if total is not None and n > total:
                    with pytest.raises(InvalidArgumentError):
                        sem.acquire(n, timeout=0)
                else:
                    taken = sem.acquire(n, timeout=0)
                    assert taken == (available >= n)
                    available -= n if taken else 0
            elif total is None:
                with pytest.raises(InvalidArgumentError):
                    sem.release(n)
            else:  # as in Redisson, more may be given back than was taken: the total follows
                sem.release(n)
                available += n
                total = max(total, available)
            stats = sem.statistics()
            assert (stats.available, stats.permits) == (available, total)
            assert available >= 0 and (total is None or available <= total)


async def test_cancelled_semaphore_acquire_never_leaks_a_permit(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        sem = AsyncSemaphore(client, name)
        assert await sem.try_set_permits(2)
        for i in range(40):
            task = asyncio.create_task(sem.acquire(2))
            # cancel at varying points: before sending, in flight, after the grant
            for _ in range(i % 4):
                await asyncio.sleep(0)
            await asyncio.sleep((i % 7) * 0.0002)
            task.cancel()
            try:
                granted = await task
            except asyncio.CancelledError:
                granted = False
            if granted:  # finished before the cancel landed: the permits are that task's
                await sem.release(2)
            assert await sem.available() == 2, f"iteration {i}: a cancelled acquire kept permits"


async def test_cancelled_waiting_acquire_and_cancelled_release(server, name):
    async with (
        redlease.AsyncClient.from_url(server.url) as holder_client,
        redlease.AsyncClient.from_url(server.url) as client,
    ):
        holder, sem = AsyncSemaphore(holder_client, name), AsyncSemaphore(client, name)
        assert await holder.try_set_permits(1)
        assert await holder.acquire()
        task = asyncio.create_task(sem.acquire(timeout=30))
        await eventually(lambda: parked(task))
        assert (await holder.statistics()).waiters == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await holder.statistics()).waiters == 0  # it left the waiters
        await holder.release()
        for i in range(20):  # a release cancelled while on the wire still completes
            acquired = asyncio.Event()

            async def cycle(acquired: asyncio.Event) -> None:
                assert await holder.acquire(timeout=10)
                acquired.set()
                await holder.release()

            cycle_task = asyncio.create_task(cycle(acquired))
            await asyncio.wait_for(acquired.wait(), 15)
            for _ in range(i % 3):
                await asyncio.sleep(0)
            cycle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await cycle_task
            assert await holder.available() == 1, f"iteration {i}: a cancelled release lost it"


# --- the lease semaphore --------------------------------------------------------------------


async def test_lease_semaphore_permits_have_ids_and_leases(side, server, name):
    client = side.client(server.url, watchdog_timeout=5)
    sem = lease_semaphore(side, client, name)
    assert await side(sem.available()) == 0
    assert await side(sem.try_set_permits(2))
    assert not await side(sem.try_set_permits(2))
    first = await side(sem.acquire())
    second = await side(sem.acquire(timeout=1, lease=30))
    assert len({first, second}) == 2
    assert all(len(p) == 32 and int(p, 16) >= 0 for p in (first, second))
    assert await side(sem.acquire(timeout=0)) is None
    stats = await side(sem.statistics())
    assert (stats.permits, stats.available, stats.holders, stats.waiters) == (2, 0, 2, 0)
    assert 2 < stats.ttl <= 5  # the soonest lease: the watchdog's (3 s of room for a load)
    await side(sem.release(first))
    await side(sem.release(second))
    assert await side(sem.available()) == 2


async def test_lease_semaphore_bad_arguments_and_unknown_ids(side, server, name):
    client = side.client(server.url)
    sem = lease_semaphore(side, client, name)
    for bad in (0, -3, True, 2.0):
        with pytest.raises(InvalidArgumentError, match="permits"):
            await side(sem.try_set_permits(bad))
    assert await side(sem.try_set_permits(1))
    for bad_lease in (0, -1, float("inf"), "3"):
        with pytest.raises(InvalidArgumentError, match="lease"):
            await side(sem.acquire(lease=bad_lease))
    with pytest.raises(InvalidArgumentError, match="lease"):
        lease_semaphore(side, client, name, lease=0)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await side(sem.acquire(timeout=-0.5))
    for bad_id in ("nope", "", 12, "g" * 32):
        with pytest.raises(InvalidArgumentError, match="permit_id"):
            await side(sem.release(bad_id))
    with pytest.raises(InvalidArgumentError, match="permit_id"):
        await side(sem.release(lease_core.new_permit_id()))  # well-formed, never granted
    permit = await side(sem.acquire())
    await side(sem.release(permit))
    with pytest.raises(InvalidArgumentError, match="permit_id") as info:
        await side(sem.release(permit))  # released twice
    assert permit in str(info.value)
    assert await side(sem.available()) == 1
    # the calls Redisson's tests use (issue #13 item 6) check their arguments the same way
    for bad_count in (True, 2.0, "1", None, 2**53):
        for call in (sem.add_permits, sem.set_permits, sem.acquire_many):
            with pytest.raises(InvalidArgumentError, match="permits"):
                await side(call(bad_count))
    for call in (sem.set_permits, sem.acquire_many):
        with pytest.raises(InvalidArgumentError, match="permits"):
            await side(call(-1))
    with pytest.raises(InvalidArgumentError, match="at most"):
        await side(sem.acquire_many(arguments.MAX_AT_ONCE + 1))
    assert await side(sem.acquire_many(0, timeout=0)) == []  # nothing, at once
    with pytest.raises(InvalidArgumentError, match="lease"):
        await side(sem.acquire_many(2, lease=0))
    for bad_ids in (permit, None, [permit, permit], ["nope"]):
        with pytest.raises(InvalidArgumentError, match="permit_id"):
            await side(sem.release_many(bad_ids))
    assert await side(sem.release_many([])) == 0
    with pytest.raises(InvalidArgumentError, match="permit_id"):
        await side(sem.update_lease_time("nope", 5))
    with pytest.raises(InvalidArgumentError, match="lease"):
        await side(sem.update_lease_time(permit, 0))
    assert not await side(sem.update_lease_time(permit, 5))  # released: not held
    for bad_ttl in (0, -1, float("nan"), "5", None):
        with pytest.raises(InvalidArgumentError, match="seconds"):
            await side(sem.expire(bad_ttl))
    assert await side(sem.available()) == 1


async def test_lease_semaphore_expired_permit_comes_back(side, server, name, long_recheck):
    sem = lease_semaphore(side, side.client(server.url), name)
    other = lease_semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(1))
    permit = await side(sem.acquire(lease=0.4))
    started = time.monotonic()
    got = await side(other.acquire(timeout=30))
    assert got is not None
    # (no re-check within its 30 s wait but the one the soonest lease's end asks for:
    # long_recheck)
    assert time.monotonic() - started < long_recheck, "re-checked when the soonest lease ended"
    with pytest.raises(LeaseLostError) as info:
        await side(sem.release(permit))
    assert info.value.name == name and info.value.owner == permit
    await side(other.release(got))
    assert await side(other.available()) == 1


async def test_lease_semaphore_client_renews_and_update_lease_time_extends(side, server, name):
    # a lease long enough for a renewal every 2/3 s (each call bounded by that) to land on a
    # loaded 2-core machine: 0.4 s (a call bounded by 0.13 s) failed there ("renewal timed
    # out"), and 1.2 s left a late renewal 0.8 s
    client = side.client(server.url, watchdog_timeout=2)
    sem = lease_semaphore(side, client, name)
    assert await side(sem.try_set_permits(2))
    watched = await side(sem.acquire())  # lease 2 s, renewed every 2/3 s
    explicit = await side(sem.acquire(lease=1.0))
    assert await side(sem.update_lease_time(explicit, 30))
    raw = redis.Redis.from_url(server.url)
    timeouts, member = f"{{{name}}}:timeout", bytes.fromhex(watched)
    last, renewals = raw.zscore(timeouts, member), 0
    # the watched permit renewed 7 times, a third of a lease apart: more than two watchdog
    # leases (and the explicit one's 1 s) went by, both permits held all along (waited for,
    # not slept through)
    deadline = time.monotonic() + 60
    while renewals < 7:
        assert time.monotonic() < deadline, f"{renewals} renewals within 60 s"
        stats = await side(sem.statistics())
        assert stats.holders == 2, "a renewed permit expired"
        await asyncio.sleep(0.1)
        ends = raw.zscore(timeouts, member)
        renewals += ends is not None and last is not None and ends > last
        last = ends
    raw.close()
    assert 0 < stats.ttl <= 2
    await side(sem.release(watched))
    await side(sem.release(explicit))
    assert not await side(sem.update_lease_time(explicit, 30))  # given back: not held


async def test_lease_semaphore_reports_a_lost_permit(side, server, name):
    raw = redis.Redis.from_url(server.url)
    lost: list[LeaseLostError] = []
    client = side.client(server.url, watchdog_timeout=0.6)
    sem = lease_semaphore(side, client, name, on_lease_lost=lost.append)
    assert await side(sem.try_set_permits(1))
    permit = await side(sem.acquire())
    raw.zrem(f"{{{name}}}:timeout", bytes.fromhex(permit))  # taken away behind its back
    await eventually(lambda: bool(lost), timeout=10)
    assert lost[0].name == name and lost[0].owner == permit
    with pytest.raises(LeaseLostError):
        await side(sem.release(permit))
    raw.close()


async def test_lease_semaphore_killed_holder_permit_comes_back(side, server, name, long_recheck):
    sem = lease_semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(1))
    proc = subprocess.Popen(
        [sys.executable, WORKER, "lease-hold", side.kind, server.url, name, "1.0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the worker did not report within 30 s"
        assert proc.stdout.readline().strip() == "held"
        assert await side(sem.acquire(timeout=0)) is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        permit = await side(sem.acquire(timeout=20))
        assert permit is not None
        # the holder's lease is 1 s (its watchdog's): the permit comes back within it, and
        # the waiter looks when it ends (no re-check within its 20 s wait: long_recheck)
        assert time.monotonic() - killed_at < 1.0 + long_recheck
        await side(sem.release(permit))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_lease_semaphore_permit_accounting_under_concurrency(side, server, name):
    permits, workers, cycles = 2, 6, 10
    clients = [side.client(server.url) for _ in range(2)]
    assert await side(lease_semaphore(side, clients[0], name).try_set_permits(permits))
    held: set[str] = set()
    peak = 0
    mutex = threading.Lock()

    def enter(permit: str) -> None:
        nonlocal peak
        with mutex:
            assert permit not in held
            held.add(permit)
            peak = max(peak, len(held))

    def leave(permit: str) -> None:
        with mutex:
            held.remove(permit)

    if side.is_async:

        async def work(i: int) -> None:
            sem, rng = AsyncLeaseSemaphore(clients[i % 2], name), random.Random(i)
            for _ in range(cycles):
                permit = await sem.acquire(timeout=30)
                assert permit is not None
                enter(permit)
                await asyncio.sleep(rng.random() * 0.002)
                leave(permit)
                await sem.release(permit)

        await asyncio.wait_for(asyncio.gather(*(work(i) for i in range(workers))), 60)
    else:

        def work_in_thread(i: int) -> None:
            sem, rng = LeaseSemaphore(clients[i % 2], name), random.Random(i)
            for _ in range(cycles):
                permit = sem.acquire(timeout=30)
                assert permit is not None
                enter(permit)
                time.sleep(rng.random() * 0.002)
                leave(permit)
                sem.release(permit)

        threads = [threading.Thread(target=work_in_thread, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert peak == permits
    stats = await side(lease_semaphore(side, clients[1], name).statistics())
    assert (stats.permits, stats.available, stats.holders, stats.waiters) == (2, 2, 0, 0)


async def test_lease_semaphore_retried_requests_count_once(side, server, name):
    client = side.client(server.url)
    sem = lease_semaphore(side, client, name)
    keys = LeaseSemaphoreKeys.for_name(name)
    assert await side(sem.try_set_permits(2))
    permit = lease_core.new_permit_id()
    take = lease_core.lease_acquire_call(keys, "some-client:1", permit, 30.0, register=False)
    for _ in range(2):  # the same request sent twice: one permit
        assert int((await side(client._call(take, name)))[0]) == core.GRANTED
    stats = await side(sem.statistics())
    assert (stats.available, stats.holders) == (1, 1)
    give = lease_core.lease_release_call(keys, permit, "request-9")
    for _ in range(2):
        assert int((await side(client._call(give, name)))[0]) == core.RELEASED
    assert await side(sem.available()) == 2


async def test_lease_semaphore_keeps_redisson_layout(side, server, name):
    raw = redis.Redis.from_url(server.url)
    sem = lease_semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(2))
    permit = await side(sem.acquire(lease=20))
    assert raw.get(name) == b"1"
    ((member, score),) = reply_scores(raw.zrange(f"{{{name}}}:timeout", 0, -1, withscores=True))
    assert member == bytes.fromhex(permit)  # 16 bytes, as Redisson stores its ids
    seconds, micros = raw.time()
    assert 19_000 < score - (seconds * 1000 + micros // 1000) <= 20_000  # server clock, ms
    # a Redisson permit that never expires is respected, and one that expired comes back
    raw.zadd(f"{{{name}}}:timeout", {os.urandom(16): 922337203685477})
    raw.zadd(f"{{{name}}}:timeout", {os.urandom(16): 1})
    raw.decrby(name, 1)
    stats = await side(sem.statistics())
    assert (stats.available, stats.holders) == (1, 2)
    await side(sem.release(permit))
    raw.close()


async def test_lease_semaphore_with_statement_and_bounded_hold(side, server, name):
    sem = lease_semaphore(side, side.client(server.url), name)
    assert await side(sem.try_set_permits(1))
    if side.is_async:
        async with sem as permit:
            assert len(permit) == 32 and await sem.available() == 0
    else:
        with sem as permit:
            assert len(permit) == 32 and sem.available() == 0
    async with side.hold(sem, timeout=1, lease=5) as permit:
        assert (await side(sem.statistics())).holders == 1
        with pytest.raises(LockTimeoutError):
            async with side.hold(lease_semaphore(side, side.client(server.url), name), timeout=0.2):
                pass
    assert await side(sem.available()) == 1


async def test_cancelled_lease_acquire_never_leaks_a_permit(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        sem = AsyncLeaseSemaphore(client, name)
        assert await sem.try_set_permits(1)
        for i in range(40):
            task = asyncio.create_task(sem.acquire())
            for _ in range(i % 4):
                await asyncio.sleep(0)
            await asyncio.sleep((i % 7) * 0.0002)
            task.cancel()
            try:
                permit = await task
            except asyncio.CancelledError:
                permit = None
            if permit is not None:
                await sem.release(permit)
            stats = await sem.statistics()
            assert (stats.available, stats.holders) == (1, 0), f"iteration {i}: leaked"


async def test_cancelled_acquire_or_release_of_several_never_leaks_a_permit(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        sem = AsyncLeaseSemaphore(client, name)
        assert await sem.try_set_permits(3)
        for i in range(40):
            task = asyncio.create_task(sem.acquire_many(3))
            for _ in range(i % 4):
                await asyncio.sleep(0)
            await asyncio.sleep((i % 7) * 0.0002)
            task.cancel()
            try:
                ids = await task
            except asyncio.CancelledError:
                ids = None
            if ids is not None:
                release = asyncio.create_task(sem.release_many(ids))
                for _ in range(1 + i % 3):  # (a task cancelled before it starts never runs)
                    await asyncio.sleep(0)
                release.cancel()  # a release cancelled once under way still completes
                with contextlib.suppress(asyncio.CancelledError):
                    await release
            stats = await sem.statistics()
            assert (stats.available, stats.holders) == (3, 0), f"iteration {i}: leaked"


def test_sync_and_async_apis_match():
    pairs = [(Semaphore, AsyncSemaphore), (LeaseSemaphore, AsyncLeaseSemaphore)]
    for sync_cls, async_cls in pairs:
        sync_api = {n for n in dir(sync_cls) if not n.startswith("_")}
        async_api = {n for n in dir(async_cls) if not n.startswith("_")}
        assert sync_api == async_api, (sync_cls, sync_api ^ async_api)
        for attr in sync_api:
            s, a = getattr(sync_cls, attr), getattr(async_cls, attr)
            if callable(s):
                sp = list(inspect.signature(s).parameters)
                ap = list(inspect.signature(a).parameters)
                assert sp == ap, (sync_cls.__name__, attr, sp, ap)


@pytest.mark.two_servers
def test_permits_and_locks_share_the_one_watchdog(server, name):
    import redlease

    # a lease whose renewal calls (bounded by a third of it) land on a loaded 2-core machine,
    # and whose renewals may come 1.3 s late (1.2 s left them 0.8 s)
    with redlease.Client.from_url(server.url, watchdog_timeout=2) as client:
        slots = client.lease_semaphore(name)
        assert slots.try_set_permits(2)
        permit = slots.acquire(timeout=5)
        assert permit is not None
        lock = client.lock(name + ":lock")
        assert lock.acquire()
        # both renewed 7 times, a third of a lease apart: more than two leases pass (waited
        # for, not slept through), both renewed by the same thread
        raw = redis.Redis.from_url(server.url)
        lock_rose = ttl_rises(raw, name + ":lock")
        timeouts, member = f"{{{name}}}:timeout", bytes.fromhex(permit)
        last, seen = raw.zscore(timeouts, member), [0, 0]
        deadline = time.monotonic() + 60
        while min(seen) < 7:
            assert time.monotonic() < deadline, f"renewals (lock, permit) within 60 s: {seen}"
            time.sleep(0.1)
            seen[0] += lock_rose()
            ends = raw.zscore(timeouts, member)
            seen[1] += ends is not None and last is not None and ends > last
            last = ends
        raw.close()
        names = [t.name for t in threading.enumerate()]
        assert names.count("redlease-watchdog") == 1
        assert "redlease-permit-renewer" not in names
        assert lock.owned()
        slots.release(permit)  # renewed all along: no LeaseLostError
        lock.release()
