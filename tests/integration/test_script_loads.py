"""A burst of calls on an empty script cache (a fresh or restarted server, a failover) sends one
``SCRIPT LOAD`` per script, not one per call: the calls that met ``NOSCRIPT`` wait for the load
under way, or find the script loaded since they were sent, and send again."""

from __future__ import annotations

import asyncio
import threading

import redis

from redlease import AsyncClient, Client

CALLERS = 200
SCRIPTS = 2  # an uncontended acquire and release run lock_acquire.lua and lock_release.lua
WAIT = 120  # seconds: a bound on a burst, far above what it takes


def _loads(raw: redis.Redis) -> int:
    """SCRIPT LOADs the server ran since the last reset (``script|load`` from Redis 7; Redis
    6.2 counts every SCRIPT subcommand as ``script``, and LOAD is the only one sent here)."""
    stats = raw.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_script"))


def _forget_scripts(raw: redis.Redis) -> None:
    raw.script_flush()
    raw.config_resetstat()


async def _burst(client: AsyncClient, names: list[str]) -> None:
    async def one(lock_name: str) -> None:
        lock = client.lock(lock_name)
        assert await lock.acquire(timeout=WAIT)
        await lock.release()

    await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), WAIT)


async def test_asyncio_burst_loads_each_script_once(private_server, name):
    raw = redis.Redis.from_url(private_server.url)
    names = [f"{name}:{i}" for i in range(CALLERS)]
    try:
        for pipeline in (False, True):
            async with AsyncClient.from_url(private_server.url, pipeline=pipeline) as client:
                for _ in range(2):  # a fresh server, then one that forgot every script
                    _forget_scripts(raw)
                    await _burst(client, names)
                    assert _loads(raw) == SCRIPTS, f"pipeline={pipeline}"
                    assert not raw.exists(*names)
    finally:
        raw.close()


def _thread_burst(client: Client, names: list[str]) -> list[BaseException]:
    """Every name acquired and released by a thread of its own, all starting at once; the
    errors they met."""
    start = threading.Barrier(len(names))
    errors: list[BaseException] = []

    def one(lock_name: str) -> None:
        try:
            start.wait(WAIT)  # all at once, on the empty cache
            lock = client.lock(lock_name)
            assert lock.acquire(timeout=WAIT)
            lock.release()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    return errors


def test_thread_burst_loads_each_script_once(private_server, name):
    raw = redis.Redis.from_url(private_server.url)
    names = [f"{name}:{i}" for i in range(50)]
    try:
        with Client.from_url(private_server.url) as client:
            for _ in range(2):  # a fresh server, then one that forgot every script
                _forget_scripts(raw)
                errors = _thread_burst(client, names)
                assert not errors, errors[:3]
                assert _loads(raw) == SCRIPTS
                assert not raw.exists(*names)
    finally:
        raw.close()


async def test_cancelled_callers_on_an_empty_cache_leave_nothing_held(private_server, name):
    """Callers cancelled while a load is under way (the one loading among them, at some
    storms) leave the others to load it and go on; nothing stays held."""
    raw = redis.Redis.from_url(private_server.url)
    names = [f"{name}:{i}" for i in range(60)]
    try:
        for pipeline in (False, True):
            async with AsyncClient.from_url(private_server.url, pipeline=pipeline) as client:
                for storm in range(8):
                    _forget_scripts(raw)

                    async def one(lock_name: str) -> None:
                        lock = client.lock(lock_name)
                        assert await lock.acquire(timeout=WAIT)
                        await lock.release()

                    tasks = [asyncio.create_task(one(n)) for n in names]
                    for _ in range(storm * 2):  # cancel at a different point each storm
                        await asyncio.sleep(0)
                    for i, task in enumerate(tasks):
                        if i % 3 == storm % 3:
                            task.cancel()
                    done = await asyncio.wait_for(
                        asyncio.gather(*tasks, return_exceptions=True), WAIT
                    )
                    for i, outcome in enumerate(done):
                        if i % 3 != storm % 3:
                            assert outcome is None, (storm, i, outcome)
                        else:
                            assert outcome is None or isinstance(outcome, asyncio.CancelledError)
                    assert not raw.exists(*names), f"storm {storm}, pipeline={pipeline}"
    finally:
        raw.close()
