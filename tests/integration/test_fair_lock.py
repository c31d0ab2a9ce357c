"""The fair lock: strictly first come, first served, on a real server, sync and asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from functools import partial

import redis

from redlease._core.keys import LockKeys

from .helpers import eventually


async def test_newcomers_never_pass_a_live_waiter(side, server, name):
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url)
    # a live waiter in line (its client listens on its own channel), and the lock free (a
    # hand-over to it came to nothing, say)
    raw.zadd(keys.line, {"first-in-line:1 wait-1 w30000": 1})
    listener = raw.pubsub()
    listener.subscribe(keys.handover("first-in-line:1"))
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    fair = side.client(server.url).fair_lock(name)
    assert not await side(fair.acquire(blocking=False))
    plain = side.client(server.url).lock(name)
    assert await side(plain.acquire(blocking=False))  # the plain lock is not strict
    await side(plain.release())  # hands it to the waiter in line
    assert raw.hget(name, "first-in-line:1") == b"1"
    assert listener.get_message(timeout=5)["type"] == "message"
    # the waiter's client goes away without taking it up: once its hold is gone, its place is
    # found dead and the newcomer gets the lock
    raw.zadd(keys.line, {"first-in-line:1 wait-2 w30000": 1})
    raw.delete(name)
    assert not await side(fair.acquire(blocking=False))  # still live: its turn
    listener.close()
    assert await side(fair.acquire(timeout=10))
    assert raw.zcard(keys.line) == 0
    await side(fair.release())
    raw.close()


async def test_fifo_order_under_contention(side, server, name):
    holder = side.client(server.url).fair_lock(name)
    assert await side(holder.acquire())
    order: list[int] = []
    clients = [side.client(server.url) for _ in range(4)]

    async def queued(count: int) -> bool:
        return (await side(holder.statistics())).waiters == count

    if side.is_async:

        async def wait_turn(i: int) -> None:
            lock = clients[i].fair_lock(name)
            assert await lock.acquire(timeout=30)
            order.append(i)
            await asyncio.sleep(0.01)
            await lock.release()

        tasks = []
        for i in range(4):
            tasks.append(asyncio.create_task(wait_turn(i)))
            await eventually(partial(queued, i + 1))
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    else:

        def wait_turn_in_thread(i: int) -> None:
            lock = clients[i].fair_lock(name)
            assert lock.acquire(timeout=30)
            order.append(i)
            time.sleep(0.01)
            lock.release()

        threads = []
        for i in range(4):
            threads.append(threading.Thread(target=wait_turn_in_thread, args=(i,)))
            threads[-1].start()
            await eventually(partial(queued, i + 1))
        holder.release()
        for t in threads:
            t.join(60)
    assert order == [0, 1, 2, 3]


async def test_a_waiter_that_gives_up_does_not_block_the_line(side, server, name):
    holder = side.client(server.url).fair_lock(name)
    quitter = side.client(server.url).fair_lock(name)
    patient = side.client(server.url).fair_lock(name)
    assert await side(holder.acquire())
    assert not await side(quitter.acquire(timeout=0.3))  # leaves the line on timeout
    assert (await side(holder.statistics())).waiters == 0
    await side(holder.release())
    assert await side(patient.acquire(blocking=False))
    await side(patient.release())


async def test_fair_lock_is_reentrant_and_fenced(side, server, name):
    lock = side.client(server.url).fair_lock(name)
    async with side.hold(lock) as outer, side.hold(lock) as inner:
        assert inner.hold_count == 2 and inner.fencing_token == outer.fencing_token
    assert not await side(lock.locked())


def test_a_dead_waiter_loses_its_place_within_its_waiter_lease(server, name):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import redlease
    from redlease._core.lock import PLACE_MS

    worker = str(Path(__file__).with_name("worker.py"))
    with redlease.Client.from_url(server.url) as client:
        holder = client.fair_lock(name)
        assert holder.acquire()
        proc = subprocess.Popen(
            [sys.executable, worker, "wait-fair", "sync", server.url, name],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "waiting"
            deadline = time.monotonic() + 30
            while holder.statistics().waiters != 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert holder.statistics().waiters == 1
            os.kill(proc.pid, signal.SIGKILL)  # dies with its place in line
            proc.wait(10)
            died_at = time.monotonic()
            holder.release()  # handed to (or reserved for) the dead waiter: never used
            raw = redis.Redis.from_url(server.url)
            try:
                # whichever it was, it lasts no longer than the hand-over window (1 s)
                assert 0 < raw.pttl(name) <= 1000
            finally:
                raw.close()
            with redlease.Client.from_url(server.url) as other:
                assert other.fair_lock(name).acquire(timeout=60)
                # no longer than the waiter's place lasts, plus the hand-over window and slack
                assert time.monotonic() - died_at < PLACE_MS / 1000 + 5
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def test_cancelled_fair_waiter_leaves_the_line(server, name):
    import redlease

    async with (
        redlease.AsyncClient.from_url(server.url) as a,
        redlease.AsyncClient.from_url(server.url) as b,
    ):
        holder = a.fair_lock(name)
        assert await holder.acquire()
        task = asyncio.create_task(b.fair_lock(name).acquire())
        await eventually(lambda: _queued(holder, 1))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert (await holder.statistics()).waiters == 0
        await holder.release()
        assert await b.fair_lock(name).acquire(blocking=False)


async def test_a_waiter_cancelled_as_it_is_woken_leaves_the_line(server, name):
    """The cancellation comes in the very turn the waiter's wake-up does, or one or two
    turns later: on Python 3.10 and 3.11 ``asyncio.wait_for`` returned the wake-up and
    dropped the cancellation, and the waiter went on waiting, in line, for ever (seen as
    test_cancelled_fair_waiter_leaves_the_line hanging on 3.10 under load)."""
    import redlease
    from redlease._asyncio.compat import wait_event

    async with (
        redlease.AsyncClient.from_url(server.url) as a,
        redlease.AsyncClient.from_url(server.url) as b,
    ):
        holder = a.fair_lock(name)
        assert await holder.acquire()
        for turns in range(3):
            task = asyncio.create_task(b.fair_lock(name).acquire())
            await eventually(lambda: _queued(holder, 1))
            await eventually(functools.partial(_suspended_in, task, wait_event))
            assert b._subscriber is not None
            for entry in b._subscriber._table.entries.values():
                for waiter in entry.waiters:
                    waiter.event.set()  # a wake-up (no hand-over: the lock is still held)
            for _ in range(turns):
                await asyncio.sleep(0)
            assert task.cancel()
            done, _ = await asyncio.wait({task}, timeout=30)
            assert task in done, f"the waiter cancelled {turns} turns after its wake-up waits on"
            assert task.cancelled()
            await eventually(lambda: _queued(holder, 0))
        await holder.release()
        assert await b.fair_lock(name).acquire(blocking=False)


def _suspended_in(task: asyncio.Task, function) -> bool:
    """Whether ``task`` is suspended inside ``function`` (a coroutine function)."""
    code = function.__code__
    current: object = task.get_coro()
    while current is not None:
        if getattr(current, "cr_code", None) is code:
            return True
        current = getattr(current, "cr_await", None)
    return False


async def _queued(lock, count: int) -> bool:
    return (await lock.statistics()).waiters == count
