"""Replica-confirmed writes (WAIT) against a real master and replica, sync and asyncio."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import pytest
import redis

from redlease import NotOwnedError, ReplicaError
from redlease.testing import RedisServer

from .helpers import eventually


def _replica_online(master: RedisServer) -> bool:
    raw = redis.Redis.from_url(master.url, decode_responses=True)
    try:
        info = raw.info("replication")
        return info.get("connected_slaves") == 1 and info["slave0"]["state"] == "online"
    finally:
        raw.close()


@pytest.fixture
async def replicated(binary) -> AsyncIterator[tuple[RedisServer, RedisServer]]:
    with RedisServer(binary) as master:
        replica = RedisServer(binary, extra_args=("--replicaof", master.host, str(master.port)))
        with replica:
            await eventually(lambda: _replica_online(master), timeout=30)
            yield master, replica
            replica.resume()  # never leave it stopped for the teardown


async def test_writes_wait_for_the_replica(side, replicated, name):
    master, _ = replicated
    lock = side.client(master.url, replicas=1, replica_timeout=5).lock(name)
    async with side.hold(lock, timeout=5) as lease:
        assert lease.hold_count == 1
    assert not await side(lock.locked())


async def test_acquire_without_enough_replicas_gives_the_hold_back(side, replicated, name):
    master, replica = replicated
    client = side.client(master.url, replicas=1, replica_timeout=0.2)
    replica.pause()
    lock = client.lock(name)
    with pytest.raises(ReplicaError) as info:
        await side(lock.acquire(timeout=5))
    assert info.value.required == 1 and info.value.acked == 0 and name in str(info.value)
    assert not await side(lock.locked()), "the unconfirmed hold was given back"
    assert lock.fencing_token is None
    # a lock of the same client that does not ask for replicas still works
    plain = client.lock(name + ":plain", replicas=0)
    assert await side(plain.acquire(timeout=5))
    await side(plain.release())


async def test_per_lock_replicas_override_the_client(side, replicated, name):
    master, replica = replicated
    client = side.client(master.url)  # no replicas by default
    replica.pause()
    with pytest.raises(ReplicaError):
        await side(client.lock(name, replicas=1).acquire(blocking=False))
    assert not await side(client.lock(name).locked())


async def test_unconfirmed_release_is_reported_and_still_done(side, replicated, name):
    master, replica = replicated
    lock = side.client(master.url, replicas=1, replica_timeout=1).lock(name)
    assert await side(lock.acquire(timeout=5))
    replica.pause()
    with pytest.raises(ReplicaError):
        await side(lock.release())
    assert not await side(lock.locked())  # released on the master
    with pytest.raises(NotOwnedError):
        await side(lock.release())  # and locally: nothing left to release


async def test_unconfirmed_renewals_end_in_a_lost_lease(side, replicated, name):
    master, replica = replicated
    lost = threading.Event()
    client = side.client(master.url, replicas=1, replica_timeout=1, watchdog_timeout=0.6)
    lock = client.lock(name, on_lease_lost=lambda _e: lost.set())
    assert await side(lock.acquire(timeout=5))
    replica.pause()
    await eventually(lost.is_set, timeout=15)
    assert lock.lease_lost


def test_bad_replica_options(server):
    import redlease

    with pytest.raises(ValueError, match="replicas"):
        redlease.Client.from_url(server.url, replicas=-1)
    with pytest.raises(ValueError, match="replica_timeout"):
        redlease.Client.from_url(server.url, replicas=1, replica_timeout=0)
