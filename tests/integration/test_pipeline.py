"""The asyncio pipeline (issue #15 goal 2): the script calls of many tasks on one
``AsyncClient`` share a few connections, written in batches and read in order; a reply always
reaches its own caller, whatever is cancelled, refused or cut on the way."""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from redlease import AsyncClient, ServerUnavailableError, WrongTypeError
from redlease._asyncio.cancel import CANCEL_GRACE
from redlease.errors import LeaseLostError
from redlease.testing import RedisServer, TcpProxy

# the client's transport, the same on every server (and its storms are slow): the newest only
pytestmark = pytest.mark.one_server

TASKS = 1000
MOST_CONNECTIONS = 8  # every connection of the client: pipeline, pub/sub and watchdog
WAIT = 120.0  # generous bound of every wait on the tasks


def _accepted(server: RedisServer) -> int:
    """Connections the server has accepted so far (this probe's own included)."""
    return int(server.info("stats")["total_connections_received"])


def _open_now(server: RedisServer) -> int:
    """Connections open on the server now, the probe's own left out."""
    listing = server.command("CLIENT", "LIST")
    assert isinstance(listing, bytes)
    return len(listing.splitlines()) - 1


def _in_step(client: AsyncClient) -> bool:
    """No call of the client is queued or awaiting a reply (nothing left over)."""
    pipeline = client._pipeline
    assert pipeline is not None
    return all(not link.load for link in [*pipeline._links, *pipeline._draining])


async def _fenced_cycle(client: AsyncClient, lock_name: str, key: str, value: str) -> Any:
    """Acquire, write ``value`` to ``key`` fenced, read it back, release; returns what was
    read, which is another task's value if a reply ever reached the wrong caller."""
    lock = client.lock(lock_name)
    assert await lock.acquire(timeout=30)
    token = lock.fencing_token
    assert token is not None
    await client.fenced_set(key, value, token)
    got = await client.fenced_get(key, token)
    await lock.release()
    return got


async def test_a_thousand_tasks_share_a_few_connections(private_server):
    before = _accepted(private_server)
    client = AsyncClient.from_url(private_server.url, pipeline=True)
    holding = 0
    all_hold = asyncio.Event()
    go_on = asyncio.Event()

    async def one(i: int) -> int:
        nonlocal holding
        lock = client.lock(f"pipeline:many:{i}")
        assert await lock.acquire()
        holding += 1
        if holding == TASKS:
            all_hold.set()
        await asyncio.wait_for(go_on.wait(), WAIT)
        await lock.release()
        for _ in range(2):
            assert await lock.acquire()
            await lock.release()
        return i

    tasks = [asyncio.create_task(one(i)) for i in range(TASKS)]
    try:
        await asyncio.wait_for(all_hold.wait(), WAIT)
        open_while_held = _open_now(private_server)
        go_on.set()
        assert await asyncio.wait_for(asyncio.gather(*tasks), WAIT) == list(range(TASKS))
        assert _in_step(client)
    finally:
        go_on.set()
        for task in tasks:
            task.cancel()
        await client.close()
    opened = _accepted(private_server) - before - 1  # the second probe's own left out
    assert open_while_held <= MOST_CONNECTIONS, open_while_held
    assert opened <= MOST_CONNECTIONS, opened


async def test_close_gives_the_connections_back(private_server):
    pool = redis.asyncio.ConnectionPool.from_url(private_server.url)
    client = AsyncClient(redis.asyncio.Redis(connection_pool=pool), pipeline=True)

    async def cycle(i: int) -> None:
        lock = client.lock(f"pipeline:close:{i}")
        assert await lock.acquire(lease=30)
        await lock.release()

    await asyncio.wait_for(asyncio.gather(*(cycle(i) for i in range(200))), WAIT)
    assert client._pipeline is not None and client._pipeline.connections >= 1
    await client.close()
    assert client._pipeline.connections == 0
    assert not pool._in_use_connections  # every pipeline connection is back in the pool
    await pool.aclose()


async def test_error_replies_reach_their_own_callers(private_server):
    raw = redis.Redis.from_url(private_server.url)
    client = AsyncClient.from_url(private_server.url, pipeline=True)
    names = [f"pipeline:err:{i}" for i in range(300)]
    wrong = set(names[1::3])
    for name in wrong:
        raw.set(name, "not a lock")  # WRONGTYPE for the lock script
    for name in names:
        raw.set(f"{name}:value", name)

    async def one(name: str) -> str:
        lock = client.lock(name)
        try:
            assert await lock.acquire(timeout=30)
        except WrongTypeError:
            return "wrong type"
        token = lock.fencing_token
        assert token is not None
        got = await client.fenced_get(f"{name}:value", token)
        await lock.release()
        return got.decode() if isinstance(got, bytes) else str(got)

    try:
        for _ in range(2):  # a second time after the server forgot every script: NOSCRIPT
            results = await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), WAIT)
            assert results == ["wrong type" if n in wrong else n for n in names]
            assert _in_step(client)
            raw.script_flush()
    finally:
        await client.close()
        raw.close()


async def test_cancellation_storms_leave_every_connection_in_step(private_server):
    raw = redis.Redis.from_url(private_server.url)
    client = AsyncClient.from_url(private_server.url, pipeline=True)
    count = 120
    names = [f"pipeline:cancel:{i}" for i in range(count)]
    try:
        for storm in range(40):
            state: dict[int, str] = {}

            async def one(i: int, state: dict[int, str]) -> None:
                lock = client.lock(names[i])
                for _ in range(3):
                    state[i] = "acquiring"
                    assert await lock.acquire(timeout=30)
                    state[i] = "held"
                    await lock.release()
                    state[i] = "free"

            tasks = [asyncio.create_task(one(i, state)) for i in range(count)]
            for _ in range(storm * 3 % 61):  # cancel at a different point of the calls each time
                await asyncio.sleep(0)
            for i, task in enumerate(tasks):
                if (i + storm) % 4:  # the others go on meanwhile, on the same connections
                    task.cancel()
            cancelled_at = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT)
            # no cancelled caller waited out CANCEL_GRACE for a reply that was never coming
            assert time.monotonic() - cancelled_at < CANCEL_GRACE, storm

            held = {i for i in range(count) if raw.exists(names[i])}
            assert held <= {i for i, s in state.items() if s == "held"}, storm
            # fresh calls on the same client: each reply must be its own
            released = await asyncio.wait_for(
                asyncio.gather(*(client.lock(n).force_release() for n in names)), WAIT
            )
            assert {i for i, was in enumerate(released) if was} == held, storm
            assert _in_step(client)
        values = await asyncio.wait_for(
            asyncio.gather(*(_fenced_cycle(client, f"{n}:after", f"{n}:key", n) for n in names)),
            WAIT,
        )
        assert values == [n.encode() for n in names]
    finally:
        await client.close()
        raw.close()


async def _cut_mid_flight(server: RedisServer, cut: Any, *, data_lost: bool) -> None:
    """Workers loop fenced cycles while ``cut()`` breaks the connections a few times; each
    cycle succeeds, or fails with ``ServerUnavailableError`` (``LeaseLostError`` when the
    server lost its data), and never reads another task's value."""
    client = AsyncClient.from_url(server.url, pipeline=True)
    workers, cycles = 200, 12
    finished = 0
    progress = asyncio.Event()
    failed: list[BaseException] = []

    async def worker(i: int) -> None:
        nonlocal finished
        for n in range(cycles):
            value = f"{i}:{n}"
            try:
                got = await _fenced_cycle(client, f"pipeline:cut:{i}:{n}", f"cut:{i}", value)
            except ServerUnavailableError as exc:
                failed.append(exc)
            except LeaseLostError as exc:
                if not data_lost:
                    raise
                failed.append(exc)
            else:
                assert got == value.encode() or (data_lost and got is None), (value, got)
            finished += 1
            progress.set()

    tasks = [asyncio.create_task(worker(i)) for i in range(workers)]
    try:
        for _ in range(3):
            seen = finished
            for _ in range(workers * cycles):  # until some cycles went through since the last
                if finished >= seen + workers // 2 or all(t.done() for t in tasks):
                    break
                progress.clear()
                await asyncio.wait_for(progress.wait(), WAIT)
            cut()
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
        assert finished == workers * cycles
        assert _in_step(client)
        # and the client goes on
        assert await _fenced_cycle(client, "pipeline:cut:last", "cut:last", "last") == b"last"
    finally:
        for task in tasks:
            task.cancel()
        await client.close()


async def test_killed_connections_mid_flight_fail_or_retry_never_misdeliver(private_server):
    raw = redis.Redis.from_url(private_server.url)

    def kill() -> None:
        raw.client_kill_filter(_type="normal", skipme=True)

    try:
        await _cut_mid_flight(private_server, kill, data_lost=False)
    finally:
        raw.close()


async def test_a_restart_mid_flight_fails_or_retries_never_misdelivers(private_server):
    await _cut_mid_flight(private_server, private_server.restart, data_lost=True)


async def test_a_connection_closed_under_the_pipeline_is_a_lost_connection(server):
    """The application closes the pool's connections (``pool.disconnect()``, which closes the
    pipeline's too, in tasks of its own) as calls are queued: a write finds its connection's
    transport closing. The calls are sent again on a fresh connection, as after any lost
    connection; on Python 3.13.0 the write raised ``TypeError`` ('NoneType' object is not
    callable) into every caller (also what ``_drop_idle`` did to a connection the pool
    handed out meanwhile, after a restart)."""
    client = AsyncClient.from_url(server.url, pipeline=True)
    locks = [client.lock(f"pipeline:closed-under:{i}") for i in range(20)]

    async def cycle(lock: Any) -> bool:
        taken = await lock.acquire(blocking=False)
        await lock.release()
        return bool(taken)

    try:
        for _ in range(5):
            assert all(await asyncio.gather(*(cycle(lock) for lock in locks)))
            # its close runs first (a task per connection), the pipeline's write next
            closing = asyncio.ensure_future(client.redis.connection_pool.disconnect())
            calls = [asyncio.ensure_future(cycle(lock)) for lock in locks]
            outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
            await closing
            assert all(outcome is True for outcome in outcomes), outcomes
            assert _in_step(client)
    finally:
        await client.close()


async def test_every_pipeline_connection_dead_at_once(private_server):
    """A cut kills every connection at once: the first failure retires the others (idle at
    once, busy once drained), so the calls' second tries go to a fresh connection and succeed
    against a server that is up."""
    raw = redis.Redis.from_url(private_server.url)
    # no retry by redis-py: only redlease's own second try, which must not meet a dead one
    client = AsyncClient.from_url(private_server.url, retry=Retry(NoBackoff(), 0), pipeline=True)
    locks = [client.lock(f"pipeline:dead:{i}") for i in range(200)]

    async def cycle(lock: Any) -> None:
        assert await lock.acquire(blocking=False)
        await lock.release()

    try:
        await asyncio.wait_for(asyncio.gather(*(cycle(lock) for lock in locks)), WAIT)
        assert client._pipeline is not None and client._pipeline.connections >= 1
        raw.client_kill_filter(_type="normal", skipme=True)
        await asyncio.wait_for(asyncio.gather(*(cycle(lock) for lock in locks)), WAIT)
        assert _in_step(client)
    finally:
        await client.close()
        raw.close()


async def test_timeouts_around_acquires_stay_timeouts_and_give_back(private_server):
    """``asyncio.timeout``/``wait_for`` cancel an acquire mid-call: the caller gets
    ``TimeoutError`` (never a bare cancellation) and a grant that arrived is given back."""
    raw = redis.Redis.from_url(private_server.url)
    client = AsyncClient.from_url(private_server.url, pipeline=True)
    names = [f"pipeline:timeout:{i}" for i in range(300)]

    async def one(i: int) -> bool:
        lock = client.lock(names[i])
        delay = (i % 20) * 0.001  # expires at a different point of the call each time
        try:
            if sys.version_info >= (3, 11):
                async with asyncio.timeout(delay):
                    await lock.acquire()
            else:  # pragma: no cover - Python 3.10
                await asyncio.wait_for(lock.acquire(), delay)
        except (TimeoutError, asyncio.TimeoutError):
            return False
        assert lock.fencing_token is not None
        return True

    try:
        for _ in range(3):
            started = time.monotonic()
            got = await asyncio.wait_for(
                asyncio.gather(*(asyncio.create_task(one(i)) for i in range(len(names)))), WAIT
            )
            # no cancelled caller waited out CANCEL_GRACE for a reply that was never coming
            assert time.monotonic() - started < CANCEL_GRACE
            held = {i for i, name in enumerate(names) if raw.exists(name)}
            assert held == {i for i, ok in enumerate(got) if ok}
            released = await asyncio.wait_for(
                asyncio.gather(*(client.lock(n).force_release() for n in names)), WAIT
            )
            assert {i for i, was in enumerate(released) if was} == held
            assert _in_step(client)
    finally:
        await client.close()
        raw.close()


_NO_SETINFO: dict[str, Any] = (
    {"driver_info": None}  # newer redis-py
    if "driver_info" in inspect.signature(AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


async def test_health_checks_go_between_batches(private_server):
    """redis-py's health check (a PING when the connection was idle long enough) is sent
    only while no reply is due, so it never takes a caller's place in line."""
    # no CLIENT SETINFO: redis-py pipelines its two SETINFO at connect and, with a check due
    # between them (1 ms passes on a loaded machine), its health check's PING reads the first
    # one's reply, which is an error on servers before 7.2 (not a place in redlease's line)
    client = AsyncClient.from_url(
        private_server.url, health_check_interval=0.001, pipeline=True, **_NO_SETINFO
    )
    names = [f"pipeline:health:{i}" for i in range(200)]
    try:
        for round_ in range(5):
            values = await asyncio.wait_for(
                asyncio.gather(
                    *(_fenced_cycle(client, n, f"{n}:key", f"{n}:{round_}") for n in names)
                ),
                WAIT,
            )
            assert values == [f"{n}:{round_}".encode() for n in names]
            assert _in_step(client)
    finally:
        await client.close()


async def test_a_hung_server_fails_the_calls_waiting_for_replies(private_server):
    """A server that stops answering (the network freezes) fails every call awaiting its
    reply with a timeout (the pool's socket timeout), and the pipeline serves again once the
    network heals."""
    with TcpProxy(("127.0.0.1", private_server.port)) as proxy:
        client = AsyncClient.from_url(proxy.url, pipeline=True, socket_timeout=0.5)
        try:
            warm = client.lock("pipeline:hung:warm")
            assert await warm.acquire()
            await warm.release()
            proxy.freeze()
            calls = [client.lock(f"pipeline:hung:{i}").acquire() for i in range(20)]
            results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
            assert all(isinstance(r, ServerUnavailableError) for r in results), results
            assert all("timed out" in str(r) or "Timeout" in str(r) for r in results), results
            proxy.thaw()
            again = client.lock("pipeline:hung:after")
            # serves again: the first call after the thaw opens a new connection, whose
            # handshake may itself outlast the 0.5 s timeout on a loaded machine; a few tries
            for attempt in range(10):
                try:
                    assert await again.acquire()
                    break
                except ServerUnavailableError:
                    if attempt == 9:
                        raise
                    await asyncio.sleep(0.5)
            await again.release()
        finally:
            await client.close()


def _pings(url: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get("cmdstat_ping", {}).get("calls", 0))


async def test_the_direct_path_sends_health_checks_only_when_asked(private_server):
    """Without the pipeline a call goes on a connection redlease keeps: with redis-py's
    ``health_check_interval`` set, a connection idle longer than that is PINGed before its
    next call (a dead one is found before a script is sent); without it, no PING is sent."""
    checked = AsyncClient.from_url(private_server.url, health_check_interval=0.05, **_NO_SETINFO)
    plain = AsyncClient.from_url(private_server.url, **_NO_SETINFO)
    try:
        for client in (checked, plain):
            lock = client.lock("direct:health")
            assert await lock.acquire()
            await lock.release()
        before = _pings(private_server.url)
        for _ in range(3):
            lock = plain.lock("direct:health")
            assert await lock.acquire()
            await lock.release()
            await asyncio.sleep(0.1)  # longer than the interval: a check would be due
        assert _pings(private_server.url) == before
        for _ in range(3):
            lock = checked.lock("direct:health")
            assert await lock.acquire()
            await lock.release()
            await asyncio.sleep(0.1)
        assert _pings(private_server.url) >= before + 3
    finally:
        await checked.close()
        await plain.close()
