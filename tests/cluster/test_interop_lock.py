"""The reentrant lock shared with Redisson on a cluster (issue #13): a Java thread's ``RLock``
in Redisson's cluster mode (``redlease.peers.RedissonLock(cluster=True)``: on Redis >= 7 it
chooses sharded pub/sub as Redisson's default ``AUTO`` does, ``SPUBLISH`` and ``SSUBSCRIBE``
on the master of the channel's slot) and redlease's cluster client on the same names, names
with and without braces: exclusion and prompt wake-up both ways. On a Redis 6.2 cluster both
sides fall back to classic pub/sub and still wake each other."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from integration.helpers import eventually
from integration.test_semaphore import Background
from interop.test_lock import JavaThread, held_then_released, unique
from redis.cluster import RedisCluster

from redlease._core.keys import LockKeys, hash_slot, lock_token_key, redisson_prefixed
from redlease.peers import RedissonLock
from redlease.testing.redisson import RedissonFencedLock

from .conftest import LocalCluster
from .test_sharded_pubsub import Listener, classic_subscribers, shard_subscribers

pytestmark = pytest.mark.cluster

WOKEN_WITHIN = 10.0
"""A waiter woken by the unlock message holds the lock within this, however loaded the
machine; without it a redlease waiter looks again only at the end of its 20 s wait (under
``long_recheck``; else after 5 s), a Redisson waiter after the holder's 30 s TTL or its own
20 s wait."""

FORMS = ["plain", "{order}:42", "a{b}c"]


@pytest.fixture(params=FORMS)
def lock_name(request: pytest.FixtureRequest) -> str:
    return unique(request.param)


def java_on(cluster: LocalCluster, name: str, **kwargs: Any) -> RedissonLock:
    return RedissonLock(cluster.url, name, cluster=True, **kwargs)


def test_redisson_chooses_sharded_pub_sub_on_redis_7_as_redlease_does(cluster, lock_name):
    """Redisson's ``AUTO``: a cluster node that answers ``PUBSUB SHARDNUMSUB`` means sharded
    pub/sub; the unlock channel shares the lock name's slot, braces or not."""
    java = java_on(cluster, lock_name)
    try:
        assert java.sharded and java.publish_command == "spublish"
        assert hash_slot(java.channel) == hash_slot(lock_name)
    finally:
        java.close()


async def test_exclusion_both_ways(side, cluster, lock_name):
    """A Java hold (re-entered) keeps redlease out, and a redlease hold (re-entered) keeps the
    Java thread out, on the master of the name's slot."""
    java = java_on(cluster, lock_name)
    lock = side.client(cluster.url, cluster=True).lock(lock_name)
    try:
        assert java.try_lock(wait=0) and java.try_lock(wait=0)
        assert not await side(lock.acquire(blocking=False))
        assert not java.unlock()
        assert not await side(lock.acquire(timeout=0.2))
        assert java.unlock()
        assert await side(lock.acquire(blocking=False))
        assert await side(lock.acquire(blocking=False))  # re-entered
        assert not java.try_lock(wait=0.2)
        await side(lock.release())
        assert not java.try_lock(wait=0)
        await side(lock.release())
        assert java.try_lock(wait=0)
        assert java.unlock()
        assert not java.renew()  # with it goes the last unlock latch's DEL (same slot)
        node = cluster.master_of(lock_name)
        with redis.Redis(host=node.host, port=node.port) as r:
            assert r.keys(redisson_prefixed("redisson_unlock_latch", lock_name) + ":*") == []
    finally:
        java.close()


async def test_redisson_unlock_wakes_a_redlease_waiter_by_spublish(
    side, cluster, lock_name, long_recheck
):
    """A redlease waiter listens with SSUBSCRIBE on the master of the channel's slot; the Java
    thread's unlock SPUBLISHes ``0`` there, and the waiter holds the lock at once."""
    java = java_on(cluster, lock_name)
    client = side.client(cluster.url, cluster=True)
    listener = Listener(cluster.master_of(java.channel), java.channel, sharded=True)
    try:
        assert java.try_lock(wait=0)
        stamp: list[float] = []
        waiting = Background(side, held_then_released(side, client.lock(lock_name), stamp))
        await eventually(lambda: shard_subscribers(cluster, java.channel) == 2)  # + listener
        assert classic_subscribers(cluster, java.channel) == 0
        started = time.monotonic()
        assert java.unlock()
        assert await waiting.result(timeout=25)
        assert stamp[0] - started < WOKEN_WITHIN, "not woken by the unlock message"
        await listener.hears("0")  # SPUBLISH: a sharded subscriber heard it
    finally:
        listener.close()
        java.close()


async def test_redlease_release_wakes_a_redisson_waiter_by_spublish(side, cluster, lock_name):
    """A Java thread in ``tryLock(20 s)`` listens with SSUBSCRIBE; redlease's release
    SPUBLISHes ``0`` and the Java thread holds the lock at once."""
    java = java_on(cluster, lock_name)
    lock = side.client(cluster.url, cluster=True).lock(lock_name)
    try:
        assert await side(lock.acquire())
        waiter = JavaThread(lambda: java.try_lock(wait=20))
        await eventually(lambda: shard_subscribers(cluster, java.channel) == 1)
        assert classic_subscribers(cluster, java.channel) == 0
        started = time.monotonic()
        await side(lock.release())
        assert await waiter.result(timeout=25)
        assert waiter.done_at - started < WOKEN_WITHIN, "not woken by the unlock message"
        assert java.hold_count() == 1
        assert not await side(lock.acquire(blocking=False))
        await eventually(lambda: shard_subscribers(cluster, java.channel) == 0)  # unsubscribed
        assert java.unlock()
    finally:
        java.close()


async def test_turns_go_round_between_java_and_redlease(side, cluster, lock_name, long_recheck):
    """Two Java threads and a redlease waiter take turns on one name, each woken by the
    previous holder's SPUBLISH: every turn comes within the bound of a message."""
    first, second = java_on(cluster, lock_name, thread_id=1), java_on(cluster, lock_name)
    client = side.client(cluster.url, cluster=True)
    raw = RedisCluster.from_url(cluster.url)
    line = LockKeys.for_name(lock_name).line
    try:
        for _ in range(3):
            assert first.try_lock(wait=0)
            stamp: list[float] = []
            ours = Background(side, held_then_released(side, client.lock(lock_name), stamp))
            theirs = JavaThread(lambda: second.try_lock(wait=20) and second.unlock())
            await eventually(lambda: raw.zcard(line) == 1)  # redlease's waiter in line
            await eventually(lambda: shard_subscribers(cluster, first.channel) == 2)
            started = time.monotonic()
            assert first.unlock()
            assert await ours.result(timeout=25)
            assert await theirs.result(timeout=25)
            # two wake-ups, one after the other; a missed one costs 20 s (a wait's end)
            assert max(stamp[0], theirs.done_at) - started < 1.5 * WOKEN_WITHIN
    finally:
        raw.close()
        first.close()
        second.close()


async def test_classic_pub_sub_both_ways_on_a_redis_6_2_cluster(side, legacy_cluster, long_recheck):
    """Redis 6.2 answers no ``PUBSUB SHARDNUMSUB``: the Java side chooses classic pub/sub as
    redlease does, and each still wakes the other at once."""
    name = unique("plain")
    java = java_on(legacy_cluster, name)
    client = side.client(legacy_cluster.url, cluster=True)
    try:
        assert not java.sharded and java.publish_command == "publish"
        assert java.try_lock(wait=0)
        stamp: list[float] = []
        waiting = Background(side, held_then_released(side, client.lock(name), stamp))
        await eventually(lambda: classic_subscribers(legacy_cluster, java.channel) == 1)
        started = time.monotonic()
        assert java.unlock()
        assert await waiting.result(timeout=25)
        assert stamp[0] - started < WOKEN_WITHIN, "redlease not woken by the Java unlock"

        # redlease's subscription lingers 2 s after its last waiter: then nobody listens
        await eventually(lambda: classic_subscribers(legacy_cluster, java.channel) == 0)
        lock = client.lock(name)
        assert await side(lock.acquire())
        waiter = JavaThread(lambda: java.try_lock(wait=20))
        await eventually(lambda: classic_subscribers(legacy_cluster, java.channel) == 1)
        started = time.monotonic()
        await side(lock.release())
        assert await waiter.result(timeout=25)
        assert waiter.done_at - started < WOKEN_WITHIN, "Java not woken by the release"
        assert java.unlock()
    finally:
        java.close()


async def test_java_fenced_lock_and_redlease_share_one_token_sequence(side, cluster, lock_name):
    """Java's ``RFencedLock`` in cluster mode (``redisson_lock_token:{name}``, in the slot of
    the lock key ``name``) and redlease's cluster client take the lock in turn: one strictly
    increasing sequence, both keys on the master of the name's slot."""
    assert hash_slot(lock_token_key(lock_name)) == hash_slot(lock_name)
    java = RedissonFencedLock(cluster.url, lock_name, cluster=True)
    lock = side.client(cluster.url, cluster=True).lock(lock_name)
    tokens: list[int] = []
    try:
        for _ in range(3):
            token = java.try_lock_and_get_token(10)
            assert token is not None
            tokens.append(token)
            assert java.unlock()
            async with side.hold(lock, timeout=10) as lease:
                tokens.append(lease.fencing_token)
    finally:
        java.close()
    assert tokens == sorted(set(tokens)), tokens
