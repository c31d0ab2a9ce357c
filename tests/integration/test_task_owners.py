"""An asyncio hold belongs to the task that called ``acquire()``, even when asyncio runs the
call in a task of its own; a task that ends holding a lock is reported, and its hold is no
longer renewed.

``asyncio.wait_for(lock.acquire(), 5)`` runs the acquire in a task of its own on Python 3.10
and 3.11 (3.12 awaits it in the caller's task); ``asyncio.create_task(lock.acquire())`` and
``asyncio.gather(lock.acquire(), ...)`` do so on every version. Before, the hold belonged to
that throwaway task: the caller saw no fencing token, its ``release()`` raised
``NotOwnedError``, and the watchdog renewed the orphaned hold for as long as the client lived.
These tests are asyncio only: a thread's call runs in the thread that made it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from redlease import AsyncClient
from redlease.events import LockEvent
from redlease.testing import RedisServer, find_server

BOUND = 30.0  # generous: the lock must be free long before this


@pytest.fixture(scope="module")
def newest() -> Iterator[RedisServer]:
    with RedisServer(find_server()) as srv:
        yield srv


@pytest.fixture
async def client(newest: RedisServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient.from_url(newest.url, watchdog_timeout=1.5)
    yield client
    await client.close()


async def _free_for_another(url: str, name: str) -> bool:
    """Whether another client can take the lock at once (and gives it back)."""
    other = AsyncClient.from_url(url)
    try:
        lock = other.lock(name)
        got = await lock.acquire(timeout=0)
        if got:
            await lock.release()
        return got
    finally:
        await other.close()


async def test_wait_for_acquire_is_the_callers_hold(
    client: AsyncClient, newest: RedisServer, name: str
) -> None:
    lock = client.lock(name)
    assert await asyncio.wait_for(lock.acquire(), 5)
    assert lock.fencing_token is not None  # the caller holds: it sees its token
    assert await lock.owned()
    assert not await _free_for_another(newest.url, name)
    await asyncio.wait_for(lock.release(), 5)  # its release, in a task of its own too
    assert not await lock.owned()
    assert await _free_for_another(newest.url, name)


async def test_create_task_acquire_is_the_creators_hold(
    client: AsyncClient, newest: RedisServer, name: str
) -> None:
    lock = client.lock(name)
    assert await asyncio.create_task(lock.acquire())
    assert lock.fencing_token is not None
    await lock.release()
    assert await _free_for_another(newest.url, name)


async def test_gather_acquires_are_the_callers_holds(
    client: AsyncClient, newest: RedisServer, name: str
) -> None:
    """Both acquires are the caller's: a reentrant lock it then holds twice."""
    lock = client.lock(name)
    assert list(await asyncio.gather(lock.acquire(), lock.acquire())) == [True, True]
    assert await lock.hold_count() == 2
    await lock.release()
    assert not await _free_for_another(newest.url, name)
    await lock.release()
    assert await _free_for_another(newest.url, name)


async def test_another_task_still_waits(client: AsyncClient, name: str) -> None:
    """A task whose own code calls ``acquire()`` is an owner of its own: the lock stays
    exclusive between tasks (the caller's hold is not shared with the tasks it starts)."""
    lock = client.lock(name)
    assert await asyncio.wait_for(lock.acquire(), 5)

    async def other() -> bool:
        return await lock.acquire(timeout=0)

    assert not await asyncio.create_task(other())
    await lock.release()
    assert await asyncio.create_task(other())  # that task's hold, now: it ends holding it


async def test_a_task_that_ends_holding_is_reported_and_not_renewed(
    client: AsyncClient, newest: RedisServer, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from redlease.metrics import PrometheusMetrics

    registry = prometheus_client.CollectorRegistry()
    client.add_listener(PrometheusMetrics(registry, per_lock=True))
    ended: asyncio.Queue[LockEvent] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def on_event(e: LockEvent) -> None:
        if e.kind == "owner_ended":
            loop.call_soon_threadsafe(ended.put_nowait, e)

    client.add_listener(on_event)
    lock = client.lock(name)
    tokens: list[int | None] = []

    async def forgets() -> None:
        await lock.acquire()
        tokens.append(lock.fencing_token)

    with caplog.at_level(logging.WARNING, logger="redlease"):
        await asyncio.create_task(forgets())
        event = await asyncio.wait_for(ended.get(), BOUND)
    assert (event.name, event.hold_count, event.fencing_token) == (name, 1, tokens[0])
    assert any("ended holding it" in r.getMessage() for r in caplog.records)
    assert registry.get_sample_value("redlease_abandoned_holds_total", {"lock": name}) == 1
    assert registry.get_sample_value("redlease_holds", {"lock": name}) == 0
    # not renewed: the hold runs out (watchdog_timeout 1.5 s) and another client takes it
    deadline = loop.time() + BOUND
    while not await _free_for_another(newest.url, name):
        assert loop.time() < deadline, "the ended task's hold was still renewed"
        await asyncio.sleep(0.2)


async def test_a_creator_that_ended_before_the_acquire_ran_is_reported(
    client: AsyncClient, newest: RedisServer, name: str
) -> None:
    """``create_task(lock.acquire())`` from a task that does not wait for it: the hold is
    that task's, which has ended: reported, not renewed."""
    ended: asyncio.Queue[LockEvent] = asyncio.Queue()
    client.add_listener(lambda e: ended.put_nowait(e) if e.kind == "owner_ended" else None)
    lock = client.lock(name)
    started: list[asyncio.Task[bool]] = []

    async def starts() -> None:
        started.append(asyncio.create_task(lock.acquire()))

    await asyncio.create_task(starts())
    assert await started[0]
    event = await asyncio.wait_for(ended.get(), BOUND)
    assert event.name == name
    deadline = asyncio.get_running_loop().time() + BOUND
    while not await _free_for_another(newest.url, name):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.2)


async def test_a_wait_for_that_times_out_leaves_nothing_held(
    client: AsyncClient, newest: RedisServer, name: str
) -> None:
    holder = AsyncClient.from_url(newest.url)
    try:
        held = holder.lock(name)
        assert await held.acquire()
        lock = client.lock(name)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lock.acquire(), 0.3)
        assert lock.fencing_token is None
        await held.release()
    finally:
        await holder.close()
    assert await asyncio.wait_for(lock.acquire(), 5)
    await lock.release()
    assert await _free_for_another(newest.url, name)
