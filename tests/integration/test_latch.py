"""The count-down latch on a real server, each test on the sync and asyncio side."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from functools import partial
from typing import Any

import pytest
import redis

import redlease
from redlease import InvalidArgumentError
from redlease._async.latch import AsyncCountDownLatch
from redlease._core import latch as core
from redlease._sync.latch import CountDownLatch

from .helpers import eventually
from .test_semaphore import Background, parked


def latch(side: Any, client: Any, name: str) -> Any:
    return (AsyncCountDownLatch if side.is_async else CountDownLatch)(client, name)


async def waiters_are(side: Any, gate: Any, count: int) -> bool:
    return bool((await side(gate.statistics())).waiters == count)


async def local_waiters_are(side: Any, gate: Any, count: int) -> bool:
    return bool((await side(gate.statistics())).local_waiters == count)


async def test_set_count_down_and_wait(side, server, name):
    gate = latch(side, side.client(server.url), name)
    assert await side(gate.count()) == 0
    assert await side(gate.wait(timeout=0))  # never set: open
    assert await side(gate.try_set_count(2))
    assert not await side(gate.try_set_count(5))  # only while not armed
    assert await side(gate.count()) == 2
    assert not await side(gate.wait(timeout=0))
    assert not await side(gate.wait(timeout=0.2))
    await side(gate.count_down())
    stats = await side(gate.statistics())
    assert (stats.name, stats.count, stats.waiters, stats.local_waiters, stats.ttl) == (
        name,
        1,
        0,
        0,
        None,
    )
    await side(gate.count_down())
    assert await side(gate.count()) == 0
    assert await side(gate.wait(timeout=1))
    await side(gate.count_down())  # on an open latch: nothing
    assert await side(gate.count()) == 0
    assert await side(gate.try_set_count(1))  # open again, so it can be re-armed


async def test_count_reaching_zero_releases_every_waiter(side, server, name, long_recheck):
    clients = [side.client(server.url) for _ in range(2)]
    gate = latch(side, clients[0], name)
    assert await side(gate.try_set_count(2))

    # three waiters on one client (one subscription) and two on another
    def wait(i: int) -> Any:
        return latch(side, clients[i % 2], name).wait(20)

    waiting = [Background(side, partial(wait, i)) for i in range(5)]
    await eventually(lambda: waiters_are(side, gate, 5))
    # a client's first waiter registers on the server, then listens (wait_loop): the local
    # count follows the server's a moment later
    await eventually(lambda: local_waiters_are(side, gate, 3))
    await eventually(lambda: local_waiters_are(side, latch(side, clients[1], name), 2))
    await side(gate.count_down())
    await asyncio.sleep(0.05)
    assert (await side(gate.statistics())).waiters == 5  # still closed: nobody left
    opened_at = time.monotonic()
    await side(latch(side, clients[1], name).count_down())
    assert [await w.result() for w in waiting] == [True] * 5
    # (no re-check within their 20 s: long_recheck)
    assert time.monotonic() - opened_at < long_recheck, "woken by pub/sub, not a re-check"
    assert (await side(gate.statistics())).waiters == 0


async def test_wait_timeout_leaves_no_waiter_behind(side, server, name):
    gate = latch(side, side.client(server.url), name)
    assert await side(gate.try_set_count(1))
    started = time.monotonic()
    assert not await side(latch(side, side.client(server.url), name).wait(timeout=0.3))
    assert 0.25 < time.monotonic() - started < 5
    assert (await side(gate.statistics())).waiters == 0
    assert await side(gate.count()) == 1


async def test_bad_arguments_name_the_argument(side, server, name):
    client = side.client(server.url)
    gate = latch(side, client, name)
    for bad in (-1, 0, True, 2.5, "3", None):
        with pytest.raises(InvalidArgumentError, match="count") as info:
            await side(gate.try_set_count(bad))
        assert isinstance(info.value, ValueError)
    for bad_timeout in (-0.1, "1", float("inf") * 0):
        with pytest.raises(InvalidArgumentError, match="timeout"):
            await side(gate.wait(bad_timeout))
    for bad_name in ("", "}{", None):
        with pytest.raises(InvalidArgumentError, match="name"):
            latch(side, client, bad_name)  # type: ignore[arg-type]  # wrong on purpose
    assert await side(gate.count()) == 0


async def test_retried_count_down_counts_once(side, server, name):
    client = side.client(server.url)
    gate = latch(side, client, name)
    keys = core.LatchKeys.for_name(name)
    assert await side(gate.try_set_count(3))
    for _ in range(2):  # the same request sent twice (a reply lost on the way back)
        await side(client._run(core.count_down(keys, request_id="request-1"), name))
    assert await side(gate.count()) == 2


async def test_delete_opens_the_latch_and_a_retried_delete_answers_the_same(side, server, name):
    client = side.client(server.url)
    gate = latch(side, client, name)
    assert not await side(gate.delete())  # open already: nothing to delete
    assert await side(gate.try_set_count(2))
    keys = core.LatchKeys.for_name(name)
    for _ in range(2):  # the same request sent twice (a reply lost on the way back)
        assert await side(client._run(core.delete(keys, request_id="request-1"), name))
    assert await side(gate.count()) == 0 and await side(gate.wait(timeout=0))
    assert not await side(gate.delete())
    assert await side(gate.try_set_count(1))  # open, so it can be armed again
    assert await side(gate.count()) == 1


async def test_keeps_redisson_layout_and_messages(side, server, name):
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    pubsub = raw.pubsub()
    pubsub.subscribe(f"redisson_countdownlatch__channel__{{{name}}}")
    assert pubsub.get_message(timeout=5) is not None  # subscribe confirmation
    gate = latch(side, side.client(server.url), name)
    assert await side(gate.try_set_count(2))
    assert raw.get(name) == "2"
    await side(gate.count_down())
    assert raw.get(name) == "1"
    await side(gate.count_down())
    assert raw.exists(name) == 0  # open: no key, as Redisson leaves it
    messages = [pubsub.get_message(timeout=5) for _ in range(3)]
    # Redisson's new-count and zero-count messages, then the wake-all for redlease waiters
    assert [m["data"] for m in messages if m] == ["1", "0", "2"]
    raw.set(name, 1)  # a Redisson client's trySetCount(1)
    assert await side(gate.count()) == 1
    pubsub.close()
    raw.close()


async def test_redisson_count_down_wakes_a_waiter(side, server, name, long_recheck):
    """A Redisson countDown publishes only "0": it opens the latch, so it wakes every
    redlease waiter (tests/interop/test_latch.py has several)."""
    raw = redis.Redis.from_url(server.url)
    client = side.client(server.url)
    gate = latch(side, client, name)
    assert await side(gate.try_set_count(1))
    waiting = Background(side, lambda: latch(side, client, name).wait(20))
    await eventually(lambda: waiters_are(side, gate, 1))
    await eventually(
        lambda: (
            client._subscriber is not None
            and client._subscriber.waiting(f"redisson_countdownlatch__channel__{{{name}}}") == 1
        )
    )
    opened_at = time.monotonic()
    raw.delete(name)
    raw.publish(f"redisson_countdownlatch__channel__{{{name}}}", "0")
    assert await waiting.result(timeout=15)
    # (no re-check within its 20 s: long_recheck)
    assert time.monotonic() - opened_at < long_recheck, "woken by the message, not a re-check"
    raw.close()


async def test_cancelled_wait_leaves_nothing(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        gate = AsyncCountDownLatch(client, name)
        assert await gate.try_set_count(1)
        task = asyncio.create_task(gate.wait(timeout=30))
        await eventually(lambda: parked(task))
        assert (await gate.statistics()).waiters == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stats = await gate.statistics()
        assert (stats.count, stats.waiters, stats.local_waiters) == (1, 0, 0)
        await gate.count_down()
        for i in range(10):  # a count_down cancelled while on the wire still completes
            started = asyncio.Event()

            async def down(started: asyncio.Event) -> None:
                started.set()
                await gate.count_down()

            assert await gate.try_set_count(1)
            down_task = asyncio.create_task(down(started))
            await asyncio.wait_for(started.wait(), 15)
            for _ in range(i % 3):
                await asyncio.sleep(0)
            down_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await down_task
            assert await gate.count() == 0, f"iteration {i}: a cancelled count_down was lost"


def test_waiting_threads_across_a_process_boundary_of_clients(server, name):
    """Many threads on several sync clients all pass once the count reaches zero."""
    with (
        redlease.Client.from_url(server.url) as first,
        redlease.Client.from_url(server.url) as second,
    ):
        assert CountDownLatch(first, name).try_set_count(3)
        results: list[bool] = []
        threads = [
            threading.Thread(
                target=lambda c=c: results.append(CountDownLatch(c, name).wait(timeout=20))
            )
            for c in (first, second) * 4
        ]
        for t in threads:
            t.start()
        for _ in range(3):
            CountDownLatch(second, name).count_down()
        for t in threads:
            t.join(30)
        assert results == [True] * 8


def test_sync_and_async_apis_match():
    sync_api = {n for n in dir(CountDownLatch) if not n.startswith("_")}
    async_api = {n for n in dir(AsyncCountDownLatch) if not n.startswith("_")}
    assert sync_api == async_api
    for attr in sync_api:
        s, a = getattr(CountDownLatch, attr), getattr(AsyncCountDownLatch, attr)
        if callable(s):
            assert list(inspect.signature(s).parameters) == list(inspect.signature(a).parameters)
