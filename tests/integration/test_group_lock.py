"""The group lock (issue 35 part 4, Redisson 4's ``RFasterMultiLock``): many values of one group
locked all-or-nothing in one hash, one script call per acquire or release, one watchdog entry
per hold. A group overlapping a held value gets nothing and leaves no partial hold; disjoint
groups of one group name do not exclude each other; ``timeout=0``, reentrancy, fencing tokens,
``hold()``, the watchdog with one entry, events; a waiter is woken by the release; a lost reply
and a retried release are each counted once. Each test on the sync and the asyncio side."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import redlease
from redlease import InvalidArgumentError, LockTimeoutError
from redlease._core import group as core
from redlease.testing import RedisServer

from .helpers import (
    count_in_tasks,
    count_in_threads,
    counted,
    eventually,
    in_owner,
    owner_body,
    renewed,
    reply_str_hash,
)

VALUES = [f"order-{i}" for i in range(5)]


def group_fields(url: str, group: str) -> dict[str, str]:
    raw = redis.Redis.from_url(url, decode_responses=True)
    try:
        return reply_str_hash(raw.hgetall(group))
    finally:
        raw.close()


def value_fields(fields: dict[str, str]) -> dict[str, str]:
    """The value fields (value hash -> owner) of a group's hash."""
    return {k: v for k, v in fields.items() if ":" not in k}


async def test_a_group_overlapping_a_held_value_gets_nothing(
    side: Any, server: RedisServer, name: str
) -> None:
    holder = side.client(server.url).group_lock(name, ["order-2"])
    assert await side(holder.acquire(timeout=0))
    before = group_fields(server.url, name)
    other = side.client(server.url).group_lock(name, VALUES)
    assert await in_owner(side, owner_body(side, other, timeout=0)) == (False, None)
    assert await in_owner(side, owner_body(side, other, timeout=0.3)) == (False, None)
    # nothing of the other's was written: no partial hold of its four free values
    assert group_fields(server.url, name) == before
    assert len(value_fields(before)) == 1
    # a group of other values of the same group is not excluded
    apart = side.client(server.url).group_lock(name, ["order-7", "order-8"])
    got, token = await in_owner(side, owner_body(side, apart, timeout=0))
    assert got and token is not None
    await side(holder.release())
    got, token = await in_owner(side, owner_body(side, other, timeout=0))
    assert got and token is not None and token > (holder.fencing_token or 0)
    assert value_fields(group_fields(server.url, name)) == {}


async def test_layout_is_redissons(side: Any, server: RedisServer, name: str) -> None:
    client = side.client(server.url)
    lock = client.group_lock(name, ["Jack_001", "Mary_002", "Jack_001"])
    assert await side(lock.acquire(lease=30))
    owner = next(iter((await side(lock.statistics())).holders))
    fields = group_fields(server.url, name)
    jack, mary = core.value_fields(["Jack_001"])[0], core.value_fields(["Mary_002"])[0]
    assert value_fields(fields) == {jack: owner, mary: owner}
    for value in (jack, mary):
        assert fields[f"{value}:{owner}:lock_count"] == "1"
        assert int(fields[f"{value}:{owner}:expire_time"]) > 1_700_000_000_000
    raw = redis.Redis.from_url(server.url)
    assert 0 < raw.pttl(name) <= 30_000
    raw.close()
    await side(lock.release())
    assert not await side(lock.locked())


async def test_timeout_zero_reentrancy_tokens_and_hold(
    side: Any, server: RedisServer, name: str
) -> None:
    lock = side.client(server.url).group_lock(name, VALUES)
    other = side.client(server.url).group_lock(name, VALUES[::-1])
    assert await side(lock.acquire(timeout=0))
    token = lock.fencing_token
    assert await side(lock.acquire(timeout=0))  # a re-entry: the same hold, the same token
    assert await side(lock.hold_count()) == 2 and lock.fencing_token == token
    with pytest.raises(LockTimeoutError, match="single try"):
        async with side.hold(other, timeout=0):
            pass
    await side(lock.release())
    assert await side(lock.locked())
    await side(lock.release())
    assert not await side(lock.locked())
    async with side.hold(other, timeout=5) as lease:
        assert token is not None and lease.fencing_token > token
        stats = await side(other.statistics())
        assert stats.owned and stats.fencing_token == lease.fencing_token


async def test_a_waiter_is_woken_by_the_release(side: Any, server: RedisServer, name: str) -> None:
    holder = side.client(server.url).group_lock(name, VALUES[:2], lease=60)
    waiter = side.client(server.url).group_lock(name, VALUES[1:])
    assert await side(holder.acquire())
    task = asyncio.ensure_future(in_owner(side, owner_body(side, waiter, timeout=30)))
    await asyncio.sleep(0.3)
    assert not task.done()
    await side(holder.release())
    # woken by the release's message (without it, the wait would last the holder's 60 s lease)
    got, _ = await asyncio.wait_for(task, 4)
    assert got


@pytest.mark.two_servers
async def test_the_watchdog_renews_with_one_entry(
    side: Any, private_server: RedisServer, name: str
) -> None:
    url = private_server.url  # (its own server: no other test's calls in the count)
    events: list[redlease.events.LockEvent] = []
    client = side.client(url, watchdog_timeout=2)
    client.add_listener(events.append)
    lock = client.group_lock(name, [str(i) for i in range(100)])
    assert await side(lock.acquire())
    raw = redis.Redis.from_url(url)
    before = int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    assert await renewed(raw, name, times=3), "the watchdog renews the group's one hash"
    after = int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    raw.close()
    assert (await side(lock.statistics())).owned
    # a round renews the 100 values with one call (3 rounds: about 3 calls), never one per
    # value (300)
    assert 0 < after - before < 30
    await side(lock.release())
    kinds = [e.kind for e in events if e.name == lock.name]
    assert kinds[:1] == ["acquired"] and "released" in kinds and "lease_lost" not in kinds


async def test_a_force_release_is_found_by_the_holder(
    side: Any, server: RedisServer, name: str
) -> None:
    lost: list[Exception] = []
    client = side.client(server.url, watchdog_timeout=0.6)
    lock = client.group_lock(name, VALUES, on_lease_lost=lost.append)
    assert await side(lock.acquire())
    other = side.client(server.url).group_lock(name, VALUES[:1])
    assert await side(other.force_release())
    await eventually(lambda: lost, 10)
    with pytest.raises(redlease.LeaseLostError):
        await side(lock.release())


async def test_bad_values_are_refused(side: Any, server: RedisServer, name: str) -> None:
    client = side.client(server.url)
    with pytest.raises(InvalidArgumentError, match="at least one value"):
        client.group_lock(name, [])
    with pytest.raises(InvalidArgumentError, match="must be a str"):
        client.group_lock(name, ["a", 1])
    with pytest.raises(InvalidArgumentError, match="iterable of str"):
        client.group_lock(name, "abc")
    with pytest.raises(InvalidArgumentError, match="lock name"):
        client.group_lock("", ["a"])


def test_threads_exclude_each_other(server: RedisServer, name: str) -> None:
    with redlease.Client.from_url(server.url) as client:
        lock = client.group_lock(name, VALUES)
        overlaps = count_in_threads(server.url, name + ":counter", lock, threads=4, rounds=25)
    assert overlaps == 0 and counted(server.url, name + ":counter") == 100


async def test_tasks_exclude_each_other(server: RedisServer, name: str) -> None:
    async with redlease.AsyncClient.from_url(server.url) as client:
        lock = client.group_lock(name, VALUES)
        overlaps = await count_in_tasks(server.url, name + ":counter", lock, tasks=4, rounds=25)
    assert overlaps == 0 and counted(server.url, name + ":counter") == 100
