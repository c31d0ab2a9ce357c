"""The other primitives on a real Redis Cluster: their keys share one slot, so they just work."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


async def test_fair_and_rw_locks_on_a_cluster(side, cluster):
    client = side.client(cluster.url, cluster=True)
    for i in range(6):  # names on every master
        fair = client.fair_lock(f"fair:{i}:{side.kind}")
        async with side.hold(fair, timeout=5) as lease:
            assert lease.fencing_token > 0
        rw = client.rw_lock(f"rw:{i}:{side.kind}")
        async with side.hold(rw.read_lock(), timeout=5):
            assert await side(rw.read_lock().owned())
        async with side.hold(rw.write_lock(), timeout=5):
            assert await side(rw.write_lock().owned())


async def test_semaphores_and_latch_on_a_cluster(side, cluster):
    client = side.client(cluster.url, cluster=True)
    for i in range(6):
        sem = client.semaphore(f"sem:{i}:{side.kind}")
        assert await side(sem.try_set_permits(2))
        assert await side(sem.acquire(2, timeout=5))
        await side(sem.release(2))
        assert await side(sem.available()) == 2
        slots = client.lease_semaphore(f"slots:{i}:{side.kind}")
        assert await side(slots.try_set_permits(1))
        permit = await side(slots.acquire(timeout=5, lease=10))
        assert permit is not None
        await side(slots.release(permit))
        latch = client.latch(f"latch:{i}:{side.kind}")
        assert await side(latch.try_set_count(1))
        await side(latch.count_down())
        assert await side(latch.wait(timeout=5))


async def test_redissons_semaphore_and_latch_calls_on_a_cluster(side, cluster):
    """The calls Redisson's tests use (issue #13 item 6): every key of each shares a slot."""
    client = side.client(cluster.url, cluster=True)
    for i in range(6):
        sem = client.semaphore(f"sem6:{i}:{side.kind}")
        await side(sem.set_permits(3))
        await side(sem.add_permits(-1))
        assert await side(sem.acquire(2, timeout=5)) and await side(sem.acquire(0))
        await side(sem.release(2))
        assert await side(sem.available()) == 2
        slots = client.lease_semaphore(f"{{slots6:{i}}}:{side.kind}")
        await side(slots.set_permits(2))
        await side(slots.add_permits(1))
        ids = await side(slots.acquire_many(3, timeout=5, lease=10))
        assert ids is not None and len(ids) == 3
        assert await side(slots.update_lease_time(ids[0], 20))
        assert await side(slots.expire(60))
        assert await side(slots.release_many(ids)) == 3
        latch = client.latch(f"latch6:{i}:{side.kind}")
        assert await side(latch.try_set_count(2))
        assert await side(latch.delete())
        assert await side(latch.wait(timeout=5))
