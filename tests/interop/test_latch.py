"""The count-down latch shared with Redisson's ``RCountDownLatch`` (issue #13 item 6), against
a Java service played by ``redlease.testing.RedissonCountDownLatch``: counts set and counted
down by either side, ``delete`` by either side, and each side's waiters woken by the other's
changes (Redisson's waiters wake only on ``0``; redlease's on any message), on names with and
without braces of their own."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest
import redis

from redlease.testing.redisson.synchronizers import RedissonCountDownLatch, latch_channel

from .helpers import Beside, braced, eventually, woken


@pytest.fixture(params=["plain", "braced"])
def latch_name(request: pytest.FixtureRequest, name: str) -> str:
    return name if request.param == "plain" else braced(name, "gate")


@pytest.fixture
def java(server: Any, latch_name: str) -> Any:
    driver = RedissonCountDownLatch(server.url, latch_name)
    yield driver
    assert driver.odd == [], "messages a Redisson listener could not take"
    driver.close()


async def test_counts_are_shared_both_ways(side, server, latch_name, java):
    gate = side.client(server.url).latch(latch_name)
    assert java.try_set_count(2)
    assert not await side(gate.try_set_count(5))  # armed already, by Java
    assert await side(gate.count()) == 2
    await side(gate.count_down())
    assert java.get_count() == 1
    assert not await side(gate.wait(timeout=0))
    java.count_down()
    assert await side(gate.count()) == 0 and await side(gate.wait(timeout=0))
    assert await side(gate.try_set_count(3))
    assert java.get_count() == 3 and not java.try_set_count(1)


async def test_delete_by_either_side(side, server, latch_name, java):
    """Redisson's ``testDelete`` / ``testDeleteFailed``, across the two sides."""
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    listen = raw.pubsub()
    listen.subscribe(latch_channel(latch_name))
    assert listen.get_message(timeout=5) is not None  # the confirmation
    gate = side.client(server.url).latch(latch_name)
    assert not await side(gate.delete()) and not java.delete()  # never armed: nothing to do
    assert java.try_set_count(3)
    assert await side(gate.delete())
    assert java.get_count() == 0 and not java.delete()
    assert await side(gate.try_set_count(2))
    assert java.delete()
    assert await side(gate.count()) == 0 and not await side(gate.delete())
    messages = []
    while (message := listen.get_message(timeout=0.5)) is not None:
        if message["type"] == "message":
            messages.append(message["data"])
    # Java's trySetCount "1"; redlease's delete "0" (opens Redisson's waiters) and "2";
    # redlease's try_set_count "1"; Java's delete "1" (its new-count message, as Redisson's)
    assert messages == ["1", "0", "2", "1", "1"]
    listen.close()
    raw.close()


@pytest.mark.parametrize("change", ["count_down", "delete"])
async def test_a_redisson_change_wakes_redlease_waiters(
    side, server, latch_name, java, change, long_recheck
):
    client = side.client(server.url)
    assert java.try_set_count(1)
    waiters = [
        Beside(lambda: client.latch(latch_name).wait(timeout=30), is_async=side.is_async)
        for _ in range(2)
    ]
    for waiter in waiters:
        await eventually(waiter.parked, "the redlease waiters are blocked in their wait")
    since = time.monotonic()
    if change == "count_down":
        java.count_down()  # "0": the latch is open, for every waiter
    else:
        assert java.delete()  # "1": any message on a latch channel wakes every waiter
    assert [await woken(waiter, since) for waiter in waiters] == [True, True]


@pytest.mark.parametrize("change", ["count_down", "delete"])
async def test_a_redlease_change_wakes_redisson_waiters(side, server, latch_name, change):
    gate = side.client(server.url).latch(latch_name)
    assert await side(gate.try_set_count(1))
    javas = [RedissonCountDownLatch(server.url, latch_name) for _ in range(2)]
    try:
        waiters = [Beside(partial(j.await_, 30), is_async=False) for j in javas]
        for java in javas:

            def blocked(j: Any = java) -> bool:
                return j.waiting

            await eventually(blocked, "the Redisson waiters are blocked")
        since = time.monotonic()
        if change == "count_down":
            await side(gate.count_down())
        else:
            assert await side(gate.delete())
        assert [await woken(waiter, since) for waiter in waiters] == [True, True]
        assert all(java.odd == [] for java in javas)
    finally:
        for java in javas:
            java.close()
