"""The fair lock in Redisson's layout on a real Redis Cluster (sharded pub/sub on Redis/Valkey
>= 7, classic on 6.2): Redisson's keys share the name's slot, and a release wakes the waiter
of another client on its own channel (``SPUBLISH`` there, as Redisson does by default)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
import redis

from redlease._core.keys import redisson_prefixed

pytestmark = pytest.mark.cluster

WAKE = 10.0
"""A release wakes the waiter within this, however loaded the machine; without the message it
looks again only at the end of its 20 s wait (under ``long_recheck``; else at its 5 s
re-check) or at the holder's 30 s lease."""


async def _handed_on(side: Any, url: str, name: str) -> float:
    """One client holds; another's thread/task waits; the release wakes it: the wake-up time."""
    holder = side.client(url, cluster=True).fair_lock(name, layout="redisson")
    waiter = side.client(url, cluster=True).fair_lock(name, layout="redisson")
    assert await side(holder.acquire())

    async def wait_async() -> float:
        assert await waiter.acquire(timeout=20)
        got = time.monotonic()
        await waiter.release()
        return got

    def wait_sync() -> float:  # acquire and release in the same thread (its owner)
        assert waiter.acquire(timeout=20)
        got = time.monotonic()
        waiter.release()
        return got

    waiting = asyncio.create_task(wait_async() if side.is_async else asyncio.to_thread(wait_sync))
    deadline = time.monotonic() + 20
    # in line, and listening on its own channel (checked in a thread: the check's blocking
    # calls would hold up the asyncio waiter's loop, on a loaded machine for long)
    while not await asyncio.to_thread(_listening, url, name):
        assert time.monotonic() < deadline, "the waiter never queued and listened"
        await asyncio.sleep(0.01)
    started = time.monotonic()
    await side(holder.release())
    return await asyncio.wait_for(waiting, 20) - started


def _listening(url: str, name: str) -> bool:
    """Whether a waiter is in Redisson's line and subscribed to its own channel (classic or
    sharded, on whichever node)."""
    rc = redis.RedisCluster.from_url(url, decode_responses=True)
    try:
        first = rc.lindex(redisson_prefixed("redisson_lock_queue", name), 0)
        if first is None:
            return False
        assert isinstance(first, str)  # decode_responses
        channel = f"{redisson_prefixed('redisson_lock__channel', name)}:{first}"
        count = 0
        for node in rc.get_nodes():
            conn = redis.Redis(host=node.host, port=node.port)
            try:
                count += int(conn.pubsub_numsub(channel)[0][1])
                with contextlib.suppress(redis.ResponseError):  # Redis 6.2: no sharded pub/sub
                    reply = conn.execute_command("PUBSUB", "SHARDNUMSUB", channel)
                    count += int(reply[1])
            finally:
                conn.close()
        return count > 0
    finally:
        rc.close()


@pytest.mark.parametrize("braces", [False, True], ids=["plain", "braces"])
async def test_a_release_wakes_the_next_client_on_every_master(side, cluster, braces, long_recheck):
    for i in range(3):  # names on every master
        name = f"{{fair-redisson:{i}}}:{side.kind}" if braces else f"fair-redisson:{i}:{side.kind}"
        assert await _handed_on(side, cluster.url, name) < WAKE


async def test_on_a_cluster_without_sharded_pub_sub(side, legacy_cluster, long_recheck):
    for i in range(3):
        assert await _handed_on(side, legacy_cluster.url, f"fair-legacy:{i}:{side.kind}") < WAKE
