"""Renewal edge cases from the peers' trackers (issue #26 item 4), on real servers, sync and
asyncio.

* The watchdog never renews a hold after its release returned (Redisson #7272, PR #7251),
  not even with a renewal batch that was in flight while the release ran and reaches the server
  after it: a renewal never creates a key and acts only on the hold with the owner's fencing
  token, so a late batch finds nothing to renew, whether the key is gone, taken again by the
  same owner (a new token) or by another owner.
* The watchdog never renews a hold of another process (Redisson PR #7098): after our hold was
  force-released, or expired while our link was frozen, another client takes the lock with a
  lease shorter than our ``watchdog_timeout``; its TTL is never raised to ours.
* A renewal or a lease that rounds to 0 ms never deletes or shortens a lock (redis-py #4279):
  every API refuses it with ``InvalidArgumentError`` naming the argument, and the renewal
  scripts themselves refuse a lease below 1 ms (a ``PEXPIRE`` of 0 deletes the key).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from datetime import timedelta
from typing import Any

import pytest
import redis

from redlease import InvalidArgumentError, LeaseLostError
from redlease._core import scripts
from redlease.events import LockEvent
from redlease.testing import TcpProxy

from .helpers import eventually, reply_bytes, reply_int

pytestmark = pytest.mark.timeout(120)


async def pause(side: Any, seconds: float) -> None:
    """Let the watchdog run (not a timing assert: the checks after it hold at any time)."""
    await asyncio.sleep(seconds) if side.is_async else time.sleep(seconds)


def owner_field(raw: redis.Redis, name: str) -> str | None:
    fields = [
        f.decode() for f in map(reply_bytes, raw.hkeys(name)) if not f.startswith(b"redlease:")
    ]
    return fields[0] if len(fields) == 1 else None


def replay(raw: redis.Redis, call: Any) -> list[int]:
    """Send ``call`` (a renewal the watchdog built) as it would reach the server late."""
    reply = raw.eval(call.script.source, len(call.keys), *call.keys, *call.args)
    return [int(x) for x in reply]


# --- (a) never after the release ----------------------------------------------------------


async def test_a_renewal_batch_that_lands_after_the_release_renews_nothing(side, server, name):
    """The exact batch the watchdog would send for our hold, made before the release and sent
    after it returned (a batch in flight during the release): it finds the key gone, then
    the same owner's next hold (a new token, a 2 s lease) and another owner's hold, and
    renews none of them (a 30 s watchdog lease would show in their TTLs)."""
    raw = redis.Redis(port=server.port)
    events: list[LockEvent] = []
    try:
        client = side.client(server.url, watchdog_timeout=30)
        client.add_listener(events.append)
        lock = client.lock(name)
        assert await side(lock.acquire())
        hold = client._state.holds.get(name, client._owner())
        ((_, late_batch),) = client._policy.calls([hold])
        assert late_batch.script is scripts.LOCK_RENEW
        await side(lock.release())
        assert replay(raw, late_batch) == [0]
        assert raw.exists(name) == 0  # not revived

        assert await side(lock.acquire(lease=2.0))  # the same owner again: a new token
        assert replay(raw, late_batch) == [0]
        assert 0 < raw.pttl(name) <= 2000
        await side(lock.release())

        other = side.client(server.url).lock(name)
        assert await side(other.acquire(lease=2.0))
        assert replay(raw, late_batch) == [0]
        assert 0 < raw.pttl(name) <= 2000
        assert reply_int(raw.hget(name, "redlease:fence")) == other.fencing_token
        await side(other.release())
        assert not any(e.kind == "lease_lost" for e in events)
    finally:
        raw.close()


@pytest.mark.one_server  # the client's watchdog: the same on every server
async def test_releases_while_renewals_run_all_the_time(side, server, name):
    """A client holds 300 locks renewed every 1 s (two batches per round) and takes and
    releases one more lock again and again, at random points of the rounds. After each
    release returned the key is gone, and another owner's hold with a lease below the
    watchdog's keeps its own TTL; the 300 holds stay renewed all along and no hold is
    reported lost."""
    raw = redis.Redis(port=server.port)
    events: list[LockEvent] = []
    try:
        # a 3 s lease, so a round may start 2 s late: with 0.9 s a round started 0.62 s late
        # (the thread starved on a loaded 2-core machine) and the first holds expired on the
        # server; with 1.8 s the holds were lost under load on Python 3.10 (-n 6, load 11)
        client = side.client(server.url, watchdog_timeout=3.0)
        client.add_listener(events.append)
        held = [client.lock(f"{name}:{i}") for i in range(300)]
        for lock in held:
            assert await side(lock.acquire())
        other = side.client(server.url).lock(name)
        lock = client.lock(name)
        rng = random.Random(26)
        for _ in range(10):
            assert await side(lock.acquire())
            await pause(side, rng.uniform(0, 1.0))
            await side(lock.release())
            assert raw.exists(name) == 0
            assert await side(other.acquire(blocking=False, lease=1.2))
            ttl = raw.pttl(name)
            assert 0 < ttl <= 1200 or ttl == -2  # its own lease (or, on a loaded machine, gone)
            await pause(side, 1.05)  # more than a round of the watchdog
            assert raw.pttl(name) <= 1200  # (or already gone: -2)
            if raw.exists(name):
                assert reply_int(raw.hget(name, "redlease:fence")) == other.fencing_token
            with contextlib.suppress(LeaseLostError):  # (its 1.2 s may have run out)
                await side(other.release())
        for each in held:
            assert await side(each.owned())  # renewed all along (a lease is 3 s)
            await side(each.release())
        assert [e for e in events if e.kind == "lease_lost"] == []
    finally:
        raw.close()


# --- (b) never another process's hold -----------------------------------------------------


async def test_the_watchdog_never_renews_a_hold_another_client_took_after_a_force(
    side, server, name
):
    """Our hold is force-released; another client (another process, as the server sees it:
    another owner field and token) takes the lock with a 1.4 s lease. Our watchdog (1.5 s,
    every 0.5 s) runs on until it finds our hold gone, and never raises their TTL."""
    raw = redis.Redis(port=server.port)
    lost: list[LeaseLostError] = []
    try:
        client = side.client(server.url, watchdog_timeout=1.5)
        lock = client.lock(name, on_lease_lost=lost.append)
        assert await side(lock.acquire())
        assert await side(side.client(server.url).lock(name).force_release())
        theirs = side.client(server.url).lock(name)
        assert await side(theirs.acquire(lease=1.4))
        field = owner_field(raw, name)
        heard = None
        deadline = time.monotonic() + 10
        # until one more round of ours after we heard our hold is gone (their lease, 1.4 s,
        # may run out meanwhile: a renewal of ours would have raised it to 1.5 s)
        while time.monotonic() < deadline and (heard is None or time.monotonic() < heard + 0.5):
            left = raw.pttl(name)
            assert left <= 1400
            if left > 0:
                assert owner_field(raw, name) == field
                assert reply_int(raw.hget(name, "redlease:fence")) == theirs.fencing_token
            if lost and heard is None:
                heard = time.monotonic()
            await pause(side, 0.02)
        assert lost, "our watchdog never found our hold gone"
        with pytest.raises(LeaseLostError):
            await side(lock.release())
        if raw.exists(name):
            assert owner_field(raw, name) == field  # our release left their hold alone
        with contextlib.suppress(LeaseLostError):
            await side(theirs.release())
    finally:
        raw.close()


async def test_renewals_held_back_by_the_network_never_renew_the_next_holder(side, server, name):
    """Our link freezes (the renewals queue up on the way), our lease runs out on the server,
    another client takes the lock with a 0.5 s lease, then the link heals and our late
    renewals reach the server: none of them renews their hold, and we hear our lease lost."""
    raw = redis.Redis(port=server.port)
    lost: list[LeaseLostError] = []
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        try:
            client = side.client(proxy.url, watchdog_timeout=0.6)
            lock = client.lock(name, on_lease_lost=lost.append)
            assert await side(lock.acquire())
            proxy.freeze()
            await eventually(lambda: raw.exists(name) == 0, timeout=10)
            theirs = side.client(server.url).lock(name)
            assert await side(theirs.acquire(lease=0.5))
            proxy.thaw()  # our renewals, sent meanwhile, arrive now
            await eventually(lambda: lost, timeout=10)
            assert lost[0].cause == "expired"
            left = raw.pttl(name)
            assert left <= 500  # (or already gone)
            if left > 0:
                assert reply_int(raw.hget(name, "redlease:fence")) == theirs.fencing_token
            with pytest.raises(LeaseLostError):
                await side(lock.release())
        finally:
            raw.close()


# --- (c) a lease that rounds to 0 ms ------------------------------------------------------

TINY = [0.0004, timedelta(microseconds=400), 1e-9, 0.0, -0.001]


@pytest.mark.parametrize("tiny", TINY, ids=repr)
async def test_a_lease_rounding_to_0_ms_never_shortens_a_held_lock(side, server, name, tiny):
    """Each API that sets or renews a lease, given one that rounds to 0 ms, on a hold that
    exists: ``InvalidArgumentError`` naming the argument, and the hold keeps its TTL."""
    raw = redis.Redis(port=server.port)
    try:
        client = side.client(server.url)
        lock = client.lock(name)
        assert await side(lock.acquire(lease=30))
        with pytest.raises(InvalidArgumentError, match="lease"):
            await side(lock.acquire(lease=tiny))  # a re-entry
        # (a shortened lease would be 0 ms; 10 s of room for a loaded machine)
        assert raw.pttl(name) > 20_000 and await side(lock.hold_count()) == 1

        write = client.rw_lock(f"{name}:rw").write_lock()
        assert await side(write.acquire(lease=30))
        with pytest.raises(InvalidArgumentError, match="lease"):
            await side(write.acquire(lease=tiny))
        assert await side(write.ttl()) > 20

        sem = client.lease_semaphore(f"{name}:sem")
        assert await side(sem.try_set_permits(1))
        permit = await side(sem.acquire(lease=30))
        with pytest.raises(InvalidArgumentError, match="lease"):
            await side(sem.update_lease_time(permit, tiny))
        assert await side(sem.available()) == 0  # the permit is still taken

        with pytest.raises(InvalidArgumentError, match="watchdog_timeout"):
            side.client(server.url, watchdog_timeout=tiny)
        with pytest.raises(InvalidArgumentError, match="at_most_for"):
            client.scheduled_lock(f"{name}:job", at_most_for=tiny)
        assert raw.pttl(name) > 20_000  # nothing above touched the lock
        await side(sem.release(permit))
        await side(write.release())
        await side(lock.release())
    finally:
        raw.close()


@pytest.mark.parametrize("lease", ["0", "-5", "0.4", "nan", "x"])
def test_the_renewal_scripts_refuse_a_lease_below_1_ms(server, name, lease):
    """Below the clients' own checks: each renewal script refuses a lease under 1 ms before
    any change (``PEXPIRE key 0`` deletes the key; a hold with no TTL would go)."""
    raw = redis.Redis(port=server.port)
    try:
        raw.hset(name, mapping={"owner:1": 1, "redlease:fence": 7})  # a held lock, no TTL
        for script, keys, args in [
            (scripts.LOCK_RENEW, [name], [lease, "owner:1", 7]),
            (scripts.Script.load("rw_renew"), [name, "r", "l", "t"], [lease, "write", "o", 7]),
            (scripts.Script.load("redisson_rw_renew"), [name, "t", "p:"], [lease, "read", "o", 7]),
            (scripts.Script.load("lease_semaphore_renew"), [name, "l", "c"], [lease, "publish"]),
        ]:
            with pytest.raises(redis.ResponseError, match="at least 1 millisecond"):
                raw.eval(script.source.decode(), len(keys), *keys, *args)
        assert raw.hgetall(name) == {b"owner:1": b"1", b"redlease:fence": b"7"}
        assert raw.pttl(name) == -1
    finally:
        raw.close()
