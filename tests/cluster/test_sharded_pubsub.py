"""Waiters woken by sharded pub/sub (SPUBLISH/SSUBSCRIBE) on a Redis >= 7 cluster, with one
subscriber connection per master at most; classic pub/sub on a Redis 6.2 cluster."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import redis
from integration.helpers import eventually
from integration.test_semaphore import Background

from redlease._core.keys import LockKeys
from redlease.testing import RedisServer

from .conftest import LocalCluster
from .test_migration import _migrate_slot

pytestmark = pytest.mark.cluster

WOKEN_WITHIN = 10.0
"""A waiter woken by the message acquires within this, however loaded the machine; without
it, it would look again only at the end of its 20 s wait or at the holder's 30 s lease
(under ``long_recheck``; else after RECHECK, 5 s, the read-write lock's 2 s)."""


def _node(server: RedisServer) -> redis.Redis:
    return redis.Redis(host=server.host, port=server.port, decode_responses=True)


def _live(cluster: LocalCluster) -> list[RedisServer]:
    return [n for n in cluster.nodes if n.process is not None]


def shard_subscribers(cluster: LocalCluster, channel: str) -> int:
    """Sharded subscriptions to ``channel`` on the master that serves its slot."""
    with _node(cluster.master_of(channel)) as r:
        reply = r.execute_command("PUBSUB", "SHARDNUMSUB", channel)
    return int(reply[1])


def classic_subscribers(cluster: LocalCluster, channel: str) -> int:
    """Classic subscriptions to ``channel`` on every node."""
    total = 0
    for node in _live(cluster):
        with _node(node) as r:
            total += int(r.execute_command("PUBSUB", "NUMSUB", channel)[1])
    return total


def names_on_every_master(cluster: LocalCluster, prefix: str) -> list[str]:
    """One name per master: ``prefix:0``, ``prefix:1``... until every master has one."""
    by_master: dict[int, str] = {}
    for i in range(200):
        name = f"{prefix}:{i}"
        by_master.setdefault(cluster.master_of(name).port, name)
        if len(by_master) == cluster.masters:
            return list(by_master.values())
    raise AssertionError("names do not spread over the masters")


class Listener:
    """A plain subscription of the test's own on ``node``: SSUBSCRIBE (it hears SPUBLISH only,
    on the master of the channel's slot) or classic SUBSCRIBE (it hears PUBLISH only)."""

    def __init__(self, node: RedisServer, channel: str, *, sharded: bool) -> None:
        self._sharded = sharded
        self._redis = _node(node)
        self._pubsub = self._redis.pubsub()
        if sharded:
            self._pubsub.ssubscribe(channel)
        else:
            self._pubsub.subscribe(channel)
        self.heard: list[str] = []

    async def hears(self, payload: str, timeout: float = 10.0) -> None:
        def poll() -> bool:
            if self._sharded:
                message = self._pubsub.get_sharded_message(timeout=0)
            else:
                message = self._pubsub.get_message(timeout=0)
            if message and message.get("type") in ("message", "smessage"):
                self.heard.append(message["data"])
            # a payload ending in ":" is an owner-field prefix (a lock wakes its next waiter)
            if payload.endswith(":"):
                return any(heard.startswith(payload) for heard in self.heard)
            return payload in self.heard

        await eventually(poll, timeout)

    def close(self) -> None:
        self._pubsub.close()
        self._redis.close()


@dataclass
class Case:
    """One primitive: ``hold`` takes it on the holder's client, ``wait`` blocks on the
    waiter's, ``give`` frees it; ``channel`` is the primitive's channel, ``wake`` the one the
    release wakes the waiter on (a lock's: the waiter's client's own)."""

    channel: str
    hold: Callable[[], Any]
    wait: Callable[[], Any]
    give: Callable[[Any], Any]
    payload: str
    wake: str = ""

    def __post_init__(self) -> None:
        self.wake = self.wake or self.channel


def _cases(kind: str, name: str, a: Any, b: Any) -> Case:
    if kind in ("lock", "fair"):
        make = (lambda c: c.lock(name)) if kind == "lock" else (lambda c: c.fair_lock(name))
        return Case(
            f"redisson_lock__channel:{{{name}}}",
            lambda: make(a).acquire(lease=30),
            lambda: make(b).acquire(timeout=20),
            lambda _: make(a).release(),
            f"{b.id}:",  # the release wakes the waiter whose turn it is, by its owner field
            LockKeys.for_name(name).handover_prefix + b.id,  # on its client's own channel
        )
    if kind == "rw":
        return Case(
            f"redlease:rw-channel:{{{name}}}",
            lambda: a.rw_lock(name).write_lock().acquire(lease=30),
            lambda: b.rw_lock(name).read_lock().acquire(timeout=20),
            lambda _: a.rw_lock(name).write_lock().release(),
            "1",
        )
    if kind == "semaphore":
        return Case(
            f"redisson_sc:{{{name}}}",
            lambda: _then(a.semaphore(name).try_set_permits(1), a.semaphore(name).acquire),
            lambda: b.semaphore(name).acquire(timeout=20),
            lambda _: a.semaphore(name).release(),
            "1",
        )
    if kind == "lease_semaphore":
        return Case(
            f"redisson_sc:{{{name}}}",
            lambda: _then(
                a.lease_semaphore(name).try_set_permits(1),
                lambda: a.lease_semaphore(name).acquire(lease=30),
            ),
            lambda: b.lease_semaphore(name).acquire(timeout=20, lease=30),
            lambda permit: a.lease_semaphore(name).release(permit),
            "1",
        )
    assert kind == "latch"
    return Case(
        f"redisson_countdownlatch__channel__{{{name}}}",
        lambda: a.latch(name).try_set_count(1),
        lambda: b.latch(name).wait(timeout=20),
        lambda _: a.latch(name).count_down(),
        "0",
    )


def _then(first: Any, then: Callable[[], Any]) -> Any:
    """``first`` (awaited if need be), then ``then()``: one call for either side."""
    if isinstance(first, Awaitable):

        async def chain() -> Any:
            await first
            return await then()

        return chain()
    return then()


def _take_and_give_lock(client: Any, name: str) -> Any:
    """``_take_and_give`` of ``client``'s lock ``name``."""
    return _take_and_give(client.lock(name))


def _take_and_give(lock: Any) -> Any:
    """Acquire ``lock`` (waiting), then release it, in the same thread or task."""
    got = lock.acquire(timeout=30)
    if isinstance(got, Awaitable):

        async def chain() -> Any:
            ok = await got
            await lock.release()
            return ok

        return chain()
    lock.release()
    return got


KINDS = ["lock", "fair", "rw", "semaphore", "lease_semaphore", "latch"]


@pytest.mark.parametrize("kind", KINDS)
async def test_hand_off_by_sharded_pub_sub_on_every_master(side, cluster, kind, long_recheck):
    """A waiter on another client listens with SSUBSCRIBE on the master of its channel's slot
    (not with classic SUBSCRIBE anywhere), and the release wakes it with SPUBLISH."""
    holder_client = side.client(cluster.url, cluster=True)
    waiter_client = side.client(cluster.url, cluster=True)
    for name in names_on_every_master(cluster, f"sharded:{kind}:{side.kind}"):
        case = _cases(kind, name, holder_client, waiter_client)
        held = await side(case.hold())
        assert held
        waiting = Background(side, case.wait)

        def subscribed(c: Any = case) -> bool:
            return shard_subscribers(cluster, c.channel) == 1

        await eventually(subscribed)
        assert classic_subscribers(cluster, case.channel) == 0
        listener = Listener(cluster.master_of(case.wake), case.wake, sharded=True)
        try:
            started = time.monotonic()
            await side(case.give(held))
            assert await waiting.result(timeout=25), f"{kind} {name}: the waiter got nothing"
            assert time.monotonic() - started < WOKEN_WITHIN, "woken by the message"
            await listener.hears(case.payload)  # the release published with SPUBLISH
        finally:
            listener.close()


async def test_subscriber_connections_stay_within_the_masters(side, cluster):
    """Waiters on many names spread over the cluster: the waiting client holds one sharded
    pub/sub connection per master, and none once nobody waits any more."""
    tag = f"redlease-test-{uuid.uuid4().hex[:8]}"
    holder_client = side.client(cluster.url, cluster=True)
    waiter_client = side.client(cluster.url, cluster=True, client_name=tag)
    names = [f"many:{side.kind}:{i}" for i in range(30)]
    assert len({cluster.master_of(n).port for n in names}) == cluster.masters
    for name in names:
        assert await side(holder_client.lock(name).acquire(lease=30))
    waiting = [Background(side, partial(_take_and_give_lock, waiter_client, n)) for n in names]
    channels = [f"redisson_lock__channel:{{{n}}}" for n in names]
    await eventually(lambda: all(shard_subscribers(cluster, c) == 1 for c in channels))

    def pubsub_connections() -> dict[int, list[dict[str, Any]]]:
        out = {}
        for node in _live(cluster):
            with _node(node) as r:
                mine = [c for c in r.client_list() if c["name"] == tag and "P" in c["flags"]]
            out[node.port] = mine
        return out

    per_node = pubsub_connections()
    masters = {cluster.master_of(n).port for n in names}
    assert {port for port, conns in per_node.items() if conns} == masters
    assert all(len(conns) <= 1 for conns in per_node.values()), per_node
    assert all(c["sub"] == "0" and int(c["ssub"]) >= 1 for cs in per_node.values() for c in cs)
    # a lock's waiter listens on the unlock channel and on its client's own channel
    assert sum(int(c["ssub"]) for cs in per_node.values() for c in cs) == 2 * len(names)
    for name in names:
        await side(holder_client.lock(name).release())
    for each in waiting:
        assert await each.result(timeout=30)
    # channels linger 2 s after their last waiter, then a master nobody needs is let go
    await eventually(lambda: not any(pubsub_connections().values()), timeout=15)


async def _waiter_follows(
    side: Any, cluster: LocalCluster, name: str, move: Callable[[], Awaitable[None]]
) -> None:
    """A lock held and waited on; ``move`` changes the master of its slot. The waiter's
    subscription follows to the new master, and the release still wakes it by message."""
    # a lease longer than a failover takes, so the hold normally survives it on the replica,
    # and longer than WOKEN_WITHIN: a waiter that missed the message looks again only at the
    # holder's TTL (20-30 s when it last tried: renewed every 10 s)
    holder_client = side.client(cluster.url, cluster=True, watchdog_timeout=30)
    waiter_client = side.client(cluster.url, cluster=True)
    lost: list[Exception] = []
    holder = holder_client.lock(name, on_lease_lost=lost.append)
    assert await side(holder.acquire())
    channel = f"redisson_lock__channel:{{{name}}}"
    waiting = Background(side, lambda: waiter_client.lock(name).acquire(timeout=60))
    await eventually(lambda: shard_subscribers(cluster, channel) == 1)
    before = cluster.master_of(name).port
    await move()
    assert cluster.master_of(name).port != before

    def resubscribed() -> bool:
        try:
            return shard_subscribers(cluster, channel) == 1
        except redis.RedisError:
            return False

    await eventually(resubscribed, timeout=30)  # on the new master

    async def known() -> bool:
        """The truth after the move: the hold is there, or its holder was told it is not."""
        if lost:
            return True
        try:
            return bool(await side(holder.owned()))
        except Exception:  # the holder's own client still finding its way
            return False

    await eventually(known, timeout=30)
    if lost:  # the hold did not reach the promoted replica (or lapsed meanwhile)
        assert await waiting.result(timeout=30)
        return
    own = LockKeys.for_name(name).handover_prefix + waiter_client.id
    listener = Listener(cluster.master_of(own), own, sharded=True)
    try:
        started = time.monotonic()
        await side(holder.release())
        assert await waiting.result(timeout=30)
        assert time.monotonic() - started < WOKEN_WITHIN, "woken by the message"
        await listener.hears(f"{waiter_client.id}:")  # the waiter's own wake-up
    finally:
        listener.close()
    stats = await side(holder_client.lock(name).statistics())
    assert [o.split(":")[0] for o in stats.holders] == [waiter_client.id]


async def test_a_waiter_follows_its_channel_when_the_slot_moves(side, own_cluster, long_recheck):
    """The source master unsubscribes the slot's sharded channels when the slot leaves it; the
    subscriber subscribes them on the new master and the waiter is woken there."""

    async def migrate() -> None:
        _migrate_slot(own_cluster, name)

    name = f"order:sharded-moving:{side.kind}"
    await _waiter_follows(side, own_cluster, name, migrate)


async def test_a_waiter_follows_its_channel_to_a_promoted_replica(side, own_cluster, long_recheck):
    """The master of the waiter's slot is killed; once its replica is promoted, the waiter
    listens there and is woken there."""
    name = f"order:sharded-failover:{side.kind}"

    async def fail_over() -> None:
        old = own_cluster.master_of(name)
        old.kill()

        def promoted() -> bool:
            try:
                return own_cluster.master_of(name).port != old.port
            except LookupError:
                return False

        await eventually(promoted, timeout=30)

    await _waiter_follows(side, own_cluster, name, fail_over)


# --- Redis 6.2: classic pub/sub -----------------------------------------------------------


async def test_classic_pub_sub_on_a_cluster_without_sharded_pub_sub(
    side, legacy_cluster, long_recheck
):
    """Redis 6.2 has no SSUBSCRIBE: waiters listen with classic SUBSCRIBE on one node and
    releases PUBLISH, which the cluster forwards to every node."""
    with _node(legacy_cluster.nodes[0]) as r, pytest.raises(redis.ResponseError):
        r.execute_command("PUBSUB", "SHARDNUMSUB")
    holder_client = side.client(legacy_cluster.url, cluster=True)
    waiter_client = side.client(legacy_cluster.url, cluster=True)
    for kind in ("lock", "latch"):
        for name in names_on_every_master(legacy_cluster, f"legacy:{kind}:{side.kind}"):
            case = _cases(kind, name, holder_client, waiter_client)
            held = await side(case.hold())
            assert held
            waiting = Background(side, case.wait)

            def subscribed(c: Any = case) -> bool:
                return classic_subscribers(legacy_cluster, c.channel) == 1

            await eventually(subscribed)
            # a node that does not serve the slot hears the release too (the bus forwards it)
            elsewhere = next(
                n for n in legacy_cluster.nodes if n.port != legacy_cluster.master_of(name).port
            )
            listener = Listener(elsewhere, case.wake, sharded=False)
            try:
                started = time.monotonic()
                await side(case.give(held))
                assert await waiting.result(timeout=25)
                assert time.monotonic() - started < WOKEN_WITHIN, "woken by the message"
                await listener.hears(case.payload)
            finally:
                listener.close()


async def test_the_fallback_is_chosen_before_the_first_operation(side, legacy_cluster, cluster):
    """A cluster client settles its pub/sub on its first operation, not when it is made."""
    legacy = side.client(legacy_cluster.url, cluster=True)
    modern = side.client(cluster.url, cluster=True)
    assert not legacy._state.pubsub.settled and not modern._state.pubsub.settled
    legacy_lock, modern_lock = legacy.lock("settle:1"), modern.lock("settle:1")
    assert await side(legacy_lock.acquire(blocking=False))
    assert await side(modern_lock.acquire(blocking=False))
    assert legacy._state.pubsub.command == "publish"
    assert modern._state.pubsub.command == "spublish"
    await side(legacy_lock.release())
    await side(modern_lock.release())
    await asyncio.sleep(0)
