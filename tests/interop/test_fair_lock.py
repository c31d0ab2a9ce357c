"""The fair lock shared with Redisson (issue #13 item 5, fair half): ``fair_lock(name,
layout="redisson")`` against Java threads using ``RFairLock`` on the same names, played by
``redlease.testing.RedissonFairLock`` (Redisson's keys, arguments, script effects, channels and
messages, in our own scripts). Both ways: exclusion, one line served in arrival order, prompt
wake-ups across the two sides, a waiter that gives up leaves the line, reentrancy, lost
leases; names with and without braces; sync and asyncio.

Timing: a wake-up must come within ``WAKE`` seconds, far below what a missed one costs (a
redlease waiter under ``long_recheck`` waits out its 20-30 s wait or the holder's 30 s lease;
a Java waiter waits out the holder's 30 s lease)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from integration.helpers import renewed, reply_int, reply_str_scores, reply_strs

from redlease import InvalidArgumentError, LeaseLostError
from redlease._core.fair import REDISSON_FAIR, SCRIPTS, THREAD_WAIT_MS
from redlease._core.keys import PubSub
from redlease.testing.redisson.fair_lock import RedissonFairLock

WAKE = 10.0
"""A wake-up across the two sides comes within this (measured: about 1 ms), however loaded
the machine. Without its message a waiter looks again only at the end of its 20 s wait or at
the holder's 30 s TTL (a redlease waiter under ``long_recheck``; else at its 5 s re-check)."""

GIVE_UP = 3.0
"""The timeout of a waiter that gives up while others queue behind it: longer than a loaded
machine takes to queue them (1 s failed under load: its place may run out before the one
behind it is queued and read)."""


@pytest.fixture(params=["plain", "braces"])
def fair_name(request: pytest.FixtureRequest, name: str) -> str:
    """A name without braces (``{name}`` in Redisson's keys), and one with a hash tag of its
    own (kept as it is: ``redisson_lock_queue:{tag}:x``)."""
    return name if request.param == "plain" else f"{{{name}}}:fair"


class Actor:
    """One redlease owner: a thread of its own (sync side) or a task of its own (asyncio
    side) that runs the calls given to it, in order (a lock is owned per thread / task)."""

    def __init__(self, side: Any) -> None:
        self._async = side.is_async
        self._pool = ThreadPoolExecutor(1)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task = asyncio.create_task(self._serve()) if self._async else None

    async def _serve(self) -> None:
        while True:
            fn, done = await self._queue.get()
            try:
                value = fn()
                if asyncio.iscoroutine(value):
                    value = await value
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(value)

    async def __call__(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` as this owner (awaited on the asyncio side) and return its value."""
        if not self._async:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        done = asyncio.get_running_loop().create_future()
        await self._queue.put((fn, done))
        return await done

    def start(self, fn: Callable[[], Any]) -> asyncio.Task[Any]:
        return asyncio.create_task(self(fn))

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._pool.shutdown(wait=False)


@pytest.fixture
async def world(side, server) -> AsyncIterator[Any]:
    """Actors, Java threads and a raw connection, all closed at the end."""

    class World:
        def __init__(self) -> None:
            self.raw = redis.Redis.from_url(server.url, decode_responses=True)
            self.actors: list[Actor] = []
            self.javas: list[RedissonFairLock] = []

        def actor(self) -> Actor:
            self.actors.append(Actor(side))
            return self.actors[-1]

        def java(self, name: str, **kwargs: Any) -> RedissonFairLock:
            self.javas.append(RedissonFairLock(server.url, name, **kwargs))
            return self.javas[-1]

        def fair(self, name: str, **kwargs: Any) -> Any:
            return side.client(server.url, **kwargs).fair_lock(name, layout="redisson")

        def line(self, name: str) -> list[str]:
            return reply_strs(self.raw.lrange(f"redisson_lock_queue:{_tagged(name)}", 0, -1))

        def places(self, name: str) -> dict[str, float]:
            key = f"redisson_lock_timeout:{_tagged(name)}"
            return dict(reply_str_scores(self.raw.zrange(key, 0, -1, withscores=True)))

        def listening(self, channel: str) -> int:
            return int(self.raw.pubsub_numsub(channel)[0][1])

        async def queued_and_listening(self, name: str, count: int) -> str:
            """Wait until ``count`` waiters are in line and the last one listens on its own
            channel (so a release now is heard); returns the last one's owner field."""
            await eventually(lambda: len(self.line(name)) == count, timeout=10)
            last = self.line(name)[-1]
            channel = f"redisson_lock__channel:{_tagged(name)}:{last}"
            await eventually(lambda: self.listening(channel) == 1, timeout=10)
            return last

    w = World()
    yield w
    for actor in w.actors:
        actor.close()
    for java in w.javas:
        java.close()
    w.raw.close()


async def eventually(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        await asyncio.sleep(0.005)


def _tagged(name: str) -> str:
    return name if "{" in name else f"{{{name}}}"


def _in_thread(fn: Callable[[], Any]) -> asyncio.Task[Any]:
    """A Java thread's blocking call, run beside the test."""
    return asyncio.create_task(asyncio.to_thread(fn))


async def _sleep(side: Any, seconds: float) -> None:
    await asyncio.sleep(seconds) if side.is_async else time.sleep(seconds)


# --- exclusion and wake-ups, both ways ------------------------------------------------------


async def test_a_java_holder_excludes_redlease_and_its_unlock_wakes_the_redlease_waiter(
    side, world, fair_name, long_recheck
):
    java = world.java(fair_name)
    assert java.try_lock(1)
    me = world.actor()
    fair = world.fair(fair_name)
    assert not await me(lambda: fair.acquire(blocking=False))
    assert world.line(fair_name) == []  # a single try never joins the line
    waiting = me.start(lambda: fair.acquire(timeout=20))
    owner = await world.queued_and_listening(fair_name, 1)
    assert owner.rsplit(":", 1)[0] == fair.client._state.id
    # Redisson's place: the holder's TTL plus the waiter's wait (its timeout), epoch ms
    place = world.places(fair_name)[owner]
    assert 0 < place - time.time() * 1000 - 20_000 <= 30_000
    started = time.monotonic()
    assert java.unlock()  # "0" on the redlease waiter's own channel
    assert await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < WAKE
    assert world.line(fair_name) == [] and world.places(fair_name) == {}
    assert world.raw.hget(fair_name, owner) == "1"
    assert not java.try_lock_once()
    assert not await asyncio.to_thread(java.try_lock, 0.2)  # tried, gave up, left the line
    assert world.line(fair_name) == [] and world.places(fair_name) == {}
    await me(lambda: fair.release())
    assert world.raw.exists(fair_name) == 0


async def test_a_redlease_holder_excludes_java_and_its_release_wakes_the_java_waiter(
    side, world, fair_name
):
    me = world.actor()
    fair = world.fair(fair_name)
    assert await me(lambda: fair.acquire())
    java = world.java(fair_name)
    assert not java.try_lock_once()
    waiting = _in_thread(lambda: java.try_lock(20))
    assert await world.queued_and_listening(fair_name, 1) == java.field
    stats = await me(lambda: fair.statistics())
    assert stats.owned and stats.waiters == 1 and stats.fencing_token is not None
    started = time.monotonic()
    await me(lambda: fair.release())  # "0" on the Java thread's own channel
    assert await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < WAKE  # not the 30 s TTL a missed "0" would cost
    assert world.line(fair_name) == [] and java.hold_count() == 1
    assert not await me(lambda: fair.acquire(blocking=False))
    assert not await me(lambda: fair.acquire(timeout=0.2))  # gave up: left the line
    assert world.line(fair_name) == [] and world.places(fair_name) == {}
    assert java.unlock()
    assert await me(lambda: fair.acquire(blocking=False))
    await me(lambda: fair.release())


async def test_force_release_wakes_the_first_waiter_of_the_other_side(
    side, world, fair_name, long_recheck
):
    java, me, fair = world.java(fair_name), world.actor(), world.fair(fair_name)
    assert java.try_lock(1)
    waiting = me.start(lambda: fair.acquire(timeout=20))
    await world.queued_and_listening(fair_name, 1)
    other = world.fair(fair_name)
    started = time.monotonic()
    assert await side(other.force_release())
    assert await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < WAKE
    java_waits = _in_thread(lambda: java.try_lock(20))
    await world.queued_and_listening(fair_name, 1)
    admin = world.java(fair_name, thread_id=9)
    started = time.monotonic()
    assert admin.force_unlock()  # Redisson's forceUnlock: "0" to the first waiter
    assert await asyncio.wait_for(java_waits, 10)
    assert time.monotonic() - started < WAKE
    with pytest.raises(LeaseLostError):
        await me(lambda: fair.release())  # its hold was force-released
    assert java.unlock()


# --- one line ---------------------------------------------------------------------------------


async def test_java_and_redlease_waiters_in_one_line_are_served_in_arrival_order(
    side, world, fair_name, long_recheck
):
    """Java holds; then a redlease waiter, a Java one, a redlease one, a Java one queue up,
    each after the one before is in line. Each turn is served in that order, each release
    waking the next waiter of the other side at once."""
    holder = world.java(fair_name, thread_id=1)
    assert holder.try_lock(1)
    order: list[str] = []
    hand_offs: list[float] = []
    released_at: list[float] = []

    def java_turn(java: RedissonFairLock, label: str) -> Callable[[], bool]:
        def run() -> bool:
            assert java.try_lock(30)
            hand_offs.append(time.monotonic() - released_at[-1])
            order.append(label)
            time.sleep(0.02)
            released_at.append(time.monotonic())
            return java.unlock()

        return run

    def redlease_turn(fair: Any, label: str) -> Callable[[], Any]:
        if side.is_async:

            async def run_async() -> None:
                assert await fair.acquire(timeout=30)
                hand_offs.append(time.monotonic() - released_at[-1])
                order.append(label)
                await asyncio.sleep(0.02)
                released_at.append(time.monotonic())
                await fair.release()

            return run_async

        def run() -> None:
            assert fair.acquire(timeout=30)
            hand_offs.append(time.monotonic() - released_at[-1])
            order.append(label)
            time.sleep(0.02)
            released_at.append(time.monotonic())
            fair.release()

        return run

    turns = []
    labels = ["redlease-1", "java-1", "redlease-2", "java-2", "redlease-3"]
    for i, label in enumerate(labels):
        if label.startswith("java"):
            java = world.java(fair_name, thread_id=10 + i)
            turns.append(_in_thread(java_turn(java, label)))
        else:
            turns.append(world.actor().start(redlease_turn(world.fair(fair_name), label)))
        await world.queued_and_listening(fair_name, i + 1)
    released_at.append(time.monotonic())
    assert holder.unlock()
    await asyncio.wait_for(asyncio.gather(*turns), 30)
    assert order == labels
    assert max(hand_offs) < WAKE, hand_offs
    assert world.line(fair_name) == [] and world.raw.exists(fair_name) == 0


async def test_a_java_waiter_is_not_starved_by_a_busy_redlease_line(side, world, fair_name):
    """Two redlease owners take the lock back to back (each release has the other in line):
    Java threads that ask meanwhile get their turns, each within a few hand-overs."""
    cap, deadline = 2_000, time.monotonic() + 60  # bounds, whatever happens
    stop, counts = False, [0, 0]

    def busy(index: int) -> Callable[[], Any]:
        fair = world.fair(fair_name)
        if side.is_async:

            async def run_async() -> None:
                while not stop and sum(counts) < cap and time.monotonic() < deadline:
                    async with fair:
                        counts[index] += 1

            return run_async

        def run() -> None:
            while not stop and sum(counts) < cap and time.monotonic() < deadline:
                with fair:
                    counts[index] += 1

        return run

    workers = [world.actor().start(busy(i)) for i in range(2)]
    try:
        await eventually(lambda: sum(counts) >= 20, timeout=20)
        for i in range(3):
            java = world.java(fair_name, thread_id=i + 1)
            started = time.monotonic()
            asks = asyncio.ensure_future(asyncio.to_thread(java.try_lock, 20))

            # counted from its place in line, not from when its thread was asked to start (a
            # loaded machine starts it late, while the redlease owners go on taking turns)
            def asked(a: Any = asks, f: str = java.field) -> bool:
                return a.done() or f in world.line(fair_name)

            await eventually(asked)
            before = sum(counts)
            assert await asks, "the Java waiter starved"
            assert time.monotonic() - started < 10
            assert java.unlock()
            assert sum(counts) - before < 50  # served in turn, not after the line ran dry
    finally:
        stop = True
        await asyncio.wait_for(asyncio.gather(*workers), 30)
    assert min(counts) > 0


@pytest.mark.two_servers
async def test_a_waiter_that_gives_up_leaves_the_line_and_the_next_is_not_held_back(
    side, world, fair_name, long_recheck
):
    holder = world.java(fair_name, thread_id=1)
    assert holder.try_lock(1)
    me, fair = world.actor(), world.fair(fair_name)
    gives_up = me.start(lambda: fair.acquire(timeout=GIVE_UP))
    mine = await world.queued_and_listening(fair_name, 1)
    java = world.java(fair_name, thread_id=2)
    java_waits = _in_thread(lambda: java.try_lock(20))
    await world.queued_and_listening(fair_name, 2)
    behind = world.places(fair_name)[java.field]
    assert not await asyncio.wait_for(gives_up, 10)
    # it left (Redisson's acquireFailed): the place behind it moved up by its wait (GIVE_UP)
    assert world.line(fair_name) == [java.field] and mine not in world.places(fair_name)
    assert world.places(fair_name)[java.field] == behind - int(GIVE_UP * 1000)
    started = time.monotonic()
    assert holder.unlock()
    assert await asyncio.wait_for(java_waits, 10)
    assert time.monotonic() - started < WAKE
    # and the other way: a Java waiter gives up ahead of a redlease waiter
    early = world.java(fair_name, thread_id=3)
    early_gives_up = _in_thread(lambda: early.try_lock(GIVE_UP))
    await world.queued_and_listening(fair_name, 1)
    waiting = me.start(lambda: fair.acquire(timeout=20))
    await world.queued_and_listening(fair_name, 2)
    assert not await asyncio.wait_for(early_gives_up, 10)
    assert len(world.line(fair_name)) == 1
    started = time.monotonic()
    assert java.unlock()
    assert await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - started < WAKE
    await me(lambda: fair.release())


async def test_a_cancelled_redlease_waiter_leaves_the_line(side, world, fair_name):
    if not side.is_async:
        pytest.skip("cancellation is asyncio's")
    holder = world.java(fair_name, thread_id=1)
    assert holder.try_lock(1)
    fair = world.fair(fair_name)
    waiting = asyncio.create_task(fair.acquire(timeout=20))
    await world.queued_and_listening(fair_name, 1)
    java = world.java(fair_name, thread_id=2)
    java_waits = _in_thread(lambda: java.try_lock(20))
    await world.queued_and_listening(fair_name, 2)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await eventually(lambda: world.line(fair_name) == [java.field], timeout=5)
    started = time.monotonic()
    assert holder.unlock()
    assert await asyncio.wait_for(java_waits, 10)
    assert time.monotonic() - started < WAKE
    assert java.unlock()


# --- reentrancy, leases -----------------------------------------------------------------------


async def test_reentrancy_on_both_sides(side, world, fair_name):
    me, fair, java = world.actor(), world.fair(fair_name), world.java(fair_name)
    assert await me(lambda: fair.acquire())
    assert await me(lambda: fair.acquire(blocking=False))  # a re-entry passes the line
    owner = next(f for f in world.raw.hkeys(fair_name) if not f.startswith("redlease:"))
    assert world.raw.hget(fair_name, owner) == "2" and await me(lambda: fair.hold_count()) == 2
    assert not java.try_lock_once()
    await me(lambda: fair.release())
    assert not java.try_lock_once()  # still held once
    java_waits = _in_thread(lambda: java.try_lock(20))
    await world.queued_and_listening(fair_name, 1)
    await me(lambda: fair.release())
    assert await asyncio.wait_for(java_waits, 10)
    assert java.try_lock_once() and java.hold_count() == 2  # Java re-enters too
    assert not await me(lambda: fair.acquire(blocking=False))
    waiting = me.start(lambda: fair.acquire(timeout=20))
    await world.queued_and_listening(fair_name, 1)
    assert not java.unlock()  # one hold left: nobody woken
    await _sleep(side, 0.1)
    assert not waiting.done()
    assert java.unlock()
    assert await asyncio.wait_for(waiting, 10)
    await me(lambda: fair.release())


async def test_an_expired_redlease_lease_lets_java_in_and_release_reports_it(
    side, world, fair_name
):
    me, fair, java = world.actor(), world.fair(fair_name), world.java(fair_name)
    assert await me(lambda: fair.acquire(lease=0.3))
    java_waits = _in_thread(lambda: java.try_lock(20))
    assert await asyncio.wait_for(java_waits, 10)  # waited out the TTL it saw (0.3 s)
    with pytest.raises(LeaseLostError):
        await me(lambda: fair.release())
    assert java.hold_count() == 1 and world.line(fair_name) == []  # Java's hold untouched
    assert java.unlock()


async def test_an_expired_java_lease_lets_redlease_in(side, world, fair_name):
    java = world.java(fair_name, lease=0.3)
    assert java.try_lock(1)
    me, fair = world.actor(), world.fair(fair_name)
    assert await me(lambda: fair.acquire(timeout=10))  # within a re-check of the expiry
    with pytest.raises(RuntimeError):  # IllegalMonitorStateException
        java.unlock()
    assert await me(lambda: fair.owned())
    await me(lambda: fair.release())


async def test_the_watchdog_renews_a_redisson_layout_hold(side, world, fair_name):
    me = world.actor()
    # a lease whose renewal calls (bounded by a third of it) land on a loaded 2-core machine,
    # and whose renewals may come 1.3 s late (1.2 s left them 0.8 s)
    fair = world.fair(fair_name, watchdog_timeout=2)
    java = world.java(fair_name)
    assert await me(lambda: fair.acquire())
    # more than two leases: 7 renewals, a third of a lease apart (waited for, not slept
    # through)
    assert await renewed(world.raw, fair_name, times=7, timeout=60), "the watchdog renews it"
    assert await me(lambda: fair.owned())
    assert 0 < await me(lambda: fair.ttl()) <= 2
    assert not java.try_lock_once()
    await me(lambda: fair.release())
    assert java.try_lock_once()
    assert java.unlock()


# --- arguments, and the scripts' own guarantees -----------------------------------------------


async def test_a_bad_layout_value_is_named(side, server, name):
    client = side.client(server.url)
    for bad in ("java", "Redisson", None):
        with pytest.raises(InvalidArgumentError, match=repr(bad)):
            client.fair_lock(name, layout=bad)
    assert client.fair_lock(name).name == name  # the default: redlease's own layout
    assert client.fair_lock(name, layout="redlease").name == name


async def test_the_default_layout_is_not_redissons(side, world, server, name):
    """``layout="redlease"`` (the default) keeps its own line; Redisson's keys stay empty."""
    me, holder = world.actor(), side.client(server.url).fair_lock(name)
    assert await me(lambda: holder.acquire())
    waiter, other = world.actor(), side.client(server.url).fair_lock(name)
    waiting = waiter.start(lambda: other.acquire(timeout=10))
    await eventually(lambda: world.raw.zcard(f"redlease:line:{{{name}}}") == 1, timeout=10)
    assert world.line(name) == [] and world.places(name) == {}
    await me(lambda: holder.release())
    assert await asyncio.wait_for(waiting, 10)
    await waiter(lambda: other.release())


def _script_keys(name: str) -> Any:
    return REDISSON_FAIR.keys(name, PubSub(sharded=False))


def _run(raw: Any, call: Any) -> Any:
    return raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)


def _load(raw: Any) -> None:
    for script in SCRIPTS:
        raw.script_load(script.source)


def test_retried_requests_never_count_twice(server, fair_name):
    """A request sent again after its reply was lost: an acquire counts one hold, a release
    answers the same, and the receipt outlives neither a new hold nor Redisson's view."""
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    _load(raw)
    keys = _script_keys(fair_name)
    owner = f"{uuid.uuid4()}:1"
    first = REDISSON_FAIR.acquire_call(
        keys,
        owner,
        held=0,
        lease=30.0,
        join_line=True,
        wait_id="w",
        timeout=None,
        fair=True,
        handover=False,
    )
    granted = _run(raw, first)
    assert granted[:2] == [1, 1]
    assert _run(raw, first)[:2] == [1, 1]  # the same request again: still one hold
    assert raw.hget(fair_name, owner) == "1"
    assert (
        reply_int(raw.hget(fair_name, "redlease:fence"))
        == granted[3]
        == reply_int(raw.get(keys.fence))
    )
    # a release naming another token acts on no hold of the owner field (a stale copy)
    stale = REDISSON_FAIR.release_call(keys, owner, 1, request_id="r0", token=granted[3] - 1)
    assert _run(raw, stale) == [-1, 0] and raw.hget(fair_name, owner) == "1"
    release = REDISSON_FAIR.release_call(keys, owner, 1, request_id="r1", token=granted[3])
    assert _run(raw, release) == [1, 0]
    assert _run(raw, release) == [1, 0]  # sent again: recognised by its receipt
    other = REDISSON_FAIR.release_call(keys, owner, 1, request_id="r2", token=granted[3])
    assert _run(raw, other) == [-1, 0]  # a different release: nothing to release
    again = REDISSON_FAIR.acquire_call(
        keys,
        owner,
        held=0,
        lease=30.0,
        join_line=False,
        wait_id="w2",
        timeout=None,
        fair=True,
        handover=False,
    )
    token = _run(raw, again)[3]
    assert token > granted[3]  # fencing tokens only increase
    raw.delete(fair_name)
    raw.close()


def test_a_first_acquire_takes_only_its_own_calls_hold_as_its_retry(server, fair_name):
    """A hold of the owner made for another call (one that gave up and could not give it
    back) is not a new call's retry: it is re-leased to the new call (count 1, its lease and
    wait id, a fresh token), so the earlier call's give-back, landing late, frees nothing.
    Redisson's fields stay as Redisson has them."""
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    _load(raw)
    keys = _script_keys(fair_name)
    owner = f"{uuid.uuid4()}:1"

    def acquire(held: int, wait_id: str, lease: float, token: int = 0) -> list[int]:
        call = REDISSON_FAIR.acquire_call(
            keys,
            owner,
            held=held,
            lease=lease,
            join_line=False,
            wait_id=wait_id,
            timeout=None,
            fair=True,
            handover=False,
            token=token,
        )
        return _run(raw, call)

    old = acquire(0, "old", 4.0)
    assert old[:2] == [1, 1]
    retry = acquire(0, "old", 4.0)  # the old call's own retry: its hold, its token
    assert retry[:2] == [1, 1] and retry[2] <= 4000 and retry[3] == old[3]
    assert acquire(1, "reentry", 4.0, old[3])[:2] == [1, 2]  # and an outer hold the caller forgot
    new = acquire(0, "new", 60.0)
    assert new[:3] == [1, 1, 60_000] and new[3] > old[3]
    assert raw.hget(fair_name, owner) == "1" and raw.pttl(fair_name) > 55_000
    assert raw.hget(fair_name, "redlease:wait") == "new"
    assert (
        reply_int(raw.hget(fair_name, "redlease:fence")) == new[3] == reply_int(raw.get(keys.fence))
    )
    again = acquire(0, "new", 60.0)  # the new call's own retry: the same hold and token
    assert again[:2] == [1, 1] and again[3] == new[3]
    assert _run(raw, REDISSON_FAIR.leave_call(keys, owner, "old", None, "")) == 0
    assert raw.hget(fair_name, owner) == "1"
    assert _run(raw, REDISSON_FAIR.leave_call(keys, owner, "new", None, "")) == 1
    assert raw.exists(fair_name) == 0
    raw.close()


def test_leaving_gives_back_only_a_hold_made_for_that_call_and_wakes_the_next(server, fair_name):
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    _load(raw)
    keys = _script_keys(fair_name)
    me, java = f"{uuid.uuid4()}:1", f"{uuid.uuid4()}:2"
    lease = 30.0

    def acquire(
        owner: str, held: int, wait_id: str, join_line: bool = True, token: int = 0
    ) -> list[int]:
        call = REDISSON_FAIR.acquire_call(
            keys,
            owner,
            held=held,
            lease=lease,
            join_line=join_line,
            wait_id=wait_id,
            timeout=5.0,
            fair=True,
            handover=False,
            token=token,
        )
        return _run(raw, call)

    first = acquire(me, 0, "a")
    assert first[:2] == [1, 1]
    assert acquire(me, 1, "b", token=first[3])[:2] == [1, 2]  # a re-entry by a later call
    # a re-entry naming another token joins no hold of the owner field (a stale copy)
    assert acquire(me, 1, "s", token=first[3] - 1)[:2] == [-1, 0]
    # the later call gives up (its reply was lost, say): the outer hold stays
    assert _run(raw, REDISSON_FAIR.leave_call(keys, me, "b", 5.0, "5000")) == 0
    assert raw.hget(fair_name, me) == "2"
    raw.delete(fair_name)
    # a Java thread in line behind a grant whose reply was lost: leaving gives the grant
    # back and wakes the Java thread on its own channel
    holder = f"{uuid.uuid4()}:3"
    held = acquire(holder, 0, "h")
    assert held[:2] == [1, 1]
    assert acquire(me, 0, "c")[0] == 0  # in line
    raw.rpush(keys.line, java)
    raw.zadd(keys.places, {java: time.time() * 1000 + 60_000})
    _run(raw, REDISSON_FAIR.release_call(keys, holder, 1, request_id="r", token=held[3]))
    assert acquire(me, 0, "c")[:2] == [1, 1]  # granted; suppose the reply is lost
    pubsub = raw.pubsub()
    pubsub.subscribe(f"{keys.channel}:{java}")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    assert _run(raw, REDISSON_FAIR.leave_call(keys, me, "c", 5.0, "5000")) == 1
    assert raw.exists(fair_name) == 0
    message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == "0"
    pubsub.close()
    raw.delete(keys.line, keys.places)
    raw.close()


def test_lapsed_places_leave_from_the_head_by_the_server_clock(server, fair_name):
    """A dead waiter first in line holds the line up until its place lapses (Redisson's
    rule); then the next try drops it. Every script does so before it looks at the line."""
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    _load(raw)
    keys = _script_keys(fair_name)
    dead, me = f"{uuid.uuid4()}:1", f"{uuid.uuid4()}:2"
    now_ms = time.time() * 1000
    raw.rpush(keys.line, dead)
    raw.zadd(keys.places, {dead: now_ms + 60_000})
    call = REDISSON_FAIR.acquire_call(
        keys,
        me,
        held=0,
        lease=30.0,
        join_line=True,
        wait_id="w",
        timeout=None,
        fair=True,
        handover=False,
    )
    assert _run(raw, call)[:3] == [0, 0, -2]  # free, but the dead waiter's turn
    assert raw.lrange(keys.line, 0, -1) == [dead, me]
    # our place: the one before it plus our wait (Redisson's threadWaitTime)
    assert raw.zscore(keys.places, me) == pytest.approx(now_ms + 60_000 + THREAD_WAIT_MS)
    raw.zadd(keys.places, {dead: now_ms - 1})  # its place lapses
    assert _run(raw, call)[:2] == [1, 1]
    assert raw.exists(keys.line) == 0 and raw.exists(keys.places) == 0
    raw.delete(fair_name)
    raw.close()
