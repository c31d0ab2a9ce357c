"""redlease on a Sentinel-managed master, through a failover."""

from __future__ import annotations

import threading
import time

import pytest
from integration.helpers import eventually

import redlease

from .conftest import MASTER_NAME


def _waiting(client, name) -> bool:
    sub = client._subscriber
    return sub is not None and sub.waiting(f"redisson_lock__channel:{{{name}}}") > 0


pytestmark = pytest.mark.sentinel


def test_lock_follows_the_master_through_a_failover(sentinel_setup):
    master, replica, sentinels = sentinel_setup
    sentinel = sentinels.sentinel()
    client = redlease.Client(sentinel.master_for(MASTER_NAME, socket_timeout=2))
    waiter_client = redlease.Client(sentinel.master_for(MASTER_NAME, socket_timeout=2))
    try:
        lock = client.lock("order:sentinel", lease=30)
        assert lock.acquire()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if replica.info("replication").get("master_link_status") == "up":
                break
            time.sleep(0.1)
        got: list[bool] = []
        waiter = threading.Thread(
            target=lambda: got.append(waiter_client.lock("order:sentinel").acquire(timeout=60))
        )
        waiter.start()
        deadline = time.monotonic() + 20
        while not _waiting(waiter_client, "order:sentinel") and time.monotonic() < deadline:
            time.sleep(0.02)
        master.kill()  # the sentinels promote the replica
        # the holder's release reaches the new master (or the hold was lost: then it says so)
        deadline = time.monotonic() + 40
        released = False
        while time.monotonic() < deadline and not released:
            try:
                lock.release()
                released = True
            except redlease.LeaseLostError:
                released = True
            except redlease.ServerUnavailableError:
                time.sleep(0.5)
        assert released, "the client never reached the promoted master"
        waiter.join(60)
        assert got == [True], "the waiter re-subscribed and got the lock on the new master"
    finally:
        client.close()
        waiter_client.close()


async def test_async_client_on_a_sentinel_managed_master(sentinel_setup):
    import asyncio

    import redis.asyncio.sentinel

    _, _, sentinels = sentinel_setup
    sentinel = redis.asyncio.sentinel.Sentinel(
        [("127.0.0.1", p) for p in sentinels.ports], socket_timeout=2
    )
    async with (
        redlease.AsyncClient(sentinel.master_for(MASTER_NAME)) as a,
        redlease.AsyncClient(sentinel.master_for(MASTER_NAME)) as b,
    ):
        holder = a.lock("order:sentinel-async")
        assert await holder.acquire(lease=30)
        waiter = asyncio.create_task(b.lock("order:sentinel-async").acquire(timeout=20))
        await eventually(lambda: _waiting(b, "order:sentinel-async"))
        started = time.monotonic()
        await holder.release()
        assert await waiter
        assert time.monotonic() - started < 10, "woken by pub/sub through the sentinel's master"
