"""A Redlock give-back that reaches a slow master before the late acquire it undoes: the late
acquire must not leave a stray hold there. Real masters, sync and asyncio.

Master 3 is reached through proxy A. A's first connections go on through proxy B, which is
frozen while the acquire is out: the acquire, sent on such a connection, times out and arrives
late. A's later connections go straight to the master, so the give-back, sent on a new
connection, arrives first (two TCP connections deliver in no set order)."""

from __future__ import annotations

from typing import Any

import redis

from redlease import AsyncRedlockClient, QuorumError, RedlockClient
from redlease._core import scripts
from redlease.testing import TcpProxy

from . import redlock_fixtures as fixtures
from .helpers import eventually
from .redlock_fixtures import holders

redlock_binary, five, three = fixtures.redlock_binary, fixtures.five, fixtures.three


async def _keep_one_idle(side: Any, lock: Any, master: Any) -> None:
    """Leave ``master`` with one idle fan-out connection (the next call's), no spare one."""
    conns = []
    for _ in range(5):  # a warm-up call whose connection was not kept: warm up again
        while (conn := master.take_idle()) is not None:
            conns.append(conn)
        if conns:
            break
        await side(lock.locked())
    assert conns, "the warm-up opened no connection"
    master.give(conns.pop())
    for conn in conns:
        await side(conn.disconnect())


def _scripts_run(master: redis.Redis) -> int:
    """How many EVALSHA calls ``master`` has run (the late acquire is one)."""
    stats = master.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


async def test_give_back_before_the_late_acquire_leaves_nothing(side, three, name):
    slow = TcpProxy(three[2]).start()
    front = TcpProxy((slow.host, slow.port)).start()
    raw = redis.Redis.from_url(three[0].url)
    slow_master = redis.Redis.from_url(three[2].url)
    for script in scripts.ALL:  # as after any earlier use: the late EVALSHA runs at once
        slow_master.script_load(script.source)
    try:
        factory = AsyncRedlockClient if side.is_async else RedlockClient
        # (1 s per round: a loaded machine's first contact through two proxies can pass 0.3 s)
        client = factory.from_urls(
            [three[0].url, three[1].url, front.url], master_timeout=1.0, watchdog_timeout=30
        )
        side._clients.append(client)
        lock = client.lock(name)

        async def warmed_up() -> bool:  # an idle connection to each master
            try:
                return not await side(lock.locked())
            except QuorumError:
                return False

        await eventually(warmed_up)
        await _keep_one_idle(side, lock, client._masters[2])
        raw.hset(name, "another-owner:1", 1)  # master 1 is held by someone else
        raw.pexpire(name, 30_000)
        front.retarget(three[2])  # new connections to master 3 skip the slow way
        slow.freeze()
        assert not await side(lock.acquire(blocking=False))  # 1 grant of 3: given back
        assert holders(three[1], name) == {}
        before = _scripts_run(slow_master)
        slow.thaw()  # the acquire reaches master 3 now, after its give-back
        # the late acquire has run there, and whatever it made is gone (given back after it,
        # on the same connection), not left for a whole lease
        await eventually(
            lambda: _scripts_run(slow_master) > before and holders(three[2], name) == {},
            timeout=10,
        )
    finally:
        raw.delete(name)
        slow_master.delete(name)
        raw.close()
        slow_master.close()
        front.close()
        slow.close()
