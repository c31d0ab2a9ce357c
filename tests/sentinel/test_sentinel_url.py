"""``from_url`` and the CLI with a Sentinel URL, on a master, a replica and three sentinels:
both URL forms, replica-confirmed writes (``replicas=1``) and a failover."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid

import pytest
from cli.helpers import cli_env, run_cli
from integration.helpers import eventually

import redlease

from .conftest import MASTER_NAME, Sentinels

pytestmark = pytest.mark.sentinel


def python_url(sentinels: Sentinels, query: str = "socket_timeout=2") -> str:
    """``redis+sentinel://`` (redis-sentinel-url, Flask, redisvl)."""
    hosts = ",".join(f"127.0.0.1:{port}" for port in sentinels.ports)
    return f"redis+sentinel://{hosts}/{MASTER_NAME}/0?{query}"


def lettuce_url(sentinels: Sentinels) -> str:
    """``redis-sentinel://`` (Lettuce, Spring)."""
    hosts = ",".join(f"127.0.0.1:{port}" for port in sentinels.ports)
    return f"redis-sentinel://{hosts}/0?timeout=2s#{MASTER_NAME}"


async def _until_reachable(side, call, timeout: float = 40.0):
    """``await side(call())`` once the client reaches the (new) master."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await side(call())
        except redlease.ServerUnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_from_url_confirms_on_the_replica_and_follows_a_failover(side, sentinel_setup):
    """A holder with ``replicas=1`` (Python URL form) and a waiter (Lettuce's form): the
    hold is confirmed by the replica before it is granted, so when the master is killed and
    the sentinels promote the replica, the holder still holds it there; the waiter follows
    the failover, and gets the lock once the holder releases it on the new master."""
    master, replica, sentinels = sentinel_setup
    name = f"order:sentinel-url:{side.kind}"
    holder_client = side.client(python_url(sentinels), replicas=1, replica_timeout=1)
    waiter_client = side.client(lettuce_url(sentinels))
    assert holder_client.address.startswith(f"sentinel {MASTER_NAME} at 127.0.0.1:")
    holder = holder_client.lock(name)
    assert await side(holder.acquire())  # WAIT: acknowledged by the one replica
    assert replica.command("HGETALL", name), "the hold reached the replica before the grant"
    with pytest.raises(redlease.ReplicaError):  # there is one replica, not two
        await side(holder_client.lock(f"{name}:two", replicas=2).acquire(blocking=False))

    got: list[bool] = []
    if side.is_async:
        task = asyncio.create_task(waiter_client.lock(name).acquire(timeout=90))
        task.add_done_callback(lambda t: got.append(t.result()) if not t.exception() else None)
    else:
        thread = threading.Thread(
            target=lambda: got.append(waiter_client.lock(name).acquire(timeout=90))
        )
        thread.start()

    async def in_line() -> bool:
        return (await side(holder_client.lock(name).statistics())).waiters == 1

    await eventually(in_line)
    master.kill()  # the sentinels promote the replica
    assert await _until_reachable(side, holder.owned), "the confirmed hold survived"
    assert replica.info("replication")["role"] == "master"
    assert not got, "the waiter did not get a lock that is held"
    with contextlib.suppress(redlease.ReplicaError):  # the new master has no replica left
        await side(holder.release())
    if side.is_async:
        assert await asyncio.wait_for(task, 60)
    else:
        await eventually(lambda: not thread.is_alive(), timeout=60)
        assert got == [True]
    stats = await side(waiter_client.lock(name).statistics())
    assert [owner.split(":")[0] for owner in stats.holders] == [waiter_client.id]


async def test_replica_confirmed_writes_over_a_sentinel_managed_master(side, sentinel_setup):
    """``replicas=1`` on every acquire, renewal and release of a Sentinel-managed master."""
    _, replica, sentinels = sentinel_setup
    name = f"order:sentinel-replicas:{side.kind}"
    # a 1.8 s lease (renewed every 0.6 s): with 0.9 s each renewal had 0.3 s (+ its WAIT)
    # and its fresh TTL a 0.2 s window to be seen, tight on a loaded machine
    client = side.client(python_url(sentinels), replicas=1, watchdog_timeout=1.8)
    lost: list[Exception] = []
    lock = client.lock(name, on_lease_lost=lost.append)
    assert await side(lock.acquire())  # the watchdog renews it, each renewal with WAIT 1

    async def renewed() -> bool:
        pttl = int(replica.command("PTTL", name))
        return pttl > 1400  # renewed on the replica too (a fresh lease is 1800 ms)

    deadline = time.monotonic() + 5.6
    while time.monotonic() < deadline:  # three leases: it must keep being renewed
        # a fresh lease shows for 0.4 s after each renewal, every 0.6 s: 10 s of room for a
        # loaded machine's polls (a hold no longer renewed expires and never shows one)
        await eventually(renewed, timeout=10)
        await asyncio.sleep(0.3)
    assert not lost
    await side(lock.release())
    assert not replica.command("EXISTS", name), "the release reached the replica"


def test_cli_with_a_sentinel_url(sentinel_setup):
    """``redlease run`` and ``status`` through the sentinels (``REDLEASE_URL`` and --url)."""
    _, _, sentinels = sentinel_setup
    name = f"cli:sentinel:{uuid.uuid4().hex[:8]}"
    url = python_url(sentinels)
    result = run_cli(
        "run", "--wait", "5", name, "--", "python", "-c", "print('ran')",
        env=cli_env(REDLEASE_URL=url),
    )  # fmt: skip
    assert (result.returncode, result.stdout.strip()) == (0, "ran"), result.stderr
    with redlease.Client.from_url(url) as client:
        assert client.lock(name).acquire(lease=30)
        result = run_cli("status", "--json", "--url", lettuce_url(sentinels), name)
        assert result.returncode == 0, result.stderr
        (view,) = json.loads(result.stdout)
        assert view["locked"] is True
        assert [o.split(":")[0] for o in view["holders"]] == [client.id]
        client.lock(name).release()
