"""The reentrant lock shared with Redisson (issue #13): a Java thread's ``RLock``, driven by
``redlease.peers.RedissonLock`` (Redisson's keys, arguments, scripts' effects, channel and
message), and redlease's ``client.lock`` on the same names, both ways: exclusion, reentrancy,
prompt wake-up by the unlock message, the watchdog's renewal and force release, on names
with and without braces (a hash tag of their own: ``{order}:42``, ``a{b}c``)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from integration.helpers import eventually
from integration.test_semaphore import Background

from redlease import LeaseLostError
from redlease._core.keys import LockKeys, redisson_prefixed
from redlease.peers import RedissonLock

WOKEN_WITHIN = 10.0
"""A waiter woken by the unlock message holds the lock within this, however loaded the
machine. Without the message a redlease waiter under ``long_recheck`` would look again only
at the end of its 20 s wait (else after its 5 s re-check), and a Redisson waiter after the
holder's TTL (30 s) or its own 20 s wait: only the message can meet it."""

FORMS = ["plain", "{order}:42", "a{b}c"]


def unique(form: str) -> str:
    """A fresh name of the given form: no braces, braces around a prefix, braces inside."""
    tag = uuid.uuid4().hex[:8]
    return {
        "plain": f"plain-{tag}",
        "{order}:42": f"{{order-{tag}}}:42",
        "a{b}c": f"a{{b-{tag}}}c",
    }[form]


@pytest.fixture(params=FORMS)
def lock_name(request: pytest.FixtureRequest) -> str:
    return unique(request.param)


@pytest.fixture
def raw(server) -> Any:
    r = redis.Redis.from_url(server.url)
    yield r
    r.close()


@pytest.fixture
def java(server, lock_name) -> Any:
    """A Java thread's ``RLock`` on the test's name (its own JVM: own client id, own
    connections)."""
    made: list[RedissonLock] = []

    def make(**kwargs: Any) -> RedissonLock:
        lock = RedissonLock(server.url, lock_name, **kwargs)
        made.append(lock)
        return lock

    yield make
    for lock in made:
        lock.close()


class JavaThread:
    """A blocking call of the Java side run on a thread of its own, the time it returned
    noted; awaited with a bound on either side."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: list[Any] = []
        self.done_at = 0.0

        def run() -> None:
            try:
                self.value.append(call())
            except BaseException as exc:  # reported by result()
                self.value.append(exc)
            self.done_at = time.monotonic()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    async def result(self, timeout: float = 30.0) -> Any:
        await eventually(lambda: not self._thread.is_alive(), timeout)
        if isinstance(self.value[0], BaseException):
            raise self.value[0]
        return self.value[0]


def listeners(raw: Any, channel: str) -> int:
    return int(raw.pubsub_numsub(channel)[0][1])


def held_then_released(side: Any, lock: Any, stamp: list[float]) -> Any:
    """Acquire ``lock`` (waiting up to 20 s), note when, and release it, all in one thread or
    task (redlease's owner is the thread or the task)."""
    if side.is_async:

        async def run() -> bool:
            got = await lock.acquire(timeout=20)
            stamp.append(time.monotonic())
            if got:
                await lock.release()
            return bool(got)

        return run

    def run_sync() -> bool:
        got = lock.acquire(timeout=20)
        stamp.append(time.monotonic())
        if got:
            lock.release()
        return bool(got)

    return run_sync


# --- exclusion and reentrancy ---------------------------------------------------------------


async def test_a_redisson_holder_excludes_redlease(side, server, lock_name, java, raw):
    """While a Java thread holds the lock, re-entered or not, redlease sees it held by
    another and cannot take it; the Java thread's last unlock frees it for redlease."""
    thread = java()
    lock = side.client(server.url).lock(lock_name)
    assert thread.try_lock(wait=0)
    assert await side(lock.locked())
    assert not await side(lock.owned())
    assert not await side(lock.acquire(blocking=False))
    assert 20 < await side(lock.ttl()) <= 30  # Redisson's lease (30 s), as the key's TTL
    assert thread.try_lock(wait=0)  # re-entered: count 2
    assert thread.hold_count() == 2
    assert not await side(lock.acquire(timeout=0.2))
    assert not thread.unlock()  # count 1: still held
    # the unlock's answer, kept under its request id (Redisson >= 3.24's unlock latch)
    latches = redisson_prefixed("redisson_unlock_latch", lock_name) + ":*"
    assert [raw.get(k) for k in raw.keys(latches)] == [b"0"]
    assert 0 < raw.pttl(raw.keys(latches)[0]) <= 20_000
    assert not await side(lock.acquire(blocking=False))
    assert thread.unlock()  # freed: "0" published
    assert [raw.get(k) for k in raw.keys(latches)] == [b"1"]  # the last one's, alone
    assert not await side(lock.locked())
    assert await side(lock.acquire(blocking=False))
    assert not thread.renew()  # redlease's hold is not the Java thread's
    assert raw.keys(latches) == []  # spent latches go once the answer is in
    await side(lock.release())
    assert raw.exists(lock_name) == 0


async def test_a_redlease_holder_excludes_redisson(side, server, lock_name, java, raw):
    """While redlease holds the lock, re-entered or not, a Java thread's ``tryLock`` fails;
    redlease's last release frees it for the Java thread."""
    thread = java()
    client = side.client(server.url)
    lock = client.lock(lock_name)
    assert await side(lock.acquire())
    assert await side(lock.acquire())  # re-entered
    assert await side(lock.hold_count()) == 2
    holders = {k: v for k, v in raw.hgetall(lock_name).items() if not k.startswith(b"redlease:")}
    assert list(holders.values()) == [b"2"]  # one field <client-id>:<owner-id>, count 2
    assert not thread.try_lock(wait=0)
    assert not thread.try_lock(wait=0.2)
    await side(lock.release())
    assert await side(lock.owned())
    assert not thread.try_lock(wait=0)
    await side(lock.release())
    assert thread.try_lock(wait=0)
    assert thread.unlock()


async def test_two_redisson_threads_exclude_each_other_beside_redlease(
    side, server, lock_name, java
):
    """Two Java threads of one JVM (same client id, thread ids 1 and 2) are two owners for
    redlease as for each other."""
    first = java(thread_id=1)
    second = java(thread_id=2, client_id=first.client_id)
    lock = side.client(server.url).lock(lock_name)
    assert first.try_lock(wait=0)
    assert not second.try_lock(wait=0)
    assert first.unlock()
    assert second.try_lock(wait=0)
    assert not await side(lock.acquire(blocking=False))
    assert second.unlock()
    assert await side(lock.acquire(blocking=False))
    assert not first.try_lock(wait=0)
    await side(lock.release())


# --- prompt wake-up, both ways ----------------------------------------------------------------


async def test_redisson_unlock_wakes_a_redlease_waiter(
    side, server, lock_name, java, raw, long_recheck
):
    """A redlease waiter blocked in ``acquire`` behind a Java hold gets the lock as soon as
    the Java thread unlocks: the ``0`` on Redisson's channel wakes it."""
    thread = java()
    assert thread.try_lock(wait=0)
    client = side.client(server.url)
    keys = LockKeys.for_name(lock_name)
    stamp: list[float] = []
    waiting = Background(side, held_then_released(side, client.lock(lock_name), stamp))
    await eventually(lambda: raw.zcard(keys.line) == 1)  # in line
    await eventually(lambda: listeners(raw, thread.channel) == 1)  # and listening
    started = time.monotonic()
    assert thread.unlock()
    assert await waiting.result(timeout=25)
    assert stamp[0] - started < WOKEN_WITHIN, "not woken by the unlock message"
    assert raw.exists(lock_name) == 0


async def test_redlease_release_wakes_a_redisson_waiter(side, server, lock_name, java, raw):
    """A Java thread blocked in ``tryLock(20 s)`` behind a redlease hold gets the lock as soon
    as redlease releases it: the release publishes ``0`` on Redisson's channel."""
    thread = java()
    lock = side.client(server.url).lock(lock_name)
    assert await side(lock.acquire())  # watchdog lease: 30 s TTL
    before = listeners(raw, thread.channel)
    waiter = JavaThread(lambda: thread.try_lock(wait=20))
    await eventually(lambda: listeners(raw, thread.channel) == before + 1)
    started = time.monotonic()
    await side(lock.release())
    assert await waiter.result(timeout=25)
    assert waiter.done_at - started < WOKEN_WITHIN, "not woken by the unlock message"
    assert thread.hold_count() == 1
    assert not await side(lock.acquire(blocking=False))
    await eventually(lambda: listeners(raw, thread.channel) == before)  # Java unsubscribed
    assert thread.unlock()


async def test_redisson_waiters_and_redlease_waiters_all_get_turns(
    side, server, lock_name, java, long_recheck
):
    """A Java waiter and a redlease waiter behind a Java hold: each unlock or release wakes
    the next one, and everyone gets the lock once, each within the bound of a message."""
    holder, other = java(thread_id=1), java(thread_id=2)
    assert holder.try_lock(wait=0)
    client = side.client(server.url)
    stamp: list[float] = []
    ours = Background(side, held_then_released(side, client.lock(lock_name), stamp))
    theirs = JavaThread(lambda: other.try_lock(wait=20) and other.unlock())
    raw = redis.Redis.from_url(server.url)
    try:
        await eventually(lambda: raw.zcard(LockKeys.for_name(lock_name).line) == 1)
        await eventually(lambda: listeners(raw, holder.channel) == 2)
        started = time.monotonic()
        assert holder.unlock()
        assert await ours.result(timeout=25)
        assert await theirs.result(timeout=25)
        # two wake-ups, one after the other; a missed one costs 20 s (a wait's end)
        assert max(stamp[0], theirs.done_at) - started < 1.5 * WOKEN_WITHIN
    finally:
        raw.close()


# --- leases: the watchdog on either side ----------------------------------------------------


@pytest.mark.parametrize("lock_name", ["plain"], indirect=True)  # leases, not names
async def test_a_redlease_hold_renewed_by_its_watchdog_stays_held_for_redisson(
    side, server, lock_name, java, raw
):
    """A redlease hold with a 2 s watchdog lease: a Java thread waiting 4.5 s (its tries
    see the TTL, at most 2 s, and wait for it) never finds it free, since the watchdog
    renews it; released, it is the Java thread's at once."""
    thread = java()
    # 2 s: a renewal may come 1.3 s late on a loaded 2-core machine (1.5 s left it 1 s)
    client = side.client(server.url, watchdog_timeout=2)
    lock = client.lock(lock_name)
    assert await side(lock.acquire())
    assert 0 < raw.pttl(lock_name) <= 2000
    # more than two leases (on a thread: the asyncio watchdog needs the event loop meanwhile)
    assert not await JavaThread(lambda: thread.try_lock(wait=4.5)).result(timeout=20)
    assert await side(lock.owned())
    assert not await side(lock.lease_lost)
    assert 0 < raw.pttl(lock_name) <= 2000
    await side(lock.release())
    assert thread.try_lock(wait=0)
    assert thread.unlock()


@pytest.mark.parametrize("lock_name", ["plain"], indirect=True)  # leases, not names
async def test_a_java_hold_renewed_by_its_watchdog_stays_held_for_redlease(
    side, server, lock_name, java, raw
):
    """A Java hold with a 1 s lease that Redisson's watchdog renews (``renew()``, one turn of
    ``renewExpiration``) stays held for redlease across several leases; once the Java thread
    unlocks, the renewal finds nothing and stops."""
    thread = java(lease=1.0)
    lock = side.client(server.url).lock(lock_name)
    assert thread.try_lock(wait=0)
    started = time.monotonic()
    for _ in range(4):  # 4 x 0.4 s: past the first lease
        assert not await side(lock.acquire(timeout=0.4))
        assert thread.renew()
        assert 500 < raw.pttl(lock_name) <= 1000  # the lease again
    assert time.monotonic() - started > 1.0
    assert thread.unlock()
    assert not thread.renew()
    assert await side(lock.acquire(blocking=False))
    assert not thread.renew()  # redlease's hold is not the Java thread's
    await side(lock.release())


# --- force release, both ways ---------------------------------------------------------------


async def test_redlease_force_release_frees_a_java_hold_and_wakes_a_waiter(
    side, server, lock_name, java, raw, long_recheck
):
    """redlease's ``force_release()`` deletes a Java thread's hold and publishes ``0``: a
    redlease waiter gets the lock promptly; the Java thread's watchdog and unlock find it
    gone (Java's ``IllegalMonitorStateException``)."""
    thread = java()
    assert thread.try_lock(wait=0)
    admin = side.client(server.url)
    waiter_client = side.client(server.url)
    stamp: list[float] = []
    waiting = Background(side, held_then_released(side, waiter_client.lock(lock_name), stamp))
    await eventually(lambda: raw.zcard(LockKeys.for_name(lock_name).line) == 1)
    await eventually(lambda: listeners(raw, thread.channel) == 1)
    started = time.monotonic()
    assert await side(admin.lock(lock_name).force_release())
    assert await waiting.result(timeout=25)
    assert stamp[0] - started < WOKEN_WITHIN, "not woken by the force release's message"
    assert not thread.renew()
    with pytest.raises(RuntimeError, match="does not hold"):
        thread.unlock()


async def test_redisson_force_unlock_frees_a_redlease_hold_and_wakes_a_java_waiter(
    side, server, lock_name, java, raw
):
    """Redisson's ``forceUnlock()`` deletes a redlease hold and publishes ``0``: a Java
    waiter gets the lock promptly; the redlease holder learns its lease is lost, and its
    release leaves the Java hold alone."""
    waiter, admin = java(thread_id=1), java(thread_id=2)
    lost: list[Exception] = []
    lock = side.client(server.url, watchdog_timeout=1.5).lock(lock_name, on_lease_lost=lost.append)
    assert await side(lock.acquire())
    before = listeners(raw, waiter.channel)
    got = JavaThread(lambda: waiter.try_lock(wait=20))
    await eventually(lambda: listeners(raw, waiter.channel) == before + 1)
    started = time.monotonic()
    assert admin.force_unlock()
    assert await got.result(timeout=25)
    assert got.done_at - started < WOKEN_WITHIN, "not woken by the force unlock's message"
    await eventually(lambda: lost, timeout=10)  # the watchdog's next renewal finds it gone
    with pytest.raises(LeaseLostError):
        await side(lock.release())
    assert waiter.hold_count() == 1  # untouched
    assert waiter.unlock()
    assert not admin.force_unlock()  # free: nothing deleted


# --- a lock kept after its release (release(keep_for=), scheduled_lock(at_least_for=)) -------


async def test_a_kept_lock_is_held_for_redisson_and_freed_by_either_force_release(
    side, server, lock_name, java, raw
):
    """A lock redlease keeps after its release (field ``<owner>:kept``, by no one) is held for
    a Java thread: its ``tryLock`` fails and a Java waiter waits. redlease's
    ``force_release()`` deletes it and publishes ``0``: the Java waiter gets the lock
    promptly. Redisson's ``forceUnlock()`` frees a kept lock too."""
    thread, admin = java(thread_id=1), java(thread_id=2)
    lock = side.client(server.url).lock(lock_name)
    assert await side(lock.acquire(blocking=False, lease=120))
    await side(lock.release(keep_for=60))
    assert not thread.try_lock(wait=0)
    assert thread.hold_count() == 0
    before = listeners(raw, thread.channel)
    got = JavaThread(lambda: thread.try_lock(wait=20))
    await eventually(lambda: listeners(raw, thread.channel) == before + 1)
    started = time.monotonic()
    assert await side(side.client(server.url).lock(lock_name).force_release())
    assert await got.result(timeout=25)
    assert got.done_at - started < WOKEN_WITHIN, "not woken by the force release's message"
    assert thread.unlock()

    assert await side(lock.acquire(blocking=False, lease=120))
    await side(lock.release(keep_for=60))
    assert not admin.try_lock(wait=0)
    assert admin.force_unlock()
    assert raw.exists(lock_name) == 0
    assert await side(lock.acquire(blocking=False))
    await side(lock.release())
