"""Locks on a real Redis Cluster (3 masters, 3 replicas), sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis.cluster
from integration.helpers import eventually

from redlease import InvalidArgumentError
from redlease._core.keys import hash_slot

from .test_watchdog import _renewals_seen

pytestmark = pytest.mark.cluster

NAMES = [f"order:{i}" for i in range(12)]  # spread over the three masters


def test_names_spread_over_the_masters(cluster):
    masters = {cluster.master_of(n).port for n in NAMES}
    assert len(masters) == 3


async def test_locks_on_every_master(side, cluster):
    client = side.client(cluster.url, cluster=True)
    other = side.client(cluster.url, cluster=True)
    for name in NAMES:
        lock = client.lock(name)
        async with side.hold(lock, timeout=5) as lease:
            assert lease.fencing_token > 0
            assert not await side(other.lock(name).acquire(blocking=False))
            assert (await side(other.lock(name).statistics())).locked
        assert not await side(lock.locked())


async def test_hand_off_through_pub_sub_on_a_cluster(side, cluster):
    name = f"{NAMES[5]}:{side.kind}"  # the waiter keeps it: one name per side
    holder = side.client(cluster.url, cluster=True).lock(name)
    waiter_client = side.client(cluster.url, cluster=True)
    assert await side(holder.acquire(lease=30))
    started = time.monotonic()
    if side.is_async:
        task = asyncio.create_task(waiter_client.lock(name).acquire(timeout=25))
        await eventually(lambda: _waiting(waiter_client, name))
        await holder.release()
        assert await task
    else:
        got: list[bool] = []
        thread = threading.Thread(
            target=lambda: got.append(waiter_client.lock(name).acquire(timeout=25))
        )
        thread.start()
        await eventually(lambda: _waiting(waiter_client, name))
        holder.release()
        thread.join(30)
        assert got == [True]
    assert time.monotonic() - started < 10, "woken by the message, not by the 30 s lease"


def _waiting(client, name) -> bool:
    sub = client._subscriber
    return sub is not None and sub.waiting(f"redisson_lock__channel:{{{name}}}") > 0


async def test_watchdog_renews_locks_across_slots(side, cluster):
    # a 2 s lease, renewed every 2/3 s: a renewal late by up to 1.3 s on a loaded 2-core
    # machine still lands within it (1.5 s left 1 s)
    client = side.client(cluster.url, cluster=True, watchdog_timeout=2)
    names = [f"renew:{i}" for i in range(60)]
    assert len({hash_slot(n) for n in names}) > 3
    for name in names:
        assert await side(client.lock(name).acquire())
    # several leases pass (waited for, not slept through): every tenth hold seen renewed 7
    # times, a third of a lease apart, and never expired meanwhile
    observer = redis.cluster.RedisCluster.from_url(cluster.url, socket_timeout=5)
    try:
        await _renewals_seen(observer, names[::10], count=7, timeout=60)
    finally:
        observer.close()
    for name in names:
        assert await side(client.lock(name).owned())
        await side(client.lock(name).release())


async def test_fenced_set_on_a_cluster(side, cluster):
    client = side.client(cluster.url, cluster=True)
    async with side.hold(client.lock("fenced:1")) as lease:
        await side(client.fenced_set("stock:{fenced:1}", "9", lease.fencing_token))


async def test_a_name_with_its_own_hash_tag_works_and_braces_without_one_are_refused(side, cluster):
    """Redisson's unlock channel for "{user:1}:cart" keeps the tag, so it shares the lock's
    slot (a release SPUBLISHes on it from the script); braces that form no tag are refused."""
    client = side.client(cluster.url, cluster=True)
    lock = client.lock("{user:1}:cart")
    assert await side(lock.acquire(blocking=False))
    await side(lock.release())
    with pytest.raises(InvalidArgumentError, match=r"braces|hash tag"):
        client.lock("a{}b")
    with pytest.raises(InvalidArgumentError, match="cluster"):
        side.client(cluster.url, cluster=True, replicas=1)
