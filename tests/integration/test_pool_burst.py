"""A burst of callers beyond the connection pool waits for a connection: it never fails with
redis-py's "Too many connections" (issue #15: 300 asyncio tasks on one lock through one
``AsyncClient`` used to get ``ServerUnavailableError`` for 200 of them)."""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.asyncio

from redlease import AsyncClient, Client

CALLERS = 300
POOL = 24  # connections at most, fewer than the callers


async def test_asyncio_tasks_beyond_the_pool_all_get_the_lock(server, name):
    pool = redis.asyncio.ConnectionPool.from_url(server.url, max_connections=POOL)
    async with AsyncClient(redis.asyncio.Redis(connection_pool=pool)) as client:
        lock = client.lock(name)
        held: list[int] = []

        async def one(i: int) -> None:
            async with lock.hold(timeout=120):
                held.append(i)

        assert await lock.acquire()
        tasks = [asyncio.create_task(one(i)) for i in range(CALLERS)]
        await asyncio.sleep(0)  # every task tries once while the lock is held
        await lock.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 180)
        assert sorted(held) == list(range(CALLERS))
    await pool.aclose()


def test_threads_beyond_the_pool_all_get_the_lock(server, name):
    pool = redis.ConnectionPool.from_url(server.url, max_connections=POOL)
    with Client(redis.Redis(connection_pool=pool)) as client:
        lock = client.lock(name)
        held: list[int] = []
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                with lock.hold(timeout=120):
                    held.append(i)
            except BaseException as exc:  # reported below
                errors.append(exc)

        assert lock.acquire()
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(100)]
        for thread in threads:
            thread.start()
        lock.release()
        for thread in threads:
            thread.join(180)
        assert not errors, errors[:3]
        assert sorted(held) == list(range(100))
    pool.disconnect()
