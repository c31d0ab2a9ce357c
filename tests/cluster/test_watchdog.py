"""The watchdog on a cluster: a paused master must not stall the renewals on the others."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.cluster
from integration.helpers import eventually

from redlease.events import LockEvent

from .conftest import LocalCluster

pytestmark = pytest.mark.cluster

WATCHDOG = 3.0
"""The lease of the holds: the watchdog renews every second."""


def _names_by_master(cluster: LocalCluster, count: int) -> dict[int, list[str]]:
    """``count`` lock names per master (by port), each in a slot of its own."""
    out: dict[int, list[str]] = {}
    slots: set[int] = set()
    i = 0
    while len(out) < cluster.masters or any(len(v) < count for v in out.values()):
        name = f"watched:{i}"
        i += 1
        with redis.Redis(host=cluster.nodes[0].host, port=cluster.nodes[0].port) as r:
            slot = int(r.cluster("KEYSLOT", name))
        if slot in slots:
            continue
        names = out.setdefault(cluster.master_of(name).port, [])
        if len(names) < count:
            names.append(name)
            slots.add(slot)
    return out


async def _renewals_seen(
    observer: redis.cluster.RedisCluster, names: list[str], count: int, timeout: float = 30
) -> None:
    """Wait until the lease of every one of ``names`` has been seen renewed ``count`` times
    (its PTTL went up), checking all along that none of them expired."""
    seen = dict.fromkeys(names, 0)
    last = {name: int(observer.pttl(name)) for name in names}
    deadline = time.monotonic() + timeout
    while any(n < count for n in seen.values()):
        assert time.monotonic() < deadline, f"renewals seen within {timeout} s: {seen}"
        await asyncio.sleep(0.05)
        for name in names:
            now = int(observer.pttl(name))
            assert now > 0, f"{name}: the lease ran out (pttl {now}): it was not renewed"
            if now > last[name] + 50:
                seen[name] += 1
            last[name] = now


async def test_a_paused_master_does_not_stall_renewals_on_the_others(side, own_cluster):
    """Holds on all three masters, one master SIGSTOPped for longer than a lease. The client
    chose no socket timeout at all; the watchdog's own calls are bounded, so the holds on
    the other masters keep being renewed throughout, and the holder of each hold on the
    paused master is told its lease was lost (no failover here: the paused master's slots
    simply stop answering)."""
    for node in own_cluster.nodes:  # no failover, and the other masters keep serving
        with redis.Redis(host=node.host, port=node.port) as r:
            r.config_set("cluster-require-full-coverage", "no")
            r.config_set("cluster-replica-no-failover", "yes")
    by_master = _names_by_master(own_cluster, count=3)
    victim = next(n for n in own_cluster.nodes if n.port == own_cluster.nodes[0].port)
    paused_names = by_master.pop(victim.port)
    other_names = [name for names in by_master.values() for name in names]

    client = side.client(
        own_cluster.url, cluster=True, watchdog_timeout=WATCHDOG, socket_timeout=None
    )
    events: list[LockEvent] = []
    client.add_listener(events.append)
    locks = {name: client.lock(name) for name in [*paused_names, *other_names]}
    for lock in locks.values():
        assert await side(lock.acquire())
    observer = redis.cluster.RedisCluster.from_url(own_cluster.url, socket_timeout=2)
    try:
        await _renewals_seen(observer, [*paused_names, *other_names], count=1)
        victim.pause()
        try:
            # the other masters' holds are renewed all along, while the paused master's
            # renewals fail and, after a whole lease, are reported lost
            await _renewals_seen(observer, other_names, count=2)

            def lost() -> set[str]:
                return {e.name for e in events if e.kind == "lease_lost"}

            await eventually(lambda: lost() >= set(paused_names), timeout=4 * WATCHDOG)
            await _renewals_seen(observer, other_names, count=1)
            assert lost() == set(paused_names), "only the holds on the paused master are lost"
            failed = {e.name for e in events if e.kind == "renewal_failed"}
            assert failed >= set(paused_names)
        finally:
            victim.resume()
        for name in other_names:
            assert await side(locks[name].owned())
            await side(locks[name].release())
    finally:
        observer.close()
