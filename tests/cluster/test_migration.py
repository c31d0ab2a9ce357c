"""A slot migrated to another master while a lock in it is held and renewed."""

from __future__ import annotations

import time

import pytest
import redis

import redlease
from redlease._core.keys import LockKeys

from .conftest import LocalCluster

pytestmark = pytest.mark.cluster


def _migrate_slot(cluster: LocalCluster, key: str) -> None:
    """Move ``key``'s slot, with its keys, from its master to another master."""
    source = cluster.master_of(key)
    target = next(
        n for n in cluster.nodes[: cluster.masters] if n.port != source.port and n.process
    )
    with (
        redis.Redis(host=source.host, port=source.port, decode_responses=True) as src,
        redis.Redis(host=target.host, port=target.port, decode_responses=True) as dst,
    ):
        slot = src.cluster("KEYSLOT", key)
        src_id, dst_id = src.cluster("MYID"), dst.cluster("MYID")
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for node in cluster.nodes[: cluster.masters]:
            with redis.Redis(host=node.host, port=node.port) as r:
                r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


def test_a_held_lock_survives_its_slot_moving(own_cluster):
    name = "order:migrating"
    with (
        redlease.Client.from_url(own_cluster.url, cluster=True, watchdog_timeout=1.5) as client,
        redlease.Client.from_url(own_cluster.url, cluster=True) as other,
    ):
        lost: list[Exception] = []
        lock = client.lock(name, on_lease_lost=lost.append)
        assert lock.acquire()
        before = own_cluster.master_of(name).port
        _migrate_slot(own_cluster, name)
        assert own_cluster.master_of(name).port != before
        time.sleep(3.5)  # more than two leases: renewals must reach the new master (MOVED)
        assert not lost, f"the hold was reported lost: {lost}"
        assert lock.owned()
        assert not other.lock(name).acquire(blocking=False)
        token = lock.fencing_token
        lock.release()
        assert other.lock(name).acquire(blocking=False)  # free, on the new master
        assert other.lock(name).fencing_token > token  # the counter moved with the slot
        other.lock(name).release()
        keys = LockKeys.for_name(name)
        assert own_cluster.master_of(keys.fence).port == own_cluster.master_of(name).port
