"""The spin lock (issue 35 part 4, Redisson's ``RSpinLock``): the lock's keys and scripts, whose
waiters never subscribe but back off exponentially between single tries. Exclusion among
threads, tasks and processes, ``timeout=0``, reentrancy, fencing tokens, the watchdog, events;
a waiter takes the lock after a release with no SUBSCRIBE ever sent (the server's own
counters say so); a Redisson RLock and the spin lock exclude each other; a bad ``backoff``
names the argument. Each test on the sync and asyncio side where it has one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import redis

import redlease
from redlease import ExponentialBackoff, InvalidArgumentError, LockTimeoutError
from redlease.testing import RedisServer, RedissonLock

from .helpers import (
    count_in_tasks,
    count_in_threads,
    counted,
    eventually,
    in_owner,
    owner_body,
    renewed,
)

QUICK = ExponentialBackoff(initial=0.001, maximum=0.02, multiplier=2, jitter=0.002)
"""Short pauses: a waiter notices a release within about 20 ms (the tests never rely on it)."""

SUBSCRIBING = ("subscribe", "ssubscribe", "psubscribe")


def subscribe_calls(url: str) -> dict[str, int]:
    """How many SUBSCRIBE, SSUBSCRIBE and PSUBSCRIBE the server ran since it started
    (``INFO commandstats``), and how many connections listen now (``CLIENT LIST``)."""
    raw = redis.Redis.from_url(url)
    try:
        stats = raw.info("commandstats")
        found = {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in SUBSCRIBING}
        found["listening"] = sum(
            1 for c in raw.client_list() if int(c.get("sub", 0)) or int(c.get("psub", 0))
        )
        return found
    finally:
        raw.close()


async def test_a_waiter_takes_the_lock_after_release_without_subscribing(
    side: Any, private_server: RedisServer, name: str
) -> None:
    url = private_server.url
    holder = side.client(url).spin_lock(name)
    waiter_client = side.client(url)
    waiter = waiter_client.spin_lock(name, backoff=QUICK)
    assert await side(holder.acquire())
    first = holder.fencing_token
    tries = asyncio.ensure_future(in_owner(side, owner_body(side, waiter, timeout=60)))
    raw = redis.Redis.from_url(url)
    try:
        # the waiter tries again and again (its EVALSHAs count up) while the lock is held
        def evalsha_calls() -> int:
            return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

        before = evalsha_calls()
        await eventually(lambda: evalsha_calls() >= before + 5, 30)
        assert not tries.done()
        await side(holder.release())
        got, token = await asyncio.wait_for(tries, 60)
    finally:
        raw.close()
    assert got and token is not None and first is not None and token > first
    assert subscribe_calls(url) == dict.fromkeys([*SUBSCRIBING, "listening"], 0)


def publish_calls(url: str) -> int:
    """PUBLISH and SPUBLISH the server ran so far, those inside scripts included."""
    raw = redis.Redis.from_url(url)
    try:
        stats = raw.info("commandstats")
        return sum(
            int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("publish", "spublish")
        )
    finally:
        raw.close()


async def test_a_release_publishes_nothing(
    side: Any, private_server: RedisServer, name: str
) -> None:
    """As Redisson's RSpinLock unlocks: no PUBLISH (a user or proxy without pub/sub can
    release); the lock's release of the same name does publish (its waiters are woken)."""
    url = private_server.url
    spin = side.client(url).spin_lock(name, backoff=QUICK)
    before = publish_calls(url)
    for _ in range(3):
        assert await side(spin.acquire(timeout=0))
        assert await side(spin.acquire(timeout=0))  # a re-entry: two releases, one final
        await side(spin.release())
        await side(spin.release())
    assert publish_calls(url) == before and not await side(spin.locked())
    plain = side.client(url).lock(name)
    assert await side(plain.acquire(timeout=0))
    await side(plain.release())
    assert publish_calls(url) == before + 1


async def test_timeout_zero_reentrancy_tokens_and_hold(
    side: Any, server: RedisServer, name: str
) -> None:
    lock = side.client(server.url).spin_lock(name, backoff=QUICK)
    other = side.client(server.url).spin_lock(name, backoff=QUICK)
    assert await side(lock.acquire(timeout=0))
    token = lock.fencing_token
    assert await side(lock.acquire(timeout=0))  # a re-entry: the same hold, the same token
    assert await side(lock.hold_count()) == 2 and lock.fencing_token == token
    # another client's single try answers at once; a bounded wait runs out
    assert await in_owner(side, owner_body(side, other, timeout=0)) == (False, None)
    assert await in_owner(side, owner_body(side, other, timeout=0.2)) == (False, None)
    with pytest.raises(LockTimeoutError, match="single try"):
        async with side.hold(other, timeout=0):
            pass
    await side(lock.release())
    assert await side(lock.locked())
    await side(lock.release())
    assert not await side(lock.locked())
    async with side.hold(other, timeout=5) as lease:
        assert lease.fencing_token > token
        assert (await side(other.statistics())).owned


async def test_the_watchdog_renews_and_events_are_told(
    side: Any, server: RedisServer, name: str
) -> None:
    events: list[redlease.events.LockEvent] = []
    client = side.client(server.url, watchdog_timeout=2)
    client.add_listener(events.append)
    lock = client.spin_lock(name, backoff=QUICK)
    assert await side(lock.acquire())
    raw = redis.Redis.from_url(server.url)
    assert await renewed(raw, name, times=2), "the watchdog renews the spin lock's lease"
    raw.close()
    assert (await side(lock.statistics())).owned
    await side(lock.release())
    kinds = [e.kind for e in events if e.name == name]
    assert kinds[:1] == ["acquired"] and "released" in kinds and "lease_lost" not in kinds


def test_threads_exclude_each_other(server: RedisServer, name: str) -> None:
    with redlease.Client.from_url(server.url) as client:
        lock = client.spin_lock(name, backoff=QUICK)
        overlaps = count_in_threads(server.url, name + ":counter", lock, threads=4, rounds=30)
    assert overlaps == 0 and counted(server.url, name + ":counter") == 120


async def test_tasks_exclude_each_other(server: RedisServer, name: str) -> None:
    async with redlease.AsyncClient.from_url(server.url) as client:
        lock = client.spin_lock(name, backoff=QUICK)
        overlaps = await count_in_tasks(server.url, name + ":counter", lock, tasks=4, rounds=30)
    assert overlaps == 0 and counted(server.url, name + ":counter") == 120


WORKER = textwrap.dedent(
    """
    import asyncio, sys
    import redis, redlease
    kind, url, name = sys.argv[1:4]
    backoff = redlease.ExponentialBackoff(initial=0.001, maximum=0.02)
    if kind == "sync":
        raw = redis.Redis.from_url(url)
        with redlease.Client.from_url(url) as client:
            lock = client.spin_lock(name, backoff=backoff)
            for _ in range(30):
                with lock:
                    raw.set(name + ":counter", int(raw.get(name + ":counter") or 0) + 1)
    else:
        async def main():
            raw = redis.asyncio.Redis.from_url(url)
            async with redlease.AsyncClient.from_url(url) as client:
                lock = client.spin_lock(name, backoff=backoff)
                for _ in range(30):
                    async with lock:
                        value = int(await raw.get(name + ":counter") or 0)
                        await raw.set(name + ":counter", value + 1)
            await raw.aclose()
        asyncio.run(main())
    print("done")
    """
)


# owners in other processes: the client's; the scripts' exclusion runs on every server above
@pytest.mark.one_server
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_processes_exclude_each_other(server: RedisServer, name: str, kind: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, kind, server.url, name],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0 and "done" in out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    raw = redis.Redis.from_url(server.url)
    assert int(raw.get(name + ":counter") or 0) == 90
    raw.close()


async def test_a_redisson_rlock_and_the_spin_lock_exclude_each_other(
    side: Any, server: RedisServer, name: str
) -> None:
    java = RedissonLock(server.url, name)
    try:
        lock = side.client(server.url).spin_lock(name, backoff=QUICK)
        assert java.try_lock(0)
        assert not await side(lock.acquire(timeout=0))
        taken = asyncio.ensure_future(in_owner(side, owner_body(side, lock, timeout=60)))
        await asyncio.sleep(0.1)
        assert not taken.done()
        assert java.unlock()
        got, token = await asyncio.wait_for(taken, 60)
        assert got and token is not None
        assert await side(lock.acquire())
        assert not java.try_lock(0)
        await side(lock.release())
        assert java.try_lock(0)
        assert java.unlock()
    finally:
        java.close()


async def test_the_spin_lock_and_the_lock_exclude_each_other(
    side: Any, server: RedisServer, name: str
) -> None:
    client = side.client(server.url)
    other = side.client(server.url)
    spin, plain = client.spin_lock(name), other.lock(name)
    assert await side(spin.acquire())
    assert await in_owner(side, owner_body(side, plain, timeout=0)) == (False, None)
    await side(spin.release())
    assert await side(plain.acquire())
    assert await in_owner(side, owner_body(side, spin, timeout=0)) == (False, None)
    await side(plain.release())


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"initial": 0}, "backoff initial"),
        ({"initial": "1"}, "backoff initial"),
        ({"maximum": -1}, "backoff maximum"),
        ({"initial": 0.5, "maximum": 0.1}, "backoff maximum"),
        ({"multiplier": 0.5}, "backoff multiplier"),
        ({"multiplier": float("inf")}, "backoff multiplier"),
        ({"jitter": -0.001}, "backoff jitter"),
        ({"jitter": None}, "backoff jitter"),
    ],
)
def test_bad_backoff_fields_name_the_argument(arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        ExponentialBackoff(**arguments)


@pytest.mark.parametrize("client_class", [redlease.Client, redlease.AsyncClient])
@pytest.mark.parametrize("value", [0.1, "exponential", {"initial": 0.01}])
def test_a_backoff_that_is_not_an_exponential_backoff_is_refused(
    client_class: Any, value: Any, server: RedisServer, name: str
) -> None:
    client = client_class.from_url(server.url)
    with pytest.raises(
        InvalidArgumentError, match=r"backoff must be a redlease\.ExponentialBackoff"
    ):
        client.spin_lock(name, backoff=value)
