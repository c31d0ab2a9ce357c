"""A client's own waiters for one lock wait in a local line (issue #15, goal 1): only the head
talks to the server, every waiter gets the lock in arrival order, the client keeps to a few
server connections however many wait, and a timeout, a cancellation or ``close()`` in the
local line leaves nothing behind. Each test on a private server of every binary found."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from redlease import AsyncClient, Client, ClientClosedError
from redlease._core.lock import RECHECK

from .helpers import eventually, held_by_another_thread, run_forked

MAX_CONNECTIONS = 8  # the bound for one client, pub/sub included
MEASURING = "redlease-test-measuring"
"""The client name of the test's own measuring connections, which ConnectionProbe leaves out."""


class ConnectionProbe:
    """Counts the server's client connections (its own and the test's measuring ones left out)
    from a thread of its own, every few milliseconds until stopped: the most seen at once is
    ``most``."""

    def __init__(self, url: str) -> None:
        self._raw = redis.Redis.from_url(url, single_connection_client=True)
        self._own = self._raw.client_id()
        self._stop = threading.Event()
        self.most = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def count(self) -> int:
        return sum(
            1
            for c in self._raw.client_list()
            if int(c["id"]) != self._own and c.get("name") != MEASURING
        )

    def _run(self) -> None:
        for _ in range(100_000):  # bounded: at most ~30 min of sampling
            self.most = max(self.most, self.count())
            if self._stop.wait(0.02):
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        self.most = max(self.most, self.count())
        self._raw.close()
        return self.most


class Monitor:
    """Every command the server runs, read by ``MONITOR`` on a connection of its own until a
    marker comes back: the commands of the client under test are then all in ``lines``."""

    MARKER = "redlease-test-monitor-end"

    def __init__(self, url: str) -> None:
        self._raw = redis.Redis.from_url(url)
        self._monitor = self._raw.monitor()
        self._monitor.__enter__()
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for _ in range(1_000_000):  # bounded
            command = self._monitor.next_command()["command"]
            if self.MARKER in command:
                return
            self.lines.append(command)

    def stop(self) -> list[str]:
        self._raw.echo(self.MARKER)
        self._thread.join(30)
        assert not self._thread.is_alive()
        self._monitor.__exit__(None, None, None)
        self._raw.close()
        return self.lines


def _scripts_run(url: str) -> int:
    """How many EVALSHA calls the server has run so far."""
    raw = redis.Redis.from_url(url, client_name=MEASURING)  # (not counted by ConnectionProbe)
    try:
        return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    finally:
        raw.close()


def _at_most_two_scripts_each(scripts: int, waiters: int, seconds: float) -> bool:
    """One acquire and one release per waiter (a hand-over costs one of each, however long
    the line), with a little room: turns that take one try more (2-3 % of a thousand
    threads' turns on a loaded 2-core machine: 2,032 and 2,046 scripts seen), the first
    waiter's subscribe-and-retry, and the head of the line's look every ``RECHECK`` while
    the holder keeps the lock (``seconds``: how long the run took; a loaded machine takes
    long to line a thousand threads up). Waiters that polled instead of waiting for their
    turn would cost many times this."""
    return scripts <= 2 * waiters + waiters // 20 + 10 + int(seconds / RECHECK)


def _local(client: Any, lock: Any) -> int:
    """How many of ``client``'s waiters are in ``lock``'s local line."""
    return int(client._lines.waiting(lock._line))


# --- (a) and (b): thousands of waiters through one client ---------------------------------

TASKS = 2_000
THREADS = 1_000


async def test_thousands_of_tasks_get_the_lock_in_arrival_order(private_server, name):
    probe = ConnectionProbe(private_server.url)
    called: list[int] = []
    got: list[int] = []
    inside = [0]
    overlaps: list[int] = []
    # (a watchdog lease and a hand-over window far above the run: renewals are scripts too, and
    # are not counted; a hold handed over starts with the hand-over window, 1 s by default,
    # which a holder starved a third of it on a loaded machine renews)
    async with AsyncClient.from_url(
        private_server.url, watchdog_timeout=3600, handoff_window=3600
    ) as client:
        lock = client.lock(name)

        async def one(i: int) -> None:
            called.append(i)  # nothing runs between this and joining the line
            async with lock.hold(timeout=120):
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(i)
                got.append(i)
                await asyncio.sleep(0)  # let the others run while it holds
                inside[0] -= 1

        assert await lock.acquire()
        scripts, started = _scripts_run(private_server.url), time.monotonic()
        tasks = [asyncio.create_task(one(i)) for i in range(TASKS)]
        await eventually(lambda: len(called) == TASKS, timeout=60)
        assert _local(client, lock) == TASKS
        assert (await lock.statistics()).local_waiters == TASKS
        await lock.release()
        done, _ = await asyncio.wait(tasks, timeout=120)
        assert len(done) == TASKS
        assert [t.exception() for t in tasks if t.exception() is not None] == []
        assert not overlaps
        assert got == called
        ran = _scripts_run(private_server.url) - scripts
        assert _at_most_two_scripts_each(ran, TASKS, time.monotonic() - started), ran
        assert _local(client, lock) == 0
        assert not client._lines.opened()  # the line is dropped with its last waiter
        assert not (await lock.statistics()).locked
    assert probe.stop() <= MAX_CONNECTIONS


def test_a_thousand_threads_get_the_lock_in_arrival_order(private_server, name):
    probe = ConnectionProbe(private_server.url)
    got: list[int] = []
    errors: list[BaseException] = []
    overlaps: list[int] = []
    inside = [0]
    # (a watchdog lease and a hand-over window far above the run, as above)
    with Client.from_url(private_server.url, watchdog_timeout=3600, handoff_window=3600) as client:
        lock = client.lock(name)

        def one(i: int) -> None:
            try:
                with lock.hold(timeout=120):
                    inside[0] += 1
                    if inside[0] != 1:
                        overlaps.append(i)
                    got.append(i)
                    inside[0] -= 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        assert lock.acquire()
        scripts, started = _scripts_run(private_server.url), time.monotonic()
        threads: list[threading.Thread] = []
        for i in range(THREADS):
            thread = threading.Thread(target=one, args=(i,), daemon=True)
            thread.start()
            threads.append(thread)
            # the next thread starts once this one is in line: the arrival order is 0, 1, ...
            deadline = time.monotonic() + 30
            while _local(client, lock) < i + 1:
                assert time.monotonic() < deadline, f"thread {i} did not join the line"
                time.sleep(0.001)
        assert lock.statistics().local_waiters == THREADS
        lock.release()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads)
        assert not errors, errors[:3]
        assert not overlaps
        assert got == list(range(THREADS))
        ran = _scripts_run(private_server.url) - scripts
        assert _at_most_two_scripts_each(ran, THREADS, time.monotonic() - started), ran
        assert _local(client, lock) == 0
        assert not lock.statistics().locked
    assert probe.stop() <= MAX_CONNECTIONS


# --- (c) to (f): leaving the line, and two clients -----------------------------------------


_ASYNC = SimpleNamespace(is_async=True)  # where a test runs on one side only
_SYNC = SimpleNamespace(is_async=False)


class Waiter:
    """One acquire in a task (asyncio) or a thread (sync), released as soon as it is had;
    ``outcome`` is ``True``/``False`` or the exception it raised, and ``order`` gets ``tag``
    when it holds the lock."""

    def __init__(self, side: Any, lock: Any, tag: int, order: list[int], **acquire: Any) -> None:
        self.outcome: Any = None
        self._lock, self._tag, self._order, self._acquire = lock, tag, order, acquire
        if side.is_async:
            self.task: asyncio.Task[None] | None = asyncio.ensure_future(self._async())
        else:
            self.task = None
            self._thread = threading.Thread(target=self._sync, daemon=True)
            self._thread.start()

    async def _async(self) -> None:
        try:
            got = await self._lock.acquire(**self._acquire)
            if got:
                self._order.append(self._tag)
                await self._lock.release()
            self.outcome = got
        except asyncio.CancelledError as exc:
            self.outcome = exc
            raise
        except BaseException as exc:  # reported by the test
            self.outcome = exc

    def _sync(self) -> None:
        try:
            got = self._lock.acquire(**self._acquire)
            if got:
                self._order.append(self._tag)
                self._lock.release()
            self.outcome = got
        except BaseException as exc:  # reported by the test
            self.outcome = exc

    def done(self) -> bool:
        return self.task.done() if self.task is not None else not self._thread.is_alive()


async def _joined(client: Any, lock: Any, count: int) -> None:
    await eventually(lambda: _local(client, lock) == count, timeout=30)


async def test_a_timeout_in_the_local_line_sends_nothing_and_keeps_the_order(
    side, private_server, name
):
    holder = side.client(private_server.url)
    client = side.client(private_server.url)
    events: list[Any] = []
    client.add_listener(events.append)
    lock = client.lock(name)
    assert await side(holder.lock(name).acquire())
    order: list[int] = []
    first = Waiter(side, lock, 0, order, timeout=60)
    await _joined(client, lock, 1)
    second = Waiter(side, lock, 1, order, timeout=60)
    await _joined(client, lock, 2)
    monitor = Monitor(private_server.url)
    started = time.monotonic()
    short = Waiter(side, lock, 2, order, timeout=0.3)
    await eventually(short.done, timeout=30)
    assert short.outcome is False
    assert time.monotonic() - started >= 0.3
    commands = monitor.stop()
    (failed,) = [e for e in events if e.kind == "acquire_failed"]
    assert failed.owner and not [c for c in commands if failed.owner in c]  # nothing sent
    last = Waiter(side, lock, 3, order, timeout=60)
    await _joined(client, lock, 3)  # first, second and last
    await side(holder.lock(name).release())
    await eventually(lambda: first.done() and second.done() and last.done(), timeout=30)
    assert (first.outcome, second.outcome, last.outcome) == (True, True, True)
    assert order == [0, 1, 3]
    assert _local(client, lock) == 0


CANCEL_POINTS = 40


async def test_cancelled_waiters_and_heads_leave_nothing_behind(private_server, name):
    """Cancel the head and a waiter behind it at many points (in the local line, while the
    head's call is under way, as the lock is handed over): the others get it in order, the
    lock ends free, the line empty."""
    async with (
        AsyncClient.from_url(private_server.url) as other,
        AsyncClient.from_url(private_server.url) as client,
    ):
        lock = client.lock(name)
        for point in range(CANCEL_POINTS):
            # the lock is held by this client's own task, or by another client
            holder = lock if point % 3 == 0 else other.lock(name)
            assert await holder.acquire(timeout=30), f"lock left held before point {point}"
            order: list[int] = []
            waiters = [Waiter(_ASYNC, lock, i, order, timeout=60) for i in range(4)]
            for _ in range(point % 5):
                await asyncio.sleep(0)  # step the loop: the waiters join, the head asks
            if point % 2:
                await holder.release()
            for _ in range(point // 2):
                await asyncio.sleep(0)
            for cancelled in (waiters[0], waiters[2]):
                assert cancelled.task is not None
                cancelled.task.cancel()
            if not point % 2:
                await holder.release()
            tasks = [w.task for w in waiters if w.task is not None]
            _, pending = await asyncio.wait(tasks, timeout=60)
            assert not pending, f"a waiter stuck at point {point}"
            assert (waiters[1].outcome, waiters[3].outcome) == (True, True), point
            assert order == sorted(order) and {1, 3} <= set(order), (point, order)
            assert _local(client, lock) == 0
            assert not client._lines.opened()
            await eventually(
                lambda: _not_locked(private_server.url, name), timeout=30
            )  # a grant to a cancelled waiter is given back


def _not_locked(url: str, name: str) -> bool:
    raw = redis.Redis.from_url(url)
    try:
        return not raw.exists(name)
    finally:
        raw.close()


async def test_close_ends_the_local_waiters(side, private_server, name):
    holder = side.client(private_server.url)
    client = side.client(private_server.url)
    lock = client.lock(name)
    assert await side(holder.lock(name).acquire())
    order: list[int] = []
    waiters = [Waiter(side, lock, i, order) for i in range(20)]
    await _joined(client, lock, 20)
    await side(client.close())
    await eventually(lambda: all(w.done() for w in waiters), timeout=30)
    assert all(isinstance(w.outcome, ClientClosedError) for w in waiters), [
        w.outcome for w in waiters
    ]
    assert order == []
    assert _local(client, lock) == 0
    # the head left the server's line too
    await eventually(lambda: _waiting_on_server(holder.lock(name), side), timeout=30)
    with pytest.raises(ClientClosedError):
        await side(lock.acquire(timeout=5))
    await side(holder.lock(name).release())


async def _waiting_on_server(lock: Any, side: Any) -> bool:
    return bool((await side(lock.statistics())).waiters == 0)


WAITERS_PER_CLIENT = 10


async def test_two_clients_take_turns(private_server, name):
    """Each client's local line sends one head to the server's line: the server's line,
    not one client's crowd of tasks, decides between the clients."""
    async with (
        AsyncClient.from_url(private_server.url) as first,
        AsyncClient.from_url(private_server.url) as second,
        AsyncClient.from_url(private_server.url) as holder,
    ):
        assert await holder.lock(name).acquire()
        turns: list[str] = []

        async def one(client: AsyncClient, tag: str) -> None:
            async with client.lock(name).hold(timeout=60):
                turns.append(tag)
                await asyncio.sleep(0)

        tasks = []
        for _ in range(WAITERS_PER_CLIENT):
            tasks.append(asyncio.create_task(one(first, "a")))
            tasks.append(asyncio.create_task(one(second, "b")))
        lock = holder.lock(name)
        await eventually(
            lambda: _local(first, lock) == _local(second, lock) == WAITERS_PER_CLIENT, timeout=30
        )
        await eventually(_server_waiters(lock, 2), timeout=30)  # each client's head
        await lock.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert sorted(turns) == ["a"] * WAITERS_PER_CLIENT + ["b"] * WAITERS_PER_CLIENT
        runs = "".join(turns).replace("ab", "a b").replace("ba", "b a").split()
        assert max(len(run) for run in runs) <= 2, turns


def _server_waiters(lock: Any, count: int) -> Any:
    async def check() -> bool:
        return bool((await lock.statistics()).waiters == count)

    return check


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_with_empty_lines(private_server, name):
    """Forked while threads wait in a line (and another thread holds the lines' mutex), the
    child sees no waiter of the parent's and lines up afresh."""
    with Client.from_url(private_server.url) as client:
        lock = client.lock(name)
        assert lock.acquire()
        order: list[int] = []
        waiters = [Waiter(_SYNC, lock, i, order, timeout=60) for i in range(3)]
        deadline = time.monotonic() + 30
        while _local(client, lock) != 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)

        def child() -> bool:
            other = client.lock(f"{name}:child")
            if _local(client, lock) != 0:
                return False
            got = other.acquire(timeout=5)
            other.release()
            return got and _local(client, other) == 0

        with held_by_another_thread(client._lines._mutex):
            assert run_forked(child) == 0
        lock.release()
        deadline = time.monotonic() + 30
        while not all(w.done() for w in waiters):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert order == [0, 1, 2]
