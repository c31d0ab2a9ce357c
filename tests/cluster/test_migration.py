"""A slot migrated to another master while a lock in it is held and renewed."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
import redis
import redis.cluster
from integration.helpers import eventually

import redlease
from redlease._core.keys import LockKeys
from redlease.testing import RedisServer

from .conftest import LocalCluster
from .test_watchdog import _renewals_seen

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
        redlease.Client.from_url(own_cluster.url, cluster=True, watchdog_timeout=2) as client,
        redlease.Client.from_url(own_cluster.url, cluster=True) as other,
    ):
        lost: list[Exception] = []
        lock = client.lock(name, on_lease_lost=lost.append)
        assert lock.acquire()
        before = own_cluster.master_of(name).port
        _migrate_slot(own_cluster, name)
        assert own_cluster.master_of(name).port != before
        # more than two leases: renewals must reach the new master (MOVED); 7 of them, a
        # third of a 2 s lease apart, waited for (a 1.5 s lease slept through 3.5 s left a
        # late renewal 1 s on a loaded 2-core machine)
        observer = redis.cluster.RedisCluster.from_url(own_cluster.url, socket_timeout=5)
        try:
            asyncio.run(_renewals_seen(observer, [name], count=7, timeout=60))
        finally:
            observer.close()
        assert not lost, f"the hold was reported lost: {lost}"
        assert lock.owned()
        assert not other.lock(name).acquire(blocking=False)
        token = lock.fencing_token
        assert token is not None
        lock.release()
        assert other.lock(name).acquire(blocking=False)  # free, on the new master
        new_token = other.lock(name).fencing_token
        assert new_token is not None and new_token > token  # the counter moved with the slot
        other.lock(name).release()
        keys = LockKeys.for_name(name)
        assert own_cluster.master_of(keys.fence).port == own_cluster.master_of(name).port


class _Migration:
    """``key``'s slot moved to another master step by step, as ``redis-cli --cluster
    reshard`` does: IMPORTING/MIGRATING, keys moved with MIGRATE, then SETSLOT NODE."""

    def __init__(self, cluster: LocalCluster, key: str) -> None:
        self.cluster = cluster
        self.source = cluster.master_of(key)
        self.target = next(
            n for n in cluster.nodes[: cluster.masters] if n.port != self.source.port and n.process
        )
        with redis.Redis(host=self.source.host, port=self.source.port) as src:
            self.slot = int(src.cluster("KEYSLOT", key))

    def _node(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(host=node.host, port=node.port, decode_responses=True)

    def begin(self) -> None:
        with self._node(self.source) as src, self._node(self.target) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", self.slot, "IMPORTING", src.cluster("MYID"))
            src.execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", dst.cluster("MYID"))

    def keys_left(self) -> list[str]:
        with self._node(self.source) as src:
            return list(src.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 1000))

    def move(self, keys: list[str]) -> None:
        with self._node(self.source) as src:
            t = self.target
            src.execute_command("MIGRATE", t.host, t.port, "", 0, 5000, "KEYS", *keys)

    def finish(self) -> None:
        with self._node(self.target) as dst:
            target_id = dst.cluster("MYID")
        for node in self.cluster.nodes[: self.cluster.masters]:
            with self._node(node) as r:
                r.execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", target_id)


RECHECKS = 3.5
"""Seconds the first and the last migration step last: more than the waiter's longest pause
between re-checks (the holder's remaining lease, at most ``watchdog_timeout`` = 3 s here)."""

SPLIT = 1.5
"""Seconds each step with the keys split between the masters lasts. From the slot's MIGRATING
on, the cluster refuses the waiter's script until the move is finished (some of its keys are
missing: TRYAGAIN), and the waiter retries it within a second; a waiter rides out such an
outage for 10 s (``OUTAGE_TOLERANCE``), so the refusing steps together stay well under that
(``RECHECKS`` + 2 * ``SPLIT``), and more than a renewal each (every second)."""


async def test_a_waiter_during_an_ask_redirection(side, own_cluster):
    """A lock held and waited on while its slot moves: keys still on the old master, some
    moved (the cluster answers TRYAGAIN to a script whose keys are split), all moved (ASK),
    then the move finished. The holder keeps its lease throughout; once it releases, the
    waiter gets the lock, and never before."""
    name = f"order:asking:{side.kind}"
    # a lease of 3 s, renewed every second: a loaded machine's late renewal is not a lost hold
    holder_client = side.client(own_cluster.url, cluster=True, watchdog_timeout=3)
    waiter_client = side.client(own_cluster.url, cluster=True, watchdog_timeout=3)
    lost: list[Exception] = []
    holder = holder_client.lock(name, on_lease_lost=lost.append)
    assert await side(holder.acquire())
    waiter = waiter_client.lock(name)
    got: list[bool] = []
    errors: list[BaseException] = []
    if side.is_async:
        # the outcome is recorded in the waiting task itself, not by a done callback: from
        # Python 3.12, `wait_for` on a task that has just ended returns before the task's
        # done callbacks have run (3.13 failed here with `got == []` though the waiter held
        # the lock)

        async def wait_async() -> None:
            try:
                got.append(await waiter.acquire(timeout=60))
            except BaseException as exc:
                errors.append(exc)

        task = asyncio.create_task(wait_async())
    else:

        def wait() -> None:
            try:
                got.append(waiter.acquire(timeout=60))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()

    async def in_line() -> bool:
        assert not errors, errors
        return (await side(holder_client.lock(name).statistics())).waiters == 1

    await eventually(in_line)
    migration = _Migration(own_cluster, name)
    keys = migration.keys_left()
    fence = LockKeys.for_name(name).fence
    assert set(keys) >= {name, fence}, keys
    try:
        steps = [
            ("slot MIGRATING, keys not moved", migration.begin, RECHECKS),
            ("the fencing counter moved, the lock not", lambda: migration.move([fence]), SPLIT),
            (
                "every key moved, before SETSLOT NODE",
                lambda: migration.move(migration.keys_left()),
                SPLIT,
            ),
            ("migration finished", migration.finish, RECHECKS),
        ]
        for step, do, lasting in steps:
            do()
            await asyncio.sleep(lasting)  # the waiter re-checks, the holder renews, meanwhile
            assert not errors, f"{step}: the waiter failed: {errors!r}"
            assert not got, f"{step}: the waiter got a lock that is held"
            assert not lost, f"{step}: the holder's lease was reported lost: {lost}"
    finally:
        if migration.keys_left() or own_cluster.master_of(name).port != migration.target.port:
            with contextlib.suppress(redis.RedisError):
                if keys := migration.keys_left():
                    migration.move(keys)
                migration.finish()
    assert own_cluster.master_of(name).port == migration.target.port
    assert await side(holder.owned())
    await side(holder.release())
    if side.is_async:
        await asyncio.wait_for(asyncio.shield(task), 30)
    else:
        await eventually(lambda: not thread.is_alive(), timeout=30)
    assert not errors, errors
    assert got == [True], "the waiter gets the lock once it is released"
    stats = await side(holder_client.lock(name).statistics())
    assert [o.split(":")[0] for o in stats.holders] == [waiter_client.id]


async def test_a_release_refused_mid_migration_is_retried_after_it(side, own_cluster):
    """While the slot moves, the cluster refuses a script whose keys are not all on one node
    (TRYAGAIN, or ASK to a node that lacks some): a release then raises
    ``ServerUnavailableError`` (not a raw redis-py error), changes nothing, and succeeds when
    retried after the move; the waiter then gets the lock."""
    name = f"order:asking-release:{side.kind}"
    # a release with no answer leaves the hold unrenewed (its outcome is unknown): a lease
    # longer than a loaded machine takes to finish the migration
    holder_client = side.client(own_cluster.url, cluster=True, watchdog_timeout=15)
    waiter_client = side.client(own_cluster.url, cluster=True, watchdog_timeout=15)
    holder = holder_client.lock(name)
    assert await side(holder.acquire())
    waiter = waiter_client.lock(name)
    if side.is_async:
        task = asyncio.create_task(waiter.acquire(timeout=60))
    else:
        got: list[bool] = []
        thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=60)))
        thread.start()

    async def in_line() -> bool:
        return (await side(holder_client.lock(name).statistics())).waiters == 1

    await eventually(in_line)
    migration = _Migration(own_cluster, name)
    migration.begin()
    migration.move([name])  # the lock moved, the rest not: every multi-key script TRYAGAIN
    try:
        with pytest.raises(redlease.ServerUnavailableError, match="migrated"):
            await side(holder.release())
    finally:
        migration.move(migration.keys_left())
        migration.finish()
    assert await side(holder.owned()), "the refused release changed nothing"
    await side(holder.release())
    if side.is_async:
        assert await asyncio.wait_for(task, 30)
    else:
        await eventually(lambda: not thread.is_alive(), timeout=30)
        assert got == [True]
    stats = await side(holder_client.lock(name).statistics())
    assert [o.split(":")[0] for o in stats.holders] == [waiter_client.id]
