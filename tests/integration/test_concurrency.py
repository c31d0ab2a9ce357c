"""Mutual exclusion between threads, tasks and processes; crashes, restarts, fork, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

import redlease
from redlease import NotOwnedError, ServerUnavailableError
from redlease._core.keys import LockKeys
from redlease.testing import TcpProxy

from .helpers import count_in_tasks, count_in_threads, counted, eventually, reply_bytes

WORKER = str(Path(__file__).with_name("worker.py"))


def _counter(url: str, name: str) -> int:
    return counted(url, name + ":counter")


def test_threads_exclude_each_other(server, name):
    with redlease.Client.from_url(server.url) as client:
        lock = client.lock(name)
        overlaps = count_in_threads(server.url, name + ":counter", lock, threads=4, rounds=50)
    assert overlaps == 0
    assert _counter(server.url, name) == 200


async def test_tasks_exclude_each_other(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        lock = client.lock(name)
        overlaps = await count_in_tasks(server.url, name + ":counter", lock, tasks=4, rounds=50)
    assert overlaps == 0
    assert _counter(server.url, name) == 200


async def test_tasks_own_their_holds(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        lock = client.lock(name)
        assert await lock.acquire()

        async def other_task() -> tuple[bool, bool]:
            return await lock.owned(), await lock.acquire(blocking=False)

        async def release_elsewhere() -> None:
            await lock.release()

        assert await asyncio.create_task(other_task()) == (False, False)
        with pytest.raises(NotOwnedError):
            await asyncio.create_task(release_elsewhere())
        await lock.release()


# owners in other processes: the client's; the scripts' exclusion runs on every server above
@pytest.mark.one_server
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_processes_exclude_each_other(server, name, kind):
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "count", kind, server.url, name, "60"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "done" in out
    assert _counter(server.url, name) == 180


async def test_killed_holder_frees_the_lock_within_its_lease(side, server, name, long_recheck):
    proc = subprocess.Popen(
        [sys.executable, WORKER, "hold", side.kind, server.url, name, "1.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        lock = side.client(server.url).lock(name)
        assert not await side(lock.acquire(blocking=False))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        assert await side(lock.acquire(timeout=20))
        # the watchdog lease is 1.5 s: the lock frees within it and the waiter, told by its
        # TTL, looks then (generous bound; no re-check within its 20 s wait: long_recheck)
        assert time.monotonic() - killed_at < 1.5 + long_recheck
        await side(lock.release())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_server_restart_mid_hold(side, private_server, name):
    client = side.client(private_server.url, watchdog_timeout=1)
    lost = threading.Event()
    lock = client.lock(name, on_lease_lost=lambda _e: lost.set())
    assert await side(lock.acquire())
    private_server.kill()
    with pytest.raises(ServerUnavailableError):
        await side(client.lock(name + ":other").acquire(blocking=False))
    private_server.start()  # same port, data lost, script cache empty
    await eventually(lost.is_set, timeout=15)
    with pytest.raises(redlease.LeaseLostError):
        await side(lock.release())
    assert await side(lock.acquire(timeout=5))  # recovered: scripts reloaded
    await side(lock.release())


async def test_waiter_recovers_after_server_restart(side, private_server, name):
    holder = side.client(private_server.url).lock(name)
    waiter_client = side.client(private_server.url)
    assert await side(holder.acquire(lease=60))
    result: list[bool] = []
    if side.is_async:
        task = asyncio.create_task(waiter_client.lock(name).acquire(timeout=30))
    else:
        thread = threading.Thread(
            target=lambda: result.append(waiter_client.lock(name).acquire(timeout=30))
        )
        thread.start()
    sub_ready = lambda: (  # noqa: E731
        waiter_client._subscriber is not None
        and waiter_client._subscriber.waiting(f"redisson_lock__channel:{{{name}}}") > 0
    )
    await eventually(sub_ready)
    restarted_at = time.monotonic()
    private_server.restart()  # the 60 s hold is gone with the data
    if side.is_async:
        assert await asyncio.wait_for(task, 40)
    else:
        thread.join(40)
        assert result == [True]
    assert time.monotonic() - restarted_at < 20, "re-subscribed and re-checked, not 60 s"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_never_owns_parent_holds(server, name):
    with redlease.Client.from_url(server.url) as client:
        lock = client.lock(name)
        assert lock.acquire()
        parent_id = client.id
        pid = os.fork()
        if pid == 0:  # child: report through the exit status
            code = 0
            try:
                if client.id == parent_id:
                    code = 1
                elif lock.owned():
                    code = 2
                elif lock.acquire(blocking=False):
                    code = 3
                else:
                    try:
                        lock.release()
                        code = 4
                    except NotOwnedError:
                        code = 0
            except BaseException:
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.owned()
        lock.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_never_sends_on_its_parent_connections(server, name):
    """The client keeps connections between calls; a child that inherited them opens its own
    (two processes on one socket would read each other's replies)."""
    raw = redis.Redis.from_url(server.url)
    with redlease.Client.from_url(server.url) as client:
        lock = client.lock(name)
        assert lock.acquire()  # the parent now keeps a connection
        _holder_listens(raw, client, name)  # (and its pub/sub one, opened in the background)
        before = {c["id"] for c in raw.client_list()}
        ready_r, ready_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: one call that does not ask for its owner first, then linger
            code = 0
            try:
                client.lock(name + ":other").force_release()
            except BaseException:
                code = 1
            os.write(ready_w, b"x")
            os.read(done_r, 1)
            os._exit(code)
        try:
            assert os.read(ready_r, 1) == b"x"
            new = [c for c in raw.client_list() if c["id"] not in before]
            assert [c["cmd"] for c in new] == ["evalsha"], "the child used no connection of its own"
        finally:
            os.write(done_w, b"x")
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        lock.release()  # the parent's connection still answers its own calls
        assert not lock.locked()
    raw.close()


async def test_cancelled_acquire_never_leaves_a_hold(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        lock = client.lock(name)
        for i in range(60):
            task = asyncio.create_task(lock.acquire())
            # cancel at varying points: before sending, in flight, after the grant
            for _ in range(i % 4):
                await asyncio.sleep(0)
            await asyncio.sleep((i % 7) * 0.0002)
            task.cancel()
            try:
                granted = await task
            except asyncio.CancelledError:
                granted = False
            if granted:  # finished before the cancel landed: the hold is that task's
                assert await lock.force_release()
                continue
            assert not await lock.locked(), f"iteration {i}: a cancelled acquire left a hold"


async def test_cancelled_waiting_acquire_leaves_nothing(server, name):
    async with (
        redlease.AsyncClient.from_url(server.url) as holder_client,
        redlease.AsyncClient.from_url(server.url) as client,
    ):
        holder = holder_client.lock(name)
        assert await holder.acquire()
        task = asyncio.create_task(client.lock(name).acquire())
        await eventually(
            lambda: (
                client._subscriber is not None
                and client._subscriber.waiting(f"redisson_lock__channel:{{{name}}}") > 0
            )
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.release()
        assert not await client.lock(name).locked()


def _holder_listens(raw: redis.Redis, client: object, name: str) -> None:
    """Wait until ``client`` listens where a force release tells its holds of ``name`` (its
    pub/sub connection is opened in the background after a watched hold's acquire), so that
    connections counted afterwards are the test's own."""
    channel = LockKeys.for_name(name).holder(f"{client.id}:1")  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while int(raw.pubsub_numsub(channel)[0][1]) == 0:
        assert time.monotonic() < deadline, "the holder's channel was never subscribed"
        time.sleep(0.01)


def _awaiting_reply(task: asyncio.Task[object]) -> bool:
    """The task's await chain has reached the read of a direct call's reply (its command is
    written): read from the task's own coroutines, never another thread's frames."""
    coro: object = task.get_coro()
    names: set[str] = set()
    for _ in range(200):
        code = getattr(coro, "cr_code", None)
        if code is None:
            return False
        if code.co_name == "read_response" and "send_direct" in names:
            return True
        names.add(code.co_name)
        coro = getattr(coro, "cr_await", None)
    return False


@pytest.mark.parametrize("cancels", [1, 2], ids=["cancelled", "cancelled-twice"])
@pytest.mark.parametrize("reentry", [False, True], ids=["first", "reentry"])
async def test_an_acquire_cancelled_awaiting_its_reply_reads_it_and_gives_it_back(
    server, name, reentry, cancels
):
    """The direct call (no pipeline) keeps no task per call: a task cancelled after its
    acquire went out still reads the reply on the same connection (no second connection, no
    second send), even when cancelled again meanwhile, and gives back the hold it brought,
    before the cancellation goes on."""
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        async with redlease.AsyncClient.from_url(proxy.url) as client:
            lock = client.lock(name)
            assert await lock.acquire()  # warms the connection (and the script cache)
            observer = redis.Redis(port=server.port)
            # (and the pub/sub one, where a holder hears of a force release: in the background)
            await asyncio.to_thread(_holder_listens, observer, client, name)
            observer.close()
            await lock.release()
            counts: list[int] = []
            first_in, go = asyncio.Event(), asyncio.Event()

            async def caller() -> None:
                if reentry:
                    assert await lock.acquire()
                    first_in.set()
                    await go.wait()
                try:
                    await lock.acquire()
                finally:
                    counts.append(await lock.hold_count())

            opened = proxy.accepted
            if not reentry:
                proxy.freeze()
            task = asyncio.create_task(caller())
            if reentry:
                await asyncio.wait_for(first_in.wait(), 10)
                proxy.freeze()  # the first hold is in: its re-entry hangs
                go.set()
            await eventually(lambda: _awaiting_reply(task))
            for _ in range(cancels):
                task.cancel()
                await asyncio.sleep(0)  # the cancellation lands while the reply is held back
            proxy.thaw()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert counts == [1 if reentry else 0]
            assert proxy.accepted == opened, "the reply was not read on the same connection"
            observer = redis.Redis(port=server.port)
            try:
                holds = {
                    field: int(count)
                    for field, count in observer.hgetall(name).items()
                    if not reply_bytes(field).startswith(b"redlease:")
                }
                assert list(holds.values()) == ([1] if reentry else []), holds
            finally:
                observer.close()


async def test_a_release_cancelled_awaiting_its_reply_still_releases(private_server, name):
    """A release cancelled after it went out reads its reply late on the same connection and
    the hold table learns the outcome (no second send, no task of its own). A server of its
    own: the scripts are counted server-wide, and a shared one also runs other tests' clients'
    renewals."""
    with TcpProxy(("127.0.0.1", private_server.port)) as proxy:
        async with redlease.AsyncClient.from_url(proxy.url) as client:
            warm = client.lock(f"{name}:warm")  # the server loads the scripts (no NOSCRIPT)
            assert await warm.acquire()
            await warm.release()
            lock = client.lock(name)
            held, go = asyncio.Event(), asyncio.Event()
            after: list[bool] = []

            async def holder() -> None:
                assert await lock.acquire()
                held.set()
                await go.wait()
                try:
                    await lock.release()
                finally:
                    after.append(lock.fencing_token is not None)  # the hold table, no call

            task = asyncio.create_task(holder())
            await asyncio.wait_for(held.wait(), 10)
            observer = redis.Redis(port=private_server.port)
            await asyncio.to_thread(_holder_listens, observer, client, name)
            opened = proxy.accepted
            scripts_run = _scripts_run(observer)
            proxy.freeze()
            go.set()
            await eventually(lambda: _awaiting_reply(task))
            task.cancel()
            await asyncio.sleep(0)
            proxy.thaw()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert after == [False]
            assert proxy.accepted == opened, "the reply was not read on the same connection"
            assert _scripts_run(observer) == scripts_run + 1, "the release was sent again"
            observer.close()
            assert not await lock.locked()


def _scripts_run(observer: redis.Redis) -> int:
    stats = observer.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


async def test_cancelled_release_still_completes(server, name):
    async with redlease.AsyncClient.from_url(server.url) as client:
        lock = client.lock(name)
        for i in range(20):
            acquired = asyncio.Event()

            async def cycle(acquired: asyncio.Event) -> None:
                assert await lock.acquire()
                acquired.set()
                await lock.release()

            task = asyncio.create_task(cycle(acquired))
            await acquired.wait()
            for _ in range(i % 3):
                await asyncio.sleep(0)
            task.cancel()  # lands while the release is on the wire (or just after)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert not await lock.locked(), f"iteration {i}: a cancelled release left a hold"


ASYNC_ONLY = {("AsyncClient", "from_url", "pipeline")}
"""Parameters one side alone has: the opt-in pipelined transport is asyncio's."""


def test_sync_and_async_apis_match():
    pairs = [
        (redlease.Client, redlease.AsyncClient),
        (redlease.Lock, redlease.AsyncLock),
        (redlease.FairLock, redlease.AsyncFairLock),
        (redlease.ReadWriteLock, redlease.AsyncReadWriteLock),
        (redlease.ReadLock, redlease.AsyncReadLock),
        (redlease.WriteLock, redlease.AsyncWriteLock),
        (redlease.Semaphore, redlease.AsyncSemaphore),
        (redlease.LeaseSemaphore, redlease.AsyncLeaseSemaphore),
        (redlease.CountDownLatch, redlease.AsyncCountDownLatch),
        (redlease.RedlockClient, redlease.AsyncRedlockClient),
        (redlease.RedlockLock, redlease.AsyncRedlockLock),
        (redlease.MultiLock, redlease.AsyncMultiLock),
    ]
    for sync_cls, async_cls in pairs:
        sync_api = {n for n in dir(sync_cls) if not n.startswith("_")}
        # aclose(): redis-py's asyncio spelling of close(), which the sync clients have not
        async_api = {n for n in dir(async_cls) if not n.startswith("_")} - {"aclose"}
        assert sync_api == async_api, (sync_cls, sync_api ^ async_api)
        for attr in sync_api:
            s, a = getattr(sync_cls, attr), getattr(async_cls, attr)
            if callable(s) and not isinstance(s, type):
                sp = list(inspect.signature(s).parameters)
                ap = list(inspect.signature(a).parameters)
                ap = [p for p in ap if (async_cls.__name__, attr, p) not in ASYNC_ONLY]
                assert sp == ap, (sync_cls.__name__, attr, sp, ap)
