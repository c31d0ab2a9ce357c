"""The read-write lock on a real server, each behaviour on the sync and the asyncio side."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import redlease
from redlease import (
    InvalidArgumentError,
    LeaseLostError,
    LockTimeoutError,
    NotOwnedError,
    ServerUnavailableError,
)
from redlease._async.rwlock import AsyncReadLock, AsyncReadWriteLock, AsyncWriteLock
from redlease._core import rwlock as core
from redlease._sync.rwlock import ReadLock, ReadWriteLock, WriteLock
from redlease.errors import LockUpgradeError
from redlease.testing import RedisServer, TcpProxy

from .helpers import eventually, reply_scores, ttl_rises

WORKER = str(Path(__file__).with_name("rw_worker.py"))


def rw_lock(client: Any, name: str, **kwargs: Any) -> Any:
    """``client.rw_lock(name)``, or the class itself while the factory is not there yet."""
    factory = getattr(client, "rw_lock", None)
    if factory is not None:
        return factory(name, **kwargs)
    cls = AsyncReadWriteLock if isinstance(client, redlease.AsyncClient) else ReadWriteLock
    return cls(client, name, **kwargs)


class Holder:
    """Another owner: takes ``lock`` in a thread (sync) or a task (asyncio) of its own and
    keeps it until ``release()``."""

    def __init__(self, side: Any, lock: Any, **acquire: Any) -> None:
        self.side, self.lock, self.kwargs = side, lock, acquire
        self.result: bool | None = None
        self.error: BaseException | None = None
        self.at: float | None = None  # when acquire returned (monotonic)
        self._go = threading.Event()
        self._runner: Any = None

    def start(self) -> Holder:
        if self.side.is_async:
            self._runner = asyncio.ensure_future(self._run_async())
        else:
            self._runner = threading.Thread(target=self._run_sync, daemon=True)
            self._runner.start()
        return self

    def _run_sync(self) -> None:
        try:
            self.result = self.lock.acquire(**self.kwargs)
        except BaseException as exc:  # reported to the test
            self.error, self.result = exc, False
        self.at = time.monotonic()
        if self._go.wait(30) and self.result:
            self.lock.release()

    async def _run_async(self) -> None:
        try:
            self.result = await self.lock.acquire(**self.kwargs)
        except Exception as exc:  # reported to the test
            self.error, self.result = exc, False
        self.at = time.monotonic()
        for _ in range(3000):  # bounded: 30 s
            if self._go.is_set():
                break
            await asyncio.sleep(0.01)
        if self.result:
            await self.lock.release()

    async def returned(self, timeout: float = 10.0) -> bool:
        await eventually(lambda: self.result is not None, timeout)
        assert self.result is not None
        return self.result

    async def release(self) -> None:
        self._go.set()
        if self.side.is_async:
            await asyncio.wait_for(self._runner, 10)
        else:
            await asyncio.to_thread(self._runner.join, 10)
            assert not self._runner.is_alive()


# --- the basics -----------------------------------------------------------------------------


async def test_read_and_write_basics(side, server, name):
    client = side.client(server.url)
    rw = rw_lock(client, name)
    read, write = rw.read_lock(), rw.write_lock()
    assert rw.read_lock() is read and rw.write_lock() is write
    assert rw.name == name and read.name == f"{name} (read)" and write.name == f"{name} (write)"
    assert name in repr(rw) and name in repr(read)
    assert not await side(read.locked()) and not await side(write.locked())
    assert await side(read.ttl()) is None and await side(write.ttl()) is None

    assert await side(read.acquire(lease=10))
    assert await side(read.acquire())  # re-entry
    assert await side(read.hold_count()) == 2 and await side(read.owned())
    assert 5 < await side(read.ttl()) <= 30  # (room for a loaded machine)
    assert await side(read.locked()) and not await side(write.locked())
    stats = await side(read.statistics())
    assert stats.hold_count == 2 and stats.locked and stats.owned
    assert stats.fencing_token == read.fencing_token and stats.fencing_token > 0
    await side(read.release())
    await side(read.release())
    assert not await side(read.locked()) and read.fencing_token is None

    async with side.hold(write, timeout=5, lease=10) as lease:
        assert lease.name == write.name and lease.hold_count == 1 and lease.lease == 10
        assert await side(write.owned()) and 9 < await side(write.ttl()) <= 10
        assert await side(write.acquire(blocking=False))  # re-entry
        assert await side(write.hold_count()) == 2
        assert write.fencing_token == lease.fencing_token > stats.fencing_token
        await side(write.release())
    assert not await side(write.locked())
    with pytest.raises(NotOwnedError):
        await side(write.release())
    with pytest.raises(NotOwnedError):
        await side(read.release())


async def test_readers_share_and_a_writer_excludes_them(side, server, name):
    a = rw_lock(side.client(server.url), name)
    b = rw_lock(side.client(server.url), name)
    assert await side(a.read_lock().acquire())
    assert await side(b.read_lock().acquire(blocking=False))  # a second reader
    assert len((await side(a.read_lock().statistics())).holders) == 2
    c = rw_lock(side.client(server.url), name)
    assert not await side(c.write_lock().acquire(blocking=False))
    await side(a.read_lock().release())
    with pytest.raises(LockUpgradeError):  # b itself reads
        await side(b.write_lock().acquire(blocking=False))
    await side(b.read_lock().release())
    assert await side(b.write_lock().acquire(blocking=False))
    assert not await side(a.read_lock().acquire(blocking=False))
    assert not await side(a.write_lock().acquire(blocking=False))
    await side(b.write_lock().release())
    assert await side(a.write_lock().acquire(blocking=False))
    await side(a.write_lock().release())


async def test_upgrade_raises_instead_of_deadlocking(side, server, name):
    client = side.client(server.url)
    rw = rw_lock(client, name)
    assert await side(rw.read_lock().acquire())
    for kwargs in ({}, {"blocking": False}, {"timeout": 30}):
        started = time.monotonic()
        with pytest.raises(LockUpgradeError) as info:
            await side(rw.write_lock().acquire(**kwargs))
        assert time.monotonic() - started < 10  # at once, not after a (30 s or endless) wait
        assert isinstance(info.value, RuntimeError)
        assert "release the read lock first" in str(info.value)
    assert await side(rw.read_lock().hold_count()) == 1  # the read hold is intact
    await side(rw.read_lock().release())
    assert await side(rw.write_lock().acquire(blocking=False))
    await side(rw.write_lock().release())


async def test_downgrade_write_to_read(side, server, name):
    rw = rw_lock(side.client(server.url), name)
    other = rw_lock(side.client(server.url), name)
    assert await side(rw.write_lock().acquire())
    assert await side(rw.read_lock().acquire(blocking=False))  # the writer may read
    assert not await side(other.read_lock().acquire(blocking=False))
    await side(rw.write_lock().release())  # downgraded: now only a reader
    assert await side(rw.read_lock().owned()) and not await side(rw.write_lock().locked())
    assert await side(other.read_lock().acquire(blocking=False))  # readers share again
    third = rw_lock(side.client(server.url), name)
    assert not await side(third.write_lock().acquire(blocking=False))
    await side(other.read_lock().release())
    await side(rw.read_lock().release())
    assert not await side(rw.read_lock().locked())


async def test_release_wakes_a_waiting_writer_at_once(side, server, name):
    rw = rw_lock(side.client(server.url), name)
    assert await side(rw.read_lock().acquire())
    writer = Holder(side, rw_lock(side.client(server.url), name).write_lock(), timeout=20)
    writer.start()
    await eventually(lambda: _waiters(server.url, name) == 1)
    released = time.monotonic()
    await side(rw.read_lock().release())
    assert await writer.returned()
    assert writer.at is not None and writer.at - released < 1.0  # woken, not a re-check
    await writer.release()


def _waiters(url: str, name: str) -> int:
    raw = redis.Redis.from_url(url)
    try:
        now_ms = int(time.time() * 1000)
        return int(raw.zcount(core.RwKeys.for_name(name).places, now_ms, "+inf"))
    finally:
        raw.close()


async def test_writer_preference_new_readers_wait_for_a_waiting_writer(side, server, name):
    first = rw_lock(side.client(server.url), name)
    late = rw_lock(side.client(server.url), name)
    assert await side(first.read_lock().acquire())
    writer = Holder(side, rw_lock(side.client(server.url), name).write_lock(), timeout=20)
    writer.start()
    await eventually(lambda: _waiters(server.url, name) == 1)
    assert (await side(first.write_lock().statistics())).waiters == 1
    assert not await side(late.read_lock().acquire(blocking=False))  # the writer goes first
    assert await side(first.read_lock().acquire(blocking=False))  # a re-entry does not wait
    reader = Holder(side, late.read_lock(), timeout=20).start()
    await side(first.read_lock().release())
    await side(first.read_lock().release())
    assert await writer.returned()
    assert not await side(late.read_lock().locked())  # the reader still waits
    await writer.release()
    assert await reader.returned()  # woken by the writer's release
    assert reader.at is not None and writer.at is not None and reader.at > writer.at
    await reader.release()


async def test_writers_are_served_in_arrival_order(side, server, name):
    holder = rw_lock(side.client(server.url), name)
    assert await side(holder.write_lock().acquire())
    writers = []
    for i in range(3):
        w = Holder(side, rw_lock(side.client(server.url), name).write_lock(), timeout=20)
        writers.append(w.start())

        def waiting(i: int = i) -> bool:
            return _waiters(server.url, name) == i + 1

        await eventually(waiting)
    await side(holder.write_lock().release())
    for w in writers:
        assert await w.returned()
        assert all(o.result is None for o in writers[writers.index(w) + 1 :])
        await w.release()
    assert [w.at for w in writers] == sorted(w.at for w in writers)  # type: ignore[type-var]


async def test_a_writer_that_gives_up_lets_readers_in(side, server, name):
    rw = rw_lock(side.client(server.url), name)
    assert await side(rw.read_lock().acquire())
    reader = rw_lock(side.client(server.url), name).read_lock()
    quitter = rw_lock(side.client(server.url), name).write_lock()
    started = time.monotonic()
    assert not await side(quitter.acquire(timeout=0.3))
    assert 0.3 <= time.monotonic() - started < 10  # (room for a loaded machine)
    assert _waiters(server.url, name) == 0  # it left the line
    assert await side(reader.acquire(blocking=False))
    await side(reader.release())
    await side(rw.read_lock().release())


# --- many owners at once ----------------------------------------------------------------------


async def test_many_readers_and_writers_keep_the_invariant(side, server, name):
    """Readers overlap, a writer is alone: checked with counters by 5 readers and 2 writers
    (threads or tasks) on two clients."""
    clients = [side.client(server.url), side.client(server.url)]
    state = {"readers": 0, "writers": 0, "max_readers": 0, "violations": 0, "writes": 0}
    mutex = threading.Lock()

    def enter(kind: str) -> None:
        with mutex:
            state[kind] += 1
            state["max_readers"] = max(state["max_readers"], state["readers"])
            if state["writers"] > 1 or (state["writers"] and state["readers"]):
                state["violations"] += 1

    def leave(kind: str) -> None:
        with mutex:
            state[kind] -= 1
            state["writes"] += kind == "writers"

    rounds = {"readers": 25, "writers": 10}
    jobs = [("readers", i % 2) for i in range(5)] + [("writers", i % 2) for i in range(2)]
    if side.is_async:

        async def work(kind: str, c: int) -> None:
            rw = rw_lock(clients[c], name)
            lock = rw.read_lock() if kind == "readers" else rw.write_lock()
            for _ in range(rounds[kind]):
                async with lock:
                    enter(kind)
                    await asyncio.sleep(random.random() * 0.004)
                    leave(kind)

        await asyncio.wait_for(asyncio.gather(*(work(k, c) for k, c in jobs)), 60)
    else:

        def work_sync(kind: str, c: int) -> None:
            rw = rw_lock(clients[c], name)
            lock = rw.read_lock() if kind == "readers" else rw.write_lock()
            for _ in range(rounds[kind]):
                with lock:
                    enter(kind)
                    time.sleep(random.random() * 0.004)
                    leave(kind)

        threads = [threading.Thread(target=work_sync, args=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            await asyncio.to_thread(t.join, 60)
        assert not any(t.is_alive() for t in threads)
    assert state["violations"] == 0
    assert state["writes"] == 20
    assert state["max_readers"] > 1  # readers did overlap
    assert not await side(rw_lock(clients[0], name).read_lock().locked())


# --- leases, crashes, cancellation ------------------------------------------------------------


async def test_watchdog_renews_read_and_write_holds(side, server, name):
    # a 2 s lease, renewed every 2/3 s (each call bounded by that): a renewal late by up to
    # 1.3 s on a loaded 2-core machine still lands within the lease (1.2 s left 0.8 s)
    client = side.client(server.url, watchdog_timeout=2)
    rw = rw_lock(client, name)
    assert await side(rw.write_lock().acquire())
    assert await side(rw.read_lock().acquire())
    keys = core.RwKeys.for_name(name)
    raw = redis.Redis.from_url(server.url)
    rises = {key: ttl_rises(raw, key) for key in (keys.writer, keys.readers)}
    seen = dict.fromkeys(rises, 0)
    # both sides renewed 7 times, a third of a lease apart: more than two leases (waited for,
    # not slept through), both holds owned all along
    deadline = time.monotonic() + 60
    while min(seen.values()) < 7:
        assert time.monotonic() < deadline, f"renewals seen within 60 s: {seen}"
        assert await side(rw.write_lock().owned()) and await side(rw.read_lock().owned())
        await asyncio.sleep(0.1)
        for key, rose in rises.items():
            seen[key] += rose()
    raw.close()
    assert not rw.write_lock().lease_lost and not rw.read_lock().lease_lost
    await side(rw.read_lock().release())
    await side(rw.write_lock().release())


async def test_a_lease_runs_out_and_release_reports_it(side, server, name, long_recheck):
    rw = rw_lock(side.client(server.url), name)
    other = rw_lock(side.client(server.url), name)
    assert await side(rw.write_lock().acquire(lease=0.3))
    started = time.monotonic()
    assert await side(other.read_lock().acquire(timeout=30))  # after the writer's lease
    # told by the writer's TTL when to look: not at a re-check (none within its 30 s under
    # long_recheck) nor at the end of its wait
    assert time.monotonic() - started < long_recheck
    with pytest.raises(LeaseLostError):
        await side(rw.write_lock().release())
    await side(other.read_lock().release())


async def test_force_release_is_reported_as_a_lost_lease(side, server, name):
    lost: list[LeaseLostError] = []
    # 3 s: the read hold must still be there when it is forced (with 0.6 s it had run out
    # under load: force_release() found nothing); the loss is then heard (at the latest at
    # the watchdog's next round, every second; 20 s of room for a loaded machine)
    client = side.client(server.url, watchdog_timeout=3)
    rw = rw_lock(client, name, on_lease_lost=lost.append)
    assert await side(rw.read_lock().acquire())
    admin = rw_lock(side.client(server.url), name)
    assert await side(admin.read_lock().force_release())
    assert not await side(admin.read_lock().force_release())  # nothing left
    await eventually(lambda: lost, 20)
    assert lost[0].name == rw.read_lock().name and rw.read_lock().lease_lost
    with pytest.raises(LeaseLostError):
        await side(rw.read_lock().release())
    assert await side(rw.write_lock().acquire(blocking=False))
    assert await side(admin.write_lock().force_release())
    assert not await side(rw.write_lock().locked())


async def test_a_killed_reader_frees_its_share_within_its_lease(side, server, name):
    """A reader killed with SIGKILL: its share lapses by its own lease, never renewed by the
    other reader's watchdog (which renews its own share all along). Checked on the server's
    lease ends, not on the clock: the killed reader's lease end rises at most once after the
    kill (a renewal it had already sent), and its share goes."""
    # leases of 2 s (renewed every 0.67 s, three rounds of the keeper's within the killed
    # reader's lease): with 1 s each renewal call was bounded by 0.33 s, tight under load
    keeper = rw_lock(side.client(server.url, watchdog_timeout=2.0), name)
    assert await side(keeper.read_lock().acquire())  # a live reader, renewed all along
    proc = subprocess.Popen(
        [sys.executable, WORKER, side.kind, server.url, name, "2.0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        assert line.strip() == "held"
        readers = set((await side(keeper.read_lock().statistics())).holders)
        assert len(readers) == 2
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()

    raw = redis.Redis(port=server.port)
    leases = core.RwKeys.for_name(name).leases
    ends: dict[str, list[float]] = {reader: [] for reader in readers}  # as the server has them

    async def one_reader_left() -> bool:
        for reader, end in reply_scores(raw.zrange(leases, 0, -1, withscores=True)):
            ends.setdefault(reader.decode(), []).append(end)
        return len((await side(keeper.read_lock().statistics())).holders) == 1

    try:
        await eventually(one_reader_left, 20)  # (its lease is 2 s)
    finally:
        raw.close()
    (killed,) = readers - set((await side(keeper.read_lock().statistics())).holders)
    seen = ends[killed]
    rises = sum(later > earlier for earlier, later in itertools.pairwise(seen))
    assert rises <= 1, f"the killed reader's lease was renewed after the kill: {seen}"
    assert await side(keeper.read_lock().owned())
    writer = rw_lock(side.client(server.url), name).write_lock()
    await side(keeper.read_lock().release())
    assert await side(writer.acquire(blocking=False))
    await side(writer.release())


async def test_cancelled_acquires_leave_nothing_held(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        rw = rw_lock(client, name)
        blocker = rw_lock(client, name)

        async def hold_write(ready: asyncio.Event, done: asyncio.Event) -> None:
            async with blocker.write_lock():
                ready.set()
                await asyncio.wait_for(done.wait(), 20)

        ready, done = asyncio.Event(), asyncio.Event()
        holding = asyncio.create_task(hold_write(ready, done))
        await asyncio.wait_for(ready.wait(), 5)
        for lock in (rw.write_lock(), rw.read_lock()):
            task = asyncio.create_task(lock.acquire())
            if lock is rw.write_lock():
                await eventually(lambda: _waiters(server.url, name) == 1)
            else:
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert _waiters(server.url, name) == 0  # a cancelled writer left the line
        done.set()
        await asyncio.wait_for(holding, 5)

        # cancelled at random points of an uncontended acquire (a grant is given back) or of
        # the release that follows it (which still completes)
        async def take_and_give_back(lock: Any) -> None:
            if await lock.acquire():
                await lock.release()

        for i in range(30):
            lock = rw.write_lock() if i % 2 else rw.read_lock()
            task = asyncio.create_task(take_and_give_back(lock))
            await asyncio.sleep(random.random() * 0.003)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert _nothing_held(server.url, name)


def _nothing_held(url: str, name: str) -> bool:
    keys = core.RwKeys.for_name(name)
    raw = redis.Redis.from_url(url)
    try:
        now_ms = int(time.time() * 1000)
        return raw.exists(keys.writer) == 0 and raw.zcount(keys.leases, now_ms, "+inf") == 0
    finally:
        raw.close()


# --- lost replies and holds gone on the server (issue #11) -----------------------------------


@contextlib.contextmanager
def _proxied(server: RedisServer) -> Any:
    """A proxy to ``server`` whose dropped replies are the rw scripts' own (they are loaded
    first, so no NOSCRIPT round trip takes the drop)."""
    raw = redis.Redis.from_url(server.url)
    for script in core.SCRIPTS:
        raw.script_load(script.source)
    raw.close()
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        yield proxy


def _lose_replies(proxy: TcpProxy, script: Any) -> None:
    """The next call of ``script`` runs on the server, and both its replies are lost (a call
    is sent at most twice), so the caller raises ``ServerUnavailableError``."""
    for _ in range(2):
        proxy.drop_next_reply(script.sha.encode())


def _server_holds(url: str, name: str) -> tuple[str | None, int, dict[str, int]]:
    """(writer, write count, {reader: count}) as the server has them, live holds only."""
    keys = core.RwKeys.for_name(name)
    raw = redis.Redis.from_url(url)
    try:
        raw.script_load(core.RW_STATUS.source)  # a test run alone: nothing else has loaded it
        status = core.parse_status(
            raw.evalsha(
                core.RW_STATUS.sha,
                5,
                keys.writer,
                keys.readers,
                keys.leases,
                keys.tokens,
                keys.places,
                "nobody",
            )
        )
    finally:
        raw.close()
    return status.writer, status.write_count, status.readers


@pytest.mark.parametrize("lost", [core.READ, core.WRITE])
async def test_a_retried_release_is_recognised_after_the_other_sides_final_release(
    side, server, name, lost
):
    """#11 defect 7: each side keeps its own release receipt per owner. A read (or, after a
    downgrade, a write) release whose replies were lost ran on the server; the other side's
    final release follows; the retried release is recognised as the one that ran instead of
    raising ``LeaseLostError``."""
    with _proxied(server) as proxy:
        client = side.client(proxy.url)
        rw = rw_lock(client, name)
        read, write = rw.read_lock(), rw.write_lock()
        assert await side(write.acquire())
        assert await side(read.acquire())  # the writer reads too
        first, other = (read, write) if lost == core.READ else (write, read)
        _lose_replies(proxy, core.RW_READ_RELEASE if lost == core.READ else core.RW_WRITE_RELEASE)
        with pytest.raises(ServerUnavailableError):
            await side(first.release())
        await side(other.release())  # final on its side: leaves its receipt
        await side(first.release())  # the retry: it ran, so it succeeds
        assert not first.lease_lost and not other.lease_lost
        assert await side(first.hold_count()) == 0 and await side(other.hold_count()) == 0
        assert _server_holds(server.url, name) == (None, 0, {})
        with pytest.raises(NotOwnedError):  # nothing more to release
            await side(first.release())
        await side(client.close())


@pytest.mark.parametrize("which", [core.READ, core.WRITE])
async def test_a_reentry_whose_replies_were_lost_then_release_frees_the_lock(
    side, server, name, which
):
    """#11 defect 2 on the read-write lock: a re-entrant acquire whose replies were lost (it
    was counted on the server) raises; ``release()`` then gives back that hold too, with no
    false ``LeaseLostError``, and the lock is free for the others at once."""
    with _proxied(server) as proxy:
        client = side.client(proxy.url)
        lock = getattr(rw_lock(client, name), f"{which}_lock")()
        assert await side(lock.acquire())
        _lose_replies(proxy, core.RW_READ_ACQUIRE if which == core.READ else core.RW_WRITE_ACQUIRE)
        with pytest.raises(ServerUnavailableError):
            await side(lock.acquire())
        await side(lock.release())
        assert not lock.lease_lost
        assert _server_holds(server.url, name) == (None, 0, {})
        other = rw_lock(side.client(server.url), name).write_lock()
        assert await side(other.acquire(blocking=False))
        await side(other.release())
        await side(client.close())


async def test_an_expired_read_hold_neither_blocks_an_upgrade_nor_a_new_read(side, server, name):
    """#11 defect 4, read side: a read hold whose explicit lease ran out is gone; its owner
    takes the write lock (no ``LockUpgradeError``) or the read lock again (no
    ``LeaseLostError``), as Redisson does."""
    rw = rw_lock(side.client(server.url), name)
    read, write = rw.read_lock(), rw.write_lock()
    for then in (write, read):
        assert await side(read.acquire(lease=0.3))
        await eventually(lambda: _server_holds(server.url, name) == (None, 0, {}), 5)
        assert not await side(read.owned()) and await side(read.hold_count()) == 0
        assert await side(then.acquire(blocking=False))
        assert await side(then.hold_count()) == 1
        await side(then.release())
        assert _server_holds(server.url, name) == (None, 0, {})
    assert not read.lease_lost  # an explicit lease that ran out was not "lost"


async def test_a_force_released_read_hold_does_not_block_an_upgrade(side, server, name):
    """#11 defect 4, read side: after a force release its owner holds nothing, so its write
    acquire is granted; the read hold it had is reported gone at its release."""
    rw = rw_lock(side.client(server.url), name)
    read, write = rw.read_lock(), rw.write_lock()
    assert await side(read.acquire(lease=30))
    admin = rw_lock(side.client(server.url), name)
    assert await side(admin.read_lock().force_release())
    assert await side(write.acquire(blocking=False))
    writer, count, readers = _server_holds(server.url, name)
    assert (count, readers) == (1, {}) and writer is not None
    await side(write.release())
    with pytest.raises(LeaseLostError):  # the truth: that read hold was taken away
        await side(read.release())
    # while a read hold is live the upgrade is still refused, by the server
    assert await side(read.acquire())
    with pytest.raises(LockUpgradeError):
        await side(write.acquire(timeout=1))
    await side(read.release())


async def test_an_expired_write_hold_is_taken_afresh(side, server, name):
    """#11 defect 4, write side: ``acquire(lease=...)`` without ``release()``, the lease runs
    out, and the same owner simply takes the write lock again."""
    write = rw_lock(side.client(server.url), name).write_lock()
    assert await side(write.acquire(lease=0.3))
    await eventually(lambda: _server_holds(server.url, name) == (None, 0, {}), 5)
    assert await side(write.acquire(timeout=1))
    assert await side(write.hold_count()) == 1
    await side(write.release())
    assert _server_holds(server.url, name) == (None, 0, {})


# --- API and arguments ------------------------------------------------------------------------


def test_sides_have_the_plain_lock_api_and_sync_matches_async():
    def api(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    def params(fn: Any) -> list[str]:
        return list(inspect.signature(fn).parameters)

    for side_cls, lock_cls in (
        (ReadLock, redlease.Lock),
        (WriteLock, redlease.Lock),
        (AsyncReadLock, redlease.AsyncLock),
        (AsyncWriteLock, redlease.AsyncLock),
    ):
        assert api(lock_cls) <= api(side_cls), api(lock_cls) - api(side_cls)
        for attr in api(lock_cls):
            if callable(getattr(lock_cls, attr)):
                assert params(getattr(side_cls, attr)) == params(getattr(lock_cls, attr)), attr
    for sync_cls, async_cls in (
        (ReadWriteLock, AsyncReadWriteLock),
        (ReadLock, AsyncReadLock),
        (WriteLock, AsyncWriteLock),
    ):
        assert api(sync_cls) == api(async_cls), api(sync_cls) ^ api(async_cls)
        for attr in api(sync_cls):
            s, a = getattr(sync_cls, attr), getattr(async_cls, attr)
            if callable(s):
                assert params(s) == params(a), (sync_cls.__name__, attr)


async def test_bad_arguments(side, server, name):
    client = side.client(server.url)
    for bad in ("", None, 42, "a}b{"):
        with pytest.raises(InvalidArgumentError):
            rw_lock(client, bad)  # type: ignore[arg-type]  # wrong on purpose
    for bad_lease in (0, -1, float("nan"), "10", True):
        with pytest.raises(InvalidArgumentError):
            rw_lock(client, name, lease=bad_lease)
    rw = rw_lock(client, name)
    for lock in (rw.read_lock(), rw.write_lock()):
        with pytest.raises(InvalidArgumentError):
            await side(lock.acquire(lease=0))
        with pytest.raises(InvalidArgumentError):
            await side(lock.acquire(timeout=-1))
        with pytest.raises(InvalidArgumentError):
            await side(lock.acquire(blocking=False, timeout=1))
        with pytest.raises(NotOwnedError):
            await side(lock.release())
        with pytest.raises(InvalidArgumentError):
            async with side.hold(lock, timeout=-1):
                pass
    assert not await side(rw.read_lock().locked())


async def test_hold_raises_lock_timeout_error(side, server, name):
    holder = rw_lock(side.client(server.url), name)
    assert await side(holder.write_lock().acquire())
    rw = rw_lock(side.client(server.url), name)
    with pytest.raises(LockTimeoutError) as info:
        async with side.hold(rw.read_lock(), timeout=0.2):
            pass
    assert "read lock" in str(info.value)
    await side(holder.write_lock().release())


# --- the server-side rules, against a model ---------------------------------------------------

OWNERS = ("c:1", "c:2", "c:3")


class RwModel(RuleBasedStateMachine):
    """The scripts, called directly with long leases, against a model of the rules: readers
    share, a writer is alone (its own reads aside), re-entry on both sides, upgrade refused,
    writers in line go first, retried requests count once; a first acquire takes an owner's
    hold as its retry only if it was made for that very call (wait id), else re-leases it
    with a fresh token; a call that gives up gives back only a hold made for it; a re-entry,
    a release or a renewal naming another token than the hold's acts on nothing."""

    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.raw = redis.Redis.from_url(self.url)
        self.keys = core.RwKeys.for_name(f"model:{uuid.uuid4().hex[:10]}")
        self.writer: str | None = None
        self.write_count = 0
        self.readers: dict[str, int] = {}
        self.line: list[str] = []
        self.waits: dict[tuple[str, str], str] = {}  # (side, owner) -> its first hold's call
        self.tokens: dict[tuple[str, str], int] = {}  # (side, owner) -> its hold's token
        self.last_token = 0

    def token_is_new(self, token: int) -> None:
        assert token > self.last_token
        self.last_token = token

    def teardown(self) -> None:
        self.raw.close()

    def run(self, call: Any) -> list[int]:
        reply = self.raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        return [int(v) for v in reply] if isinstance(reply, list) else [int(reply)]

    @rule(owner=st.sampled_from(OWNERS), retry=st.booleans())
    def read(self, owner: str, retry: bool) -> None:
        held = self.readers.get(owner, 0)
        wait = uuid.uuid4().hex
        token = self.tokens.get((core.READ, owner), 0) if held else 0
        call = core.acquire_call(self.keys, core.READ, owner, held, 60.0, False, wait, token=token)
        reply = self.run(call)
        if held:
            expect = core.GRANTED
        elif self.writer not in (None, owner) or (self.writer != owner and self.line):
            expect = core.HELD
        else:
            expect = core.GRANTED
        assert reply[0] == expect, (reply, self.writer, self.readers, self.line)
        if expect == core.GRANTED:
            self.readers[owner] = held + 1
            assert reply[1] == held + 1
            if not held:
                self.token_is_new(reply[3])
                self.waits[(core.READ, owner)] = wait
                self.tokens[(core.READ, owner)] = reply[3]
            assert reply[3] == self.tokens[(core.READ, owner)]
            if retry:  # the reply was lost; the same request again
                assert self.run(call)[:2] == [core.GRANTED, held + 1]

    @rule(owner=st.sampled_from(OWNERS), join_line=st.booleans(), retry=st.booleans())
    def write(self, owner: str, join_line: bool, retry: bool) -> None:
        held = self.write_count if self.writer == owner else 0
        wait = uuid.uuid4().hex
        token = self.tokens.get((core.WRITE, owner), 0) if held else 0
        call = core.acquire_call(
            self.keys, core.WRITE, owner, held, 60.0, join_line, wait, token=token
        )
        reply = self.run(call)
        others_read = any(o != owner for o in self.readers)
        if held:
            expect = core.GRANTED
        elif self.readers.get(owner):
            expect = core.UPGRADE
        elif self.writer is not None or others_read or (self.line and self.line[0] != owner):
            expect = core.HELD
        else:
            expect = core.GRANTED
        assert reply[0] == expect, (reply, owner, self.writer, self.readers, self.line)
        if expect == core.GRANTED:
            self.writer, self.write_count = owner, held + 1
            if owner in self.line:
                self.line.remove(owner)
            if not held:
                self.token_is_new(reply[3])
                self.waits[(core.WRITE, owner)] = wait
                self.tokens[(core.WRITE, owner)] = reply[3]
            assert reply[3] == self.tokens[(core.WRITE, owner)]
            if retry:
                assert self.run(call)[:2] == [core.GRANTED, held + 1]
        elif expect == core.HELD and join_line and owner not in self.line:
            self.line.append(owner)

    @precondition(lambda self: self.readers)
    @rule(data=st.data(), retry=st.booleans())
    def read_release(self, data: Any, retry: bool) -> None:
        owner = data.draw(st.sampled_from(sorted(self.readers)))
        held = self.readers[owner]
        token = self.tokens[(core.READ, owner)]
        call = core.release_call(
            self.keys, core.READ, owner, held, request_id=uuid.uuid4().hex, token=token
        )
        assert self.run(call) == [core.RELEASED, held - 1]
        if retry:
            assert self.run(call) == [core.RELEASED, held - 1]
        if held == 1:
            del self.readers[owner]
        else:
            self.readers[owner] = held - 1

    @precondition(lambda self: self.writer is not None)
    @rule(retry=st.booleans())
    def write_release(self, retry: bool) -> None:
        assert self.writer is not None
        held = self.write_count
        rid = uuid.uuid4().hex
        token = self.tokens[(core.WRITE, self.writer)]
        call = core.release_call(
            self.keys, core.WRITE, self.writer, held, request_id=rid, token=token
        )
        assert self.run(call) == [core.RELEASED, held - 1]
        if retry:
            assert self.run(call) == [core.RELEASED, held - 1]
        self.write_count -= 1
        if not self.write_count:
            self.writer = None

    @precondition(lambda self: self.line)
    @rule(data=st.data())
    def leave(self, data: Any) -> None:
        owner = data.draw(st.sampled_from(self.line))
        leave = core.leave_call(self.keys, core.WRITE, owner, uuid.uuid4().hex)
        assert self.run(leave) == [0]  # in line: no hold to give back
        self.line.remove(owner)

    def holds(self, side: str, owner: str) -> int:
        if side == core.READ:
            return self.readers.get(owner, 0)
        return self.write_count if self.writer == owner else 0

    @precondition(lambda self: self.readers or self.writer)
    @rule(data=st.data(), side=st.sampled_from(core.SIDES), retry=st.booleans())
    def another_call_finds_the_owners_hold(self, data: Any, side: str, retry: bool) -> None:
        """A first acquire of an owner that holds (an earlier call gave up and could not give
        its hold back): not its retry, so the hold is re-leased to it with a fresh token."""
        holders = sorted(self.readers) if side == core.READ else [self.writer]
        owner = data.draw(st.sampled_from([h for h in holders if h is not None] or ["c:1"]))
        if not self.holds(side, owner):
            return
        wait = uuid.uuid4().hex
        call = core.acquire_call(self.keys, side, owner, 0, 60.0, False, wait)
        reply = self.run(call)
        assert reply[:3] == [core.GRANTED, 1, 60_000], reply
        self.token_is_new(reply[3])
        if retry:  # this call's own retry: the same hold, the same token
            again = self.run(call)
            assert again[:2] == [core.GRANTED, 1] and again[3] == reply[3]
        self.waits[(side, owner)] = wait
        self.tokens[(side, owner)] = reply[3]
        if side == core.READ:
            self.readers[owner] = 1
        else:
            self.write_count = 1

    @precondition(lambda self: self.readers or self.writer)
    @rule(data=st.data(), side=st.sampled_from(core.SIDES), what=st.integers(0, 2))
    def another_token_acts_on_nothing(self, data: Any, side: str, what: int) -> None:
        """A re-entry (0), a release (1) or a renewal (2) naming another token than the
        owner's hold has (as the owner of a stale copy after a failover would): LOST (count
        0) or not renewed, and nothing changes."""
        holders = sorted(self.readers) if side == core.READ else [self.writer]
        owner = data.draw(st.sampled_from([h for h in holders if h is not None] or ["c:1"]))
        held = self.holds(side, owner)
        if not held:
            return
        other = self.tokens[(side, owner)] - data.draw(st.sampled_from([1, -1]))
        if what == 0:
            call = core.acquire_call(
                self.keys, side, owner, held, 60.0, False, uuid.uuid4().hex, token=other
            )
            assert self.run(call)[:2] == [core.LOST, 0]
        elif what == 1:
            rid = uuid.uuid4().hex
            call = core.release_call(self.keys, side, owner, held, request_id=rid, token=other)
            assert self.run(call) == [core.LOST, 0]
        else:
            renew = self.keys.side_keys(side).renew_call([owner], 90_000, None, tokens=[other])
            assert self.run(renew) == [0]

    @precondition(lambda self: self.readers or self.writer)
    @rule(data=st.data(), side=st.sampled_from(core.SIDES), own=st.booleans())
    def a_call_gives_up(self, data: Any, side: str, own: bool) -> None:
        """A call gives up after a reply it could not read: only a first hold made for that
        very call goes back (``own``), never a hold made for another call of the owner."""
        owner = data.draw(st.sampled_from(OWNERS))
        made_for = self.waits.get((side, owner))
        wait = made_for if own and made_for is not None else uuid.uuid4().hex
        gives_back = self.holds(side, owner) == 1 and wait == made_for
        assert self.run(core.leave_call(self.keys, side, owner, wait)) == [int(gives_back)]
        if side == core.WRITE and owner in self.line:
            self.line.remove(owner)
        if gives_back:
            del self.tokens[(side, owner)]
            if side == core.READ:
                del self.readers[owner]
            else:
                self.writer, self.write_count = None, 0

    @rule(owner=st.sampled_from(OWNERS))
    def release_without_hold_is_lost(self, owner: str) -> None:
        if owner not in self.readers:
            call = core.release_call(self.keys, core.READ, owner, 1, request_id="x", token=1)
            assert self.run(call)[0] == core.LOST

    @invariant()
    def server_agrees(self) -> None:
        status = core.parse_status(
            self.raw.evalsha(
                core.RW_STATUS.sha,
                5,
                self.keys.writer,
                self.keys.readers,
                self.keys.leases,
                self.keys.tokens,
                self.keys.places,
                "nobody",
            )
        )
        assert status.writer == self.writer and status.write_count == self.write_count
        assert status.readers == self.readers
        assert status.waiters == len(self.line)
        if status.writer is not None:  # a writer is alone, its own read holds aside
            assert set(status.readers) <= {status.writer}


def test_scripts_follow_the_rules(server: RedisServer) -> None:
    raw = redis.Redis.from_url(server.url)
    for script in core.SCRIPTS:
        raw.script_load(script.source)
    raw.close()
    RwModel.url = server.url
    RwModel.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    RwModel.TestCase().runTest()


@pytest.mark.parametrize("which", [core.READ, core.WRITE])
async def test_a_first_acquire_whose_replies_were_lost_strands_nothing(side, server, name, which):
    """The server granted it and every reply was lost: the caller is told it failed, and the
    hold made for it is given back at once, not left to block the other side for a lease."""
    with _proxied(server) as proxy:
        client = side.client(proxy.url)
        rw = rw_lock(client, name)
        lock = rw.read_lock() if which == core.READ else rw.write_lock()
        _lose_replies(proxy, core.RW_READ_ACQUIRE if which == core.READ else core.RW_WRITE_ACQUIRE)
        with pytest.raises(ServerUnavailableError):
            await side(lock.acquire(blocking=False))
        assert _server_holds(server.url, name) == (None, 0, {})
        other = rw_lock(side.client(server.url), name).write_lock()
        assert await side(other.acquire(blocking=False))
        await side(other.release())
        await side(client.close())
