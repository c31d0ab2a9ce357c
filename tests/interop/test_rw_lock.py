"""The read-write lock in Redisson's layout (``rw_lock(name, layout="redisson")``, issue #13
item 5): Java threads using Redisson's ``RReadWriteLock``
(``redlease.testing.RedissonReadWriteLock``, a driver that speaks its protocol) and redlease
exclude, share and wake each other on the same names."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
import redis
from integration.helpers import reply_bytes, reply_str_hash, reply_strs, ttl_rises

from redlease import InvalidArgumentError, LockUpgradeError
from redlease._core import rwlock as core
from redlease._core import rwlock_redisson
from redlease._core.rwlock_redisson import RedissonRwKeys
from redlease.testing.redisson.rwlock import RedissonReadWriteLock

WOKEN_WITHIN = 10.0
"""A waiter woken by the unlock message gets the lock within this, however loaded the
machine; without the message it would look again only at the end of its 20 s wait: a
redlease waiter under ``long_recheck`` (else at its 2 s re-check), a Redisson one at the
holder's 30 s lease."""


@pytest.fixture(params=["plain", "{tag}:rw", "a{b}c"])
def rw_name(request: pytest.FixtureRequest) -> str:
    unique = uuid.uuid4().hex[:8]
    return {"plain": f"rw:{unique}", "{tag}:rw": f"{{{unique}}}:rw", "a{b}c": f"a{{{unique}}}c"}[
        request.param
    ]


@pytest.fixture
def java(server, rw_name):
    lock = RedissonReadWriteLock(server.url, rw_name)
    yield lock
    lock.close()


def _when_listening(url: str, channel: str, then, listeners: int = 1) -> threading.Thread:
    """Run ``then()`` in a thread once ``listeners`` clients listen on ``channel`` (a waiter is
    in its wait), within 20 s at most."""

    def run() -> None:
        raw = redis.Redis.from_url(url)
        end = time.monotonic() + 20
        while time.monotonic() < end and raw.pubsub_numsub(channel)[0][1] < listeners:
            time.sleep(0.005)
        raw.close()
        then()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_the_layout_is_redissons(side, server, rw_name):
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    client = side.client(server.url)
    rw = client.rw_lock(rw_name, layout="redisson")
    assert await side(rw.read_lock().acquire())
    fields = reply_str_hash(raw.hgetall(rw_name))
    assert fields["mode"] == "read"
    (reader,) = [f for f in fields if f != "mode"]
    assert raw.exists(f"{RedissonRwKeys.for_name(rw_name).hold_prefix}{reader}:rwlock_timeout:1")
    await side(rw.read_lock().release())
    assert not raw.exists(rw_name)
    assert await side(rw.write_lock().acquire())
    assert raw.hget(rw_name, "mode") == "write"
    assert next(f for f in reply_str_hash(raw.hgetall(rw_name)) if f != "mode").endswith(":write")
    await side(rw.write_lock().release())
    raw.close()


async def test_a_redisson_writer_excludes_redlease_and_its_unlock_wakes_a_reader(
    side, server, rw_name, java, long_recheck
):
    rw = side.client(server.url).rw_lock(rw_name, layout="redisson")
    assert java.write.try_lock(wait=0)
    assert not await side(rw.read_lock().acquire(blocking=False))
    assert not await side(rw.write_lock().acquire(blocking=False))
    unlocked: list[float] = []

    def unlock() -> None:
        unlocked.append(time.monotonic())
        assert java.write.unlock()

    thread = _when_listening(server.url, java.channel, unlock)
    assert await side(rw.read_lock().acquire(timeout=20))
    woken = time.monotonic() - unlocked[0]
    thread.join(5)
    assert woken < WOKEN_WITHIN, f"the reader took {woken:.2f} s after the unlock"
    assert not java.write.try_lock(wait=0)  # a redlease reader now excludes the Java writer
    assert java.read.try_lock(wait=0)  # and shares with a Java reader
    assert java.read.unlock() is False  # redlease still reads: nothing published
    await side(rw.read_lock().release())
    assert java.write.try_lock(wait=0)
    java.write.unlock()


async def test_a_redlease_writer_excludes_redisson_and_its_release_wakes_a_java_waiter(
    side, server, rw_name, java
):
    rw = side.client(server.url).rw_lock(rw_name, layout="redisson")
    writer = rw.write_lock()
    assert await side(writer.acquire())
    assert await side(writer.acquire())  # reentrant
    assert not java.read.try_lock(wait=0)
    assert not java.write.try_lock(wait=0)
    got: list[float] = []

    def java_reads() -> None:
        if java.read.try_lock(wait=20):
            got.append(time.monotonic())

    thread = threading.Thread(target=java_reads, daemon=True)
    thread.start()
    raw = redis.Redis.from_url(server.url)
    end = time.monotonic() + 20
    while time.monotonic() < end and raw.pubsub_numsub(java.channel)[0][1] < 1:
        time.sleep(0.005)
    raw.close()
    await side(writer.release())
    assert thread.is_alive() or not got  # one release of two: still held
    released = time.monotonic()
    await side(writer.release())
    thread.join(20)
    assert got, "the Java reader never got the lock"
    assert got[0] - released < WOKEN_WITHIN
    java.read.unlock()


async def test_readers_of_both_sides_share_and_the_last_one_frees_it(side, server, rw_name, java):
    client = side.client(server.url)
    rw = client.rw_lock(rw_name, layout="redisson")
    assert java.read.try_lock(wait=0)
    assert await side(rw.read_lock().acquire(blocking=False))
    assert await side(rw.read_lock().acquire(blocking=False))  # reentrant
    stats = await side(rw.read_lock().statistics())
    assert stats.locked and stats.hold_count == 2 and java.field in stats.holders
    other = side.client(server.url).rw_lock(rw_name, layout="redisson")
    assert not await side(other.write_lock().acquire(blocking=False))
    assert java.read.unlock() is False  # the lock lives on for redlease's read holds
    assert not java.write.try_lock(wait=0)
    await side(rw.read_lock().release())
    assert not java.write.try_lock(wait=0)
    await side(rw.read_lock().release())
    assert java.write.try_lock(wait=0)
    assert java.write.unlock()


async def test_a_waiting_redlease_writer_is_woken_by_the_last_java_reader(
    side, server, rw_name, java, long_recheck
):
    rw = side.client(server.url).rw_lock(rw_name, layout="redisson")
    assert java.read.try_lock(wait=0)
    unlocked: list[float] = []

    def unlock() -> None:
        unlocked.append(time.monotonic())
        assert java.read.unlock()

    thread = _when_listening(server.url, java.channel, unlock)
    assert await side(rw.write_lock().acquire(timeout=20))
    woken = time.monotonic() - unlocked[0]
    thread.join(5)
    assert woken < WOKEN_WITHIN, f"the writer took {woken:.2f} s after the unlock"
    assert not java.read.try_lock(wait=0)
    await side(rw.write_lock().release())


async def test_downgrade_and_upgrade(side, server, rw_name, java):
    rw = side.client(server.url).rw_lock(rw_name, layout="redisson")
    assert await side(rw.write_lock().acquire())
    assert await side(rw.read_lock().acquire())  # the writer may read (downgrade)
    assert not java.read.try_lock(wait=0)
    await side(rw.write_lock().release())
    assert java.read.try_lock(wait=0)  # now a read lock: Java readers join
    assert not java.write.try_lock(wait=0)
    java.read.unlock()
    with pytest.raises(LockUpgradeError):  # a reader asking to write would wait for itself
        await side(rw.write_lock().acquire(timeout=5))
    await side(rw.read_lock().release())
    assert java.write.try_lock(wait=0)
    java.write.unlock()


async def test_the_watchdog_keeps_a_read_hold_alive_for_redisson(side, server, rw_name, java):
    """A read hold outlives many watchdog leases; a Java reader's release in between keeps
    the lock for it (it counts redlease's lease keys), so the Java writer stays out."""
    # a lease whose renewal calls (bounded by a third of it) land on a loaded 2-core machine,
    # and whose renewals may come 1.3 s late (1.2 s left them 0.8 s)
    client = side.client(server.url, watchdog_timeout=2)
    rw = client.rw_lock(rw_name, layout="redisson")
    assert await side(rw.read_lock().acquire())
    assert java.read.try_lock(wait=0)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    (lease_key,) = reply_strs(raw.keys(f"*{client.id}*rwlock_timeout*"))  # the read hold's lease
    rose, renewals = ttl_rises(raw, lease_key), 0
    deadline = time.monotonic() + 60
    while renewals < 7:  # a third of a lease apart: more than two watchdog leases
        assert time.monotonic() < deadline, f"{renewals} renewals within 60 s"
        assert not java.write.try_lock(wait=0)
        await asyncio.sleep(0.1)  # lets an asyncio client's watchdog run
        renewals += rose()
    raw.close()
    assert java.read.unlock() is False
    assert not java.write.try_lock(wait=0)
    assert await side(rw.read_lock().locked())
    await side(rw.read_lock().release())
    assert java.write.try_lock(wait=0)
    java.write.unlock()


async def test_force_release_wakes_every_waiter(side, server, rw_name, java):
    rw = side.client(server.url).rw_lock(rw_name, layout="redisson")
    assert java.write.try_lock(wait=0)
    assert await side(rw.write_lock().force_release())
    assert await side(rw.read_lock().acquire(blocking=False))
    assert not await side(rw.write_lock().force_release())  # the read side is held, not write
    assert await side(rw.read_lock().force_release())
    assert java.write.try_lock(wait=0)
    java.write.unlock()


def test_a_retried_request_counts_once(server, rw_name):
    """A reply lost after the server ran the script: the same request again neither counts a
    second hold nor releases twice."""
    raw = redis.Redis.from_url(server.url)
    keys = RedissonRwKeys.for_name(rw_name)
    owner = f"{uuid.uuid4()}:1"

    def run(call):
        return raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)

    for script in rwlock_redisson.SCRIPTS:
        raw.script_load(script.source)
    for side_ in core.SIDES:
        call = keys.acquire_call(side_, owner, 0, 30.0, True, "w1")
        first, again = run(call), run(call)
        assert first[:2] == again[:2] == [1, 1]
        assert first[3] == again[3] > 0  # the same fencing token
        # Redisson's lock hash keeps Redisson's fields only (the wait id is in redlease's key)
        assert {reply_bytes(f).decode() for f in raw.hkeys(rw_name)} == {
            "mode",
            keys.field(side_, owner),
        }
        # a release naming another token acts on no hold of the owner field (a stale copy)
        other = keys.release_call(side_, owner, 1, request_id="r0", token=first[3] - 1)
        assert run(other) == [-1, 0]
        assert raw.hget(rw_name, keys.field(side_, owner)) == b"1"
        release = keys.release_call(side_, owner, 1, request_id="r1", token=first[3])
        raw.script_load(release.script.source)
        assert run(release) == run(release) == [1, 0]
        again = keys.release_call(side_, owner, 1, request_id="r2", token=first[3])
        assert run(again) == [-1, 0]
    assert not raw.exists(rw_name)
    raw.close()


@pytest.mark.parametrize("which", core.SIDES)
def test_a_first_acquire_takes_only_its_own_calls_hold_as_its_retry(server, rw_name, which):
    """A hold of the owner made for another call (one that gave up and could not give it
    back) is not a new call's retry: it is re-leased to the new call (its lease, a fresh
    token); the earlier call's give-back, landing late, then frees nothing, and the new
    call's gives back its own hold as Redisson's unlock would (Java waiters woken)."""
    raw = redis.Redis.from_url(server.url)
    keys = RedissonRwKeys.for_name(rw_name)
    owner = f"{uuid.uuid4()}:1"
    for script in rwlock_redisson.SCRIPTS:
        raw.script_load(script.source)

    def run(call):
        return raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)

    old = run(keys.acquire_call(which, owner, 0, 4.0, True, "old"))
    assert old[:2] == [1, 1] and old[2] <= 4000
    new = run(keys.acquire_call(which, owner, 0, 60.0, True, "new"))
    assert new[:2] == [1, 1] and new[2] > 55_000  # this call's lease, not the old hold's
    assert new[3] > old[3]  # a fresh token
    assert raw.pttl(rw_name) > 55_000
    assert run(keys.leave_call(which, owner, "old")) == 0  # the old call's, late: nothing
    assert raw.hget(rw_name, keys.field(which, owner)) == b"1"
    pubsub = raw.pubsub()
    pubsub.subscribe(keys.channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    assert run(keys.leave_call(which, owner, "new")) == 1
    assert not raw.exists(rw_name)
    message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == (b"1" if which == core.WRITE else b"0")
    pubsub.close()
    # a Java thread (Redisson's own scripts) takes the lock at once
    java = RedissonReadWriteLock(server.url, rw_name)
    lock = java.write if which == core.READ else java.read
    assert lock.try_lock(wait=0)
    lock.unlock()
    java.close()
    raw.close()


async def test_a_bad_layout_is_refused(side, server, name):
    client = side.client(server.url)
    with pytest.raises(InvalidArgumentError, match="layout"):
        client.rw_lock(name, layout="java")


async def test_a_name_whose_braces_form_no_tag_is_refused(side, server):
    """Redisson names each read hold's lease key ``a{b:...``, which would hash to another
    slot than the lock ``a{b``: refused before anything is written."""
    client = side.client(server.url)
    with pytest.raises(InvalidArgumentError, match="hash tag"):
        client.rw_lock("a{b", layout="redisson")
