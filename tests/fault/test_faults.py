"""Locks under faults, on real servers: a holder paused, killed or cut off past its lease; the
server restarted with its data lost; a failover to a replica.

Every test is bounded (``pytest.mark.timeout``) and waits on conditions; time is made to pass
only where the fault needs it (a pause or a partition longer than the lease). ``L`` is the
lease of the holds under test (the watchdog timeout).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
from integration.helpers import ttl_rises

import redlease
from redlease import LeaseLostError, StaleTokenError
from redlease.testing import RedisServer, TcpProxy

from .helpers import Holder, eventually, wait_until, waiting

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]

L = 1.0
"""Lease of the holds under test, in seconds."""

HANDOVER = 0.7
"""How soon after a lease runs out the next waiter must hold the lock: room for a loaded
machine's wake-up (1.110 s seen at load 10 against 0.1 s of room; 0.3 s leaves little room
with six workers on two cores at load 20). A renewal that reached the server more than 0.7 s
after the holder was paused, killed or cut off would still fail the tests (the lease would run
from it: the next holder later than L + 0.7 s)."""


def _token(lock: Any) -> int:
    token = lock.fencing_token
    assert isinstance(token, int) and token > 0
    return token


def test_paused_holder_is_overtaken_told_and_fenced(lock_server, resource_server, name):
    """SIGSTOP past the lease: another holder gets in (the overlap a lease lock cannot prevent);
    fencing refuses the paused holder's late write; its release says the lease was lost."""
    holder = Holder("sync", lock_server.url, name, L, resource_server.url)
    other = redlease.Client.from_url(lock_server.url)
    resource = redlease.Client.from_url(resource_server.url)
    raw = redis.Redis.from_url(resource_server.url, decode_responses=True)
    try:
        token_a = int(holder.ask("acquire").split()[1])
        assert holder.ask("read counter") == "value -"  # read ... (then stopped) ... write
        holder.pause()
        paused_at = time.monotonic()
        lock = other.lock(name)
        with lock.hold(timeout=L + 5) as lease:
            took = time.monotonic() - paused_at
            assert took <= L + HANDOVER, f"lock free {took:.3f} s after the pause"
            assert lease.fencing_token > token_a
            resource.fenced_set("counter", "1", lease.fencing_token)
            raw.set("plain", "1")
            holder.resume()
            # the paused holder wakes up still "inside" and writes what it computed
            assert holder.ask("fenced counter 1") == "stale"
            assert holder.ask("write plain 1") == "ok"  # unfenced: the overlap gets through
        assert holder.ask("release") == "lost"
        assert raw.get("counter") == "1"
    finally:
        holder.close()
        other.close()
        resource.close()
        raw.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_killed_holder_frees_the_lock_within_its_lease(kind, side, lock_server, name):
    """SIGKILL while holding: the lock is never held past the lease; a waiter gets it within
    the lease plus 100 ms. ``kind`` is the holder's side, ``side`` the waiter's."""
    holder = Holder(kind, lock_server.url, name, L)
    raw = redis.Redis.from_url(lock_server.url)
    try:
        holder.ask("acquire")
        client = side.client(lock_server.url)
        lock = client.lock(name)
        got: list[float] = []
        if side.is_async:

            async def wait_for_it() -> None:
                assert await lock.acquire(timeout=L + 10)
                got.append(time.monotonic())
                await lock.release()

            task = asyncio.create_task(wait_for_it())
        else:

            def wait_for_it_sync() -> None:
                assert lock.acquire(timeout=L + 10)
                got.append(time.monotonic())
                lock.release()

            thread = threading.Thread(target=wait_for_it_sync)
            thread.start()
        await eventually(lambda: waiting(client, name))
        ttl_ms = raw.pttl(name)
        assert 0 < ttl_ms <= L * 1000
        killed_at = time.monotonic()
        holder.kill()
        if side.is_async:
            await asyncio.wait_for(task, L + 15)
        else:
            thread.join(L + 15)
        assert got, "the waiter never got the lock"
        took = got[0] - killed_at
        assert took <= L + HANDOVER, f"next holder {took:.3f} s after the kill (lease {L} s)"
    finally:
        holder.close()
        raw.close()


def test_restart_with_data_lost(lock_server, resource_server, name):
    """The server restarts empty mid-hold: another client gets the lock at once (data loss
    allows the overlap); the holder is told; tokens keep increasing, so fencing still works."""
    told = threading.Event()
    a = redlease.Client.from_url(lock_server.url, watchdog_timeout=L, socket_timeout=2)
    b = redlease.Client.from_url(lock_server.url, socket_timeout=2)
    resource = redlease.Client.from_url(resource_server.url)
    try:
        lock_a = a.lock(name, on_lease_lost=lambda _e: told.set())
        assert lock_a.acquire()
        token_a = _token(lock_a)
        resource.fenced_set("r", "a", token_a)
        lock_server.restart()
        restarted_at = time.monotonic()
        lock_b = b.lock(name)
        assert lock_b.acquire(timeout=30)
        assert time.monotonic() - restarted_at < 10  # at once: not after a's lease or renewals
        token_b = _token(lock_b)
        assert token_b > token_a, "tokens went back after the data loss"
        resource.fenced_set("r", "b", token_b)
        wait_until(told.is_set, timeout=L + 3)
        with pytest.raises(StaleTokenError):
            resource.fenced_set("r", "a-late", token_a)
        with pytest.raises(LeaseLostError):
            lock_a.release()
        lock_b.release()
    finally:
        a.close()
        b.close()
        resource.close()


def test_partitioned_holder_is_told_and_its_late_writes_are_fenced(
    lock_server, resource_server, name
):
    """The holder's network (to the lock server and to the resource) stops delivering for
    longer than its lease: another client takes over, the holder is told during the partition,
    and the writes it sent into the partition land late: the fenced one is refused, the plain
    one clobbers the newer value (the lost update that fencing prevents)."""
    told = threading.Event()
    with TcpProxy(lock_server) as lock_link, TcpProxy(resource_server) as resource_link:
        a = redlease.Client.from_url(
            lock_link.url, watchdog_timeout=L, socket_timeout=0.25, socket_connect_timeout=0.25
        )
        a_resource = redlease.Client.from_url(resource_link.url)  # no timeout: waits it out
        a_raw = redis.Redis.from_url(resource_link.url)
        b = redlease.Client.from_url(lock_server.url)
        b_resource = redlease.Client.from_url(resource_server.url)
        raw = redis.Redis.from_url(resource_server.url, decode_responses=True)
        late: dict[str, str] = {}
        try:
            lock_a = a.lock(name, on_lease_lost=lambda _e: told.set())
            assert lock_a.acquire()
            token_a = _token(lock_a)
            a_resource.fenced_set("counter", "0", token_a)
            lock_link.freeze()
            resource_link.freeze()
            frozen_at = time.monotonic()

            def write_into_the_partition() -> None:
                try:
                    a_resource.fenced_set("counter", "a", token_a)
                    late["fenced"] = "ok"
                except StaleTokenError:
                    late["fenced"] = "stale"
                a_raw.set("plain", "a")
                late["plain"] = "ok"

            writer = threading.Thread(target=write_into_the_partition)
            writer.start()
            lock_b = b.lock(name)
            assert lock_b.acquire(timeout=L + 5)
            took = time.monotonic() - frozen_at
            assert took <= L + HANDOVER, f"lock free {took:.3f} s after the partition"
            b_resource.fenced_set("counter", "b", _token(lock_b))
            raw.set("plain", "b")
            wait_until(told.is_set, timeout=L + 2)
            assert lock_link.frozen, "told only once the network healed"
            lock_link.thaw()
            resource_link.thaw()
            writer.join(15)
            assert late == {"fenced": "stale", "plain": "ok"}
            assert raw.get("counter") == "b"
            assert raw.get("plain") == "a"  # unfenced: the late write won
            with pytest.raises(LeaseLostError):
                lock_a.release()
            lock_b.release()
        finally:
            lock_link.thaw()
            resource_link.thaw()
            for c in (a, a_resource, b, b_resource):
                c.close()
            a_raw.close()
            raw.close()


def test_short_connection_cuts_do_not_lose_the_hold(lock_server, name):
    """Connections cut while holding (shorter than the lease): the client reconnects, the
    watchdog keeps renewing, nobody else gets in, nothing is reported lost."""
    told = threading.Event()
    with TcpProxy(lock_server) as link:
        a = redlease.Client.from_url(link.url, watchdog_timeout=L, socket_timeout=1)
        b = redlease.Client.from_url(lock_server.url)
        try:
            lock_a = a.lock(name, on_lease_lost=lambda _e: told.set())
            assert lock_a.acquire()
            raw = redis.Redis.from_url(lock_server.url)
            for _ in range(4):  # time must pass here: the watchdog renews every L/3
                link.cut()
                wait_until(ttl_rises(raw, name), timeout=L)
                assert not b.lock(name).acquire(blocking=False)
            raw.close()
            assert not told.is_set()
            lock_a.release()
            assert b.lock(name).acquire(blocking=False)
        finally:
            a.close()
            b.close()


class _Failover:
    """A master, a replica replicating through a proxy (``link``, to stall replication), and
    a proxy in front of the master that clients use (``vip``): ``fail_over()`` promotes the
    replica, moves the proxy to it and cuts every client connection, then kills the master."""

    def __init__(self, binary: Any) -> None:
        self.master = RedisServer(binary).start()
        self.link = TcpProxy(self.master).start()
        self.replica = RedisServer(binary, replica_of=self.link).start()
        self.vip = TcpProxy(self.master).start()
        self.replica.wait_replica_synced(timeout=20)

    def fail_over(self) -> None:
        self.replica.promote()
        self.vip.retarget(self.replica)
        self.vip.cut()
        self.master.kill()  # a crashed master (SIGTERM would wait for the stalled replica)

    def close(self) -> None:
        for part in (self.vip, self.link, self.replica, self.master):
            part.close()


def test_failover_keeps_a_replicated_hold(fault_binary, name):
    told = threading.Event()
    setup = _Failover(fault_binary)
    a = redlease.Client.from_url(setup.vip.url, watchdog_timeout=L, socket_timeout=1)
    b = redlease.Client.from_url(setup.vip.url, socket_timeout=1)
    try:
        lock_a = a.lock(name, on_lease_lost=lambda _e: told.set())
        assert lock_a.acquire()
        setup.master.wait_replica_synced(timeout=5)
        setup.fail_over()
        assert not b.lock(name).acquire(blocking=False)
        raw = redis.Redis.from_url(setup.replica.url)
        wait_until(ttl_rises(raw, name), timeout=L)  # renewed on the new master
        raw.close()
        assert not told.is_set()
        lock_a.release()
        assert b.lock(name).acquire(blocking=False)
    finally:
        a.close()
        b.close()
        setup.close()


def test_failover_loses_an_unreplicated_hold(fault_binary, resource_server, name):
    """Without replica-confirmed writes a hold the replica never got is gone after the
    failover: another client gets in (overlap), the holder is told, fencing still holds."""
    told = threading.Event()
    setup = _Failover(fault_binary)
    a = redlease.Client.from_url(setup.vip.url, watchdog_timeout=L, socket_timeout=1)
    b = redlease.Client.from_url(setup.vip.url, socket_timeout=1)
    resource = redlease.Client.from_url(resource_server.url)
    try:
        setup.link.freeze()  # replication stalls
        lock_a = a.lock(name, on_lease_lost=lambda _e: told.set())
        assert lock_a.acquire()
        token_a = _token(lock_a)
        setup.fail_over()
        lock_b = b.lock(name)
        assert lock_b.acquire(timeout=5)  # the hold was lost with the old master
        token_b = _token(lock_b)
        assert token_b > token_a
        resource.fenced_set("r", "b", token_b)
        wait_until(told.is_set, timeout=L + 3)
        with pytest.raises(StaleTokenError):
            resource.fenced_set("r", "a", token_a)
        with pytest.raises(LeaseLostError):
            lock_a.release()
        lock_b.release()
    finally:
        a.close()
        b.close()
        resource.close()
        setup.close()


def _replica_confirmed(url: str) -> redlease.Client:
    if not hasattr(redlease, "ReplicaError"):
        pytest.skip("replica-confirmed writes (Client.from_url(replicas=...)) not available")
    try:
        return redlease.Client.from_url(
            url, replicas=1, replica_timeout=0.5, watchdog_timeout=L, socket_timeout=2
        )
    except TypeError:
        pytest.skip("Client.from_url does not take replicas= yet")


def test_failover_with_replica_confirmed_writes(fault_binary, name):
    """With ``replicas=1`` a hold is granted only once the replica has it: while replication
    stalls acquire fails and leaves nothing behind; a granted hold survives the failover."""
    setup = _Failover(fault_binary)
    a = _replica_confirmed(setup.vip.url)
    b = redlease.Client.from_url(setup.vip.url, socket_timeout=1)
    try:
        setup.link.freeze()
        stalled = a.lock(name + ":stalled")
        with pytest.raises(redlease.ReplicaError):
            stalled.acquire(timeout=2)
        assert setup.master.command("EXISTS", name + ":stalled") == 0  # given back
        setup.link.thaw()
        setup.replica.wait_replica_synced(timeout=10)
        lock_a = a.lock(name)
        assert lock_a.acquire(timeout=5)
        setup.fail_over()
        assert not b.lock(name).acquire(blocking=False)
    finally:
        a.close()
        b.close()
        setup.close()
