"""A forced release its holder hears at once, on a cluster: the "lost" message goes by SPUBLISH
on the holder channel's slot (the lock's), as a hand-over does, on a Redis/Valkey >= 7 cluster;
by classic PUBLISH on a Redis 6.2 one. One lock name per master, so every master serves one."""

from __future__ import annotations

import threading

import pytest
from integration.helpers import eventually

from redlease import LeaseLostError
from redlease._core.keys import LockKeys, hash_slot

from .conftest import LocalCluster
from .test_sharded_pubsub import classic_subscribers, names_on_every_master, shard_subscribers

pytestmark = pytest.mark.cluster

LONG = 600.0
"""A watchdog lease whose first round comes long after any bound here (see the integration
tests of the same name)."""


async def _heard_on_every_master(side, cluster: LocalCluster, *, sharded: bool) -> None:
    holder_client = side.client(cluster.url, cluster=True, watchdog_timeout=LONG)
    operator = side.client(cluster.url, cluster=True)
    names = names_on_every_master(cluster, f"forced:{side.kind}:{sharded}")
    told: dict[str, LeaseLostError] = {}
    all_told = threading.Event()

    def on_lost(error: LeaseLostError) -> None:
        told[error.name] = error
        if len(told) == len(names):
            all_told.set()

    locks = [holder_client.lock(name, on_lease_lost=on_lost) for name in names]
    for lock in locks:
        assert await side(lock.acquire())
    count = shard_subscribers if sharded else classic_subscribers
    for name in names:
        channel = LockKeys.for_name(name).holder(f"{holder_client.id}:1")
        assert hash_slot(channel) == hash_slot(name)  # routed as the lock's keys

        def counted(c: str = channel) -> bool:
            return count(cluster, c) > 0

        await eventually(counted, timeout=20)
    for name in names:
        assert await side(operator.lock(name).force_release())
    await eventually(all_told.is_set, timeout=20)
    assert {e.cause for e in told.values()} == {"forced"}
    for lock in locks:
        assert lock.lease_lost


async def test_a_force_release_is_heard_on_every_master(side, cluster):
    await _heard_on_every_master(side, cluster, sharded=True)


async def test_a_force_release_is_heard_with_classic_pub_sub(side, legacy_cluster):
    await _heard_on_every_master(side, legacy_cluster, sharded=False)
