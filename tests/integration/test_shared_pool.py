"""A client over the application's own ``BlockingConnectionPool`` (issue #25, section 3): with a
small ``max_connections``, many threads (tasks) taking locks and running the application's own
commands through the same pool, under the lock and beside it, all finish, with no lost update
and no "No connection available"; redlease never holds more of the pool than it says
(``docs/connection-pool.md``); ``close()`` leaves the application's pool working. Each test
on the sync and asyncio side."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import redis
import redis.asyncio

from redlease import AsyncClient, Client
from redlease._redis.wire import SPARE_CONNECTIONS
from redlease.testing import RedisServer

MAX_CONNECTIONS = 4  # the application's pool: fewer than the workers
WORKERS = 12
ROUNDS = 15  # read-modify-write rounds per worker under the lock
READERS = 4  # application threads (tasks) that only run their own commands, unlocked


def pool_of(side: Any, url: str) -> Any:
    module = redis.asyncio if side.is_async else redis
    return module.BlockingConnectionPool.from_url(
        url, max_connections=MAX_CONNECTIONS, timeout=30, socket_timeout=10
    )


def in_use(pool: Any) -> int:
    """Connections of ``pool`` checked out now (redis-py keeps them differently per side)."""
    if hasattr(pool, "_in_use_connections"):  # redis.asyncio
        return len(pool._in_use_connections)
    idle = sum(1 for conn in list(pool.pool.queue) if conn is not None)
    return len(pool._connections) - idle


def made(pool: Any) -> int:
    """Connections ``pool`` has made (at most its ``max_connections``)."""
    if hasattr(pool, "_in_use_connections"):
        return len(pool._in_use_connections) + len(pool._available_connections)
    return len(pool._connections)


async def test_locks_and_app_commands_share_a_small_blocking_pool(
    side: Any, server: RedisServer, name: str
) -> None:
    pool = pool_of(side, server.url)
    # the app's client and redlease's: asyncio's or the sync ones, as the side is
    app: Any = (redis.asyncio.Redis if side.is_async else redis.Redis)(
        connection_pool=pool, decode_responses=False
    )
    client: Any = (AsyncClient if side.is_async else Client)(app)
    counter = f"{name}:counter"
    seen_most = [0]
    errors: list[BaseException] = []

    if side.is_async:

        async def worker(i: int) -> None:
            lock = client.lock(name)
            for _ in range(ROUNDS):
                async with lock.hold(timeout=120):
                    value = int(await app.get(counter) or 0)  # the app's own commands
                    await asyncio.sleep(0)
                    await app.set(counter, value + 1)
                    seen_most[0] = max(seen_most[0], in_use(pool))

        async def reader(i: int) -> None:
            for n in range(ROUNDS * 3):
                await app.set(f"{name}:reader:{i}", n)
                assert int(await app.get(f"{name}:reader:{i}")) == n
                await asyncio.sleep(0)

        jobs = [worker(i) for i in range(WORKERS)] + [reader(i) for i in range(READERS)]
        results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 240)
        errors.extend(r for r in results if isinstance(r, BaseException))
    else:

        def run(fn: Any, i: int) -> None:
            try:
                fn(i)
            except BaseException as exc:  # reported below
                errors.append(exc)

        def sync_worker(i: int) -> None:
            lock = client.lock(name)
            for _ in range(ROUNDS):
                with lock.hold(timeout=120):
                    value = int(app.get(counter) or 0)
                    app.set(counter, value + 1)
                    seen_most[0] = max(seen_most[0], in_use(pool))

        def sync_reader(i: int) -> None:
            for n in range(ROUNDS * 3):
                app.set(f"{name}:reader:{i}", n)
                assert int(app.get(f"{name}:reader:{i}")) == n

        threads = [
            threading.Thread(target=run, args=(sync_worker, i), daemon=True) for i in range(WORKERS)
        ] + [
            threading.Thread(target=run, args=(sync_reader, i), daemon=True) for i in range(READERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            await asyncio.to_thread(thread.join, 240)
        assert not any(thread.is_alive() for thread in threads)

    assert not errors, errors[:3]
    assert int(await side(app.get(counter))) == WORKERS * ROUNDS  # no lost update
    assert seen_most[0] <= MAX_CONNECTIONS and made(pool) <= MAX_CONNECTIONS
    # between calls redlease keeps at most SPARE_CONNECTIONS of the pool checked out
    assert len(client._spare.get()) <= min(SPARE_CONNECTIONS, MAX_CONNECTIONS)
    await side(client.close())
    # the pool is the application's: still open and whole after the client closed
    assert in_use(pool) == 0
    assert await side(app.set(f"{name}:after", "ok"))
    assert await side(app.get(f"{name}:after")) == b"ok"
    await side(app.aclose() if side.is_async else app.close())
    await side(pool.aclose() if side.is_async else pool.disconnect())


async def test_decode_responses_pool(side: Any, server: RedisServer, name: str) -> None:
    """An application whose pool decodes replies (``decode_responses=True``) shares it too."""
    module = redis.asyncio if side.is_async else redis
    pool = module.BlockingConnectionPool.from_url(
        server.url, max_connections=MAX_CONNECTIONS, timeout=30, decode_responses=True
    )
    app = module.Redis(connection_pool=pool)
    client = (AsyncClient if side.is_async else Client)(app)
    lock = client.lock(name)
    async with side.hold(lock, timeout=10) as lease:
        assert lease.fencing_token is not None
        assert await side(app.set(f"{name}:v", "x"))
        assert await side(app.get(f"{name}:v")) == "x"
    assert (await side(lock.statistics())).holders == {}
    await side(client.close())
    assert await side(app.get(f"{name}:v")) == "x"
    await side(app.aclose() if side.is_async else app.close())
