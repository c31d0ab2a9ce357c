"""``close()`` while calls wait: every waiter stops promptly with ``ClientClosedError``, leaves
the line, gives back what was granted to it in the same instant, and the closed client starts
nothing again (no watchdog, no subscriber). Each test on a real server, sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import redlease._async.driver as async_driver
import redlease._sync.driver as sync_driver
from redlease import AsyncClient, ClientClosedError, RedleaseError
from redlease._core import codes
from redlease._core.keys import LockKeys

from .helpers import eventually


class _Call:
    """Runs ``fn()`` in a thread (sync) or a task (asyncio) and keeps its outcome."""

    def __init__(self, side: Any, fn: Any) -> None:
        self.outcome: Any = None
        self.done_at: float | None = None
        if side.is_async:
            self._task = asyncio.ensure_future(self._async(fn))
        else:
            threading.Thread(target=self._sync, args=(fn,), daemon=True).start()

    async def _async(self, fn: Any) -> None:
        try:
            self.outcome = await fn()
        except Exception as exc:
            self.outcome = exc
        self.done_at = time.monotonic()

    def _sync(self, fn: Any) -> None:
        try:
            self.outcome = fn()
        except Exception as exc:
            self.outcome = exc
        self.done_at = time.monotonic()

    async def finished(self, timeout: float) -> Any:
        await eventually(lambda: self.done_at is not None, timeout=timeout)
        return self.outcome


def _free(raw: redis.Redis, name: str) -> bool:
    """Nothing holds ``name`` on the server and nobody is in its line."""
    return not raw.exists(name) and not raw.zcard(LockKeys.for_name(name).line)


async def _queued(side: Any, lock: Any, count: int) -> None:
    async def check() -> bool:
        return (await side(lock.statistics())).waiters == count

    await eventually(check, timeout=10)


def _nothing_running(client: Any) -> bool:
    """The closed client runs no watchdog and no subscriber thread or task."""
    watchdog = client._watchdog
    if client._subscriber is not None:
        sub = client._subscriber
        task = getattr(sub, "_task", None)
        thread = getattr(sub, "_thread", None)
        if (task is not None and not task.done()) or (thread is not None and thread.is_alive()):
            return False
    if watchdog is None:
        return True
    task = getattr(watchdog, "_task", None)  # an AsyncWatchdog's
    thread = getattr(watchdog, "_thread", None)  # a Watchdog's
    return (task is None or task.done()) and (thread is None or not thread.is_alive())


async def test_close_stops_waiters_promptly(side, server, name, long_recheck):
    raw = redis.Redis.from_url(server.url)
    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire(lease=30))
    closing = side.client(server.url, watchdog_timeout=2.0)
    lock = closing.lock(name)
    waiters = [_Call(side, lock.acquire), _Call(side, lambda: lock.acquire(timeout=60))]
    await _queued(side, holder, 1)  # the head of the client's local line of two

    async def both_waiting() -> bool:
        return (await side(lock.statistics())).local_waiters == 2

    await eventually(both_waiting, timeout=10)

    started = time.monotonic()
    await side(closing.close())
    for waiter in waiters:
        outcome = await waiter.finished(timeout=30)
        assert isinstance(outcome, ClientClosedError), outcome
        assert isinstance(outcome, RedleaseError) and isinstance(outcome, RuntimeError)
        # promptly: not at a look at the holder's 30 s lease (no re-check before it under
        # long_recheck), nor at the end of a wait
        assert waiter.done_at is not None and waiter.done_at - started < long_recheck
    assert (await side(holder.statistics())).waiters == 0  # both left the line
    assert _nothing_running(closing)

    await side(holder.release())
    assert _free(raw, name)  # not handed to a waiter of the closed client
    other = side.client(server.url).lock(name)
    assert await side(other.acquire(blocking=False))
    assert _nothing_running(closing) and closing._watchdog is None
    with pytest.raises(ClientClosedError):
        await side(lock.acquire(blocking=False))
    await side(other.release())
    raw.close()


async def test_grant_as_the_client_closes_is_given_back(side, server, name, monkeypatch):
    """The acquire script granted the lock just as ``close()`` began: the caller gets
    ``ClientClosedError`` and the hold is given back at once, not left for a lease."""
    raw = redis.Redis.from_url(server.url)
    closing = side.client(server.url)
    lock = closing.lock(name)
    real = closing._call
    background: list[Any] = []

    def granted(reply: Any) -> bool:
        return isinstance(reply, list) and len(reply) == 4 and int(reply[0]) == codes.GRANTED

    call: Callable[..., Any]  # a coroutine function on the asyncio side
    if side.is_async:

        async def call(call: Any, *args: Any, **kwargs: Any) -> Any:
            reply = await real(call, *args, **kwargs)
            if granted(reply) and not closing._closed:
                background.append(asyncio.ensure_future(closing.close()))
                await eventually(lambda: closing._closed, timeout=5)
            return reply

    else:

        def call(call: Any, *args: Any, **kwargs: Any) -> Any:
            reply = real(call, *args, **kwargs)
            if granted(reply) and not closing._closed:
                thread = threading.Thread(target=closing.close, daemon=True)
                thread.start()
                background.append(thread)
                deadline = time.monotonic() + 5
                while not closing._closed and time.monotonic() < deadline:
                    time.sleep(0.001)
            return reply

    monkeypatch.setattr(closing, "_call", call)
    with pytest.raises(ClientClosedError):
        await side(lock.acquire())
    assert _free(raw, name)
    assert closing._watchdog is None
    if side.is_async:
        await asyncio.wait_for(background[0], 10)
    else:
        background[0].join(10)
    assert _nothing_running(closing)
    raw.close()


async def test_hand_over_as_the_client_closes_is_given_back(side, server, name, monkeypatch):
    """A release handed the lock to a waiter just as its client closed: the waiter gets
    ``ClientClosedError`` and the hand-over is given back (the lock is free at once)."""
    raw = redis.Redis.from_url(server.url)
    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    closing = side.client(server.url)
    lock = closing.lock(name)
    module: Any = async_driver if side.is_async else sync_driver
    real_wait = module.wait
    handed: list[Any] = []
    entered: list[bool] = []  # the waiter waits for a wake-up (not between two tries)

    wait: Callable[[Any, float], Any]  # a coroutine function on the asyncio side
    if side.is_async:

        async def wait(waiter: Any, timeout: float) -> Any:
            entered.append(True)
            woken = await real_wait(waiter, timeout)
            if not isinstance(woken, bool):
                handed.append(woken)
                handed.append(asyncio.ensure_future(closing.close()))
                await eventually(lambda: closing._closed, timeout=5)
            return woken

    else:

        def wait(waiter: Any, timeout: float) -> Any:
            entered.append(True)
            woken = real_wait(waiter, timeout)
            if not isinstance(woken, bool):
                handed.append(woken)
                thread = threading.Thread(target=closing.close, daemon=True)
                thread.start()
                handed.append(thread)
                deadline = time.monotonic() + 5
                while not closing._closed and time.monotonic() < deadline:
                    time.sleep(0.001)
            return woken

    monkeypatch.setattr(module, "wait", wait)
    waiter = _Call(side, lock.acquire)
    await _queued(side, holder, 1)
    # in line is not enough: a waiter still between its subscription and its next try (a
    # loaded machine) takes a hand-over as that try's grant, and never sees the message
    await eventually(lambda: bool(entered), timeout=10)
    await side(holder.release())
    outcome = await waiter.finished(timeout=10)
    assert handed, "the release did not hand the lock over"
    assert isinstance(outcome, ClientClosedError), outcome
    assert _free(raw, name)
    if side.is_async:
        await asyncio.wait_for(handed[1], 10)
    else:
        handed[1].join(10)
    assert _nothing_running(closing) and closing._watchdog is None
    raw.close()


async def test_close_stops_the_watchdog_as_a_renewal_ends(server, name, monkeypatch):
    """``close()`` stops the watchdog in the very turn a renewal call ends. On Python 3.10
    the renewal runs in ``asyncio.wait_for``, which then returns the call's outcome and drops
    the stop (CPython gh-86296): the watchdog went on renewing and ``close()`` waited for it
    for ever (a cluster's waiter test hung at its client's close, its nodes gone)."""
    closing = AsyncClient.from_url(server.url, watchdog_timeout=0.6)
    lock = closing.lock(name)
    real = closing._call
    background: list[asyncio.Task[Any]] = []

    async def call(call: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await real(call, *args, **kwargs)
        if call.script.name == "lock_renew" and not background:
            watchdog = closing._watchdog
            assert watchdog is not None and watchdog._task is not None  # it is renewing
            background.append(watchdog._task)
            background.append(asyncio.ensure_future(closing.close()))
            for _ in range(100_000):  # until close() has stopped the watchdog: the reply is in
                if watchdog._task is None:
                    break
                await asyncio.sleep(0)
        return reply

    monkeypatch.setattr(closing, "_call", call)
    assert await lock.acquire()
    await eventually(lambda: bool(background), timeout=10)
    renewing, closed = background
    await asyncio.wait([closed], timeout=10)
    assert closed.done(), "close() waits for a watchdog that did not stop"
    assert renewing.done() and _nothing_running(closing)
