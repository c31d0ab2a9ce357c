"""Issue 31 item 3: a turn that comes to a wait that is over is given back at once.

A waiter whose link freezes past its timeout gives up, but its leave (and the give-back sent
after it in the background) never reaches the server: its place stays in line. When the
holder releases, the turn goes to that place: a lock (plain or fair) is handed to it with the
wait's own lease, a Redisson fair lock is kept free for it until the place lapses (the
holder's lease and the wait's timeout after it queued). Its client, which still listens
(another of its threads or tasks waits on the same lock), must give the turn back at once,
so that the live waiter holds within a round trip or two of the release, not a lease (or a
place's life) later.

Each test fails on the code before the give-back: the live waiter's timeout, well below the
abandoned wait's lease or place, runs out first. (A read-write lock's writer has the same
rule, checked in tests/unit/test_pubsub.py: its place lapses 8 s after its last try, too
soon to tell the two apart here without timing.)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import redlease
from redlease._core.fair import REDISSON_FAIR
from redlease._core.keys import CLASSIC
from redlease._core.lock import REDLEASE
from redlease.errors import ServerUnavailableError
from redlease.testing import RedisServer, TcpProxy

from .helpers import eventually, reply_bytes

pytestmark = pytest.mark.timeout(120)

ABANDONED_LEASE = 120.0
"""The abandoned wait's lease: what the lock was stranded for."""

LIVE_TIMEOUT = 12.0
"""The live waiter's timeout: generous for a hand-on that takes a round trip or two, far
below the abandoned lease, or the life of a Redisson fair place (the holder's 30 s lease
plus the wait's timeout)."""


class Waiting:
    """An ``acquire`` run in a thread (sync) or a task (asyncio) of its own."""

    def __init__(self, side: Any, acquire: Callable[[], Any]) -> None:
        self.result: Any = None
        self.done = threading.Event()
        if side.is_async:
            self._runner: Any = asyncio.ensure_future(self._run_async(acquire))
        else:
            self._runner = threading.Thread(target=self._run_sync, args=(acquire,), daemon=True)
            self._runner.start()

    def _run_sync(self, acquire: Callable[[], Any]) -> None:
        try:
            self.result = acquire()
        except Exception as exc:  # reported to the test
            self.result = exc
        self.done.set()

    async def _run_async(self, acquire: Callable[[], Any]) -> None:
        try:
            self.result = await acquire()
        except Exception as exc:  # reported to the test
            self.result = exc
        self.done.set()

    async def wait(self, timeout: float) -> Any:
        await eventually(self.done.is_set, timeout)
        return self.result


def _places(raw: redis.Redis, key: str) -> int:
    """How many places the line ``key`` (a zset, or Redisson's list) has."""
    kind = raw.type(key)
    if kind == b"zset":
        return int(raw.zcard(key))
    if kind == b"list":
        return int(raw.llen(key))
    return 0


class Kind:
    """A primitive with a line: how to make it on a client, the key of its line, and where
    a waiter listens (the channel where the waiter whose place is first hears its turn, and
    the primitive's own)."""

    def __init__(self, make: Callable[[Any, str], Any], layout: str = "") -> None:
        self.make, self.layout = make, layout

    def line(self, name: str) -> str:
        return str(self._layout.keys(name, CLASSIC).line)

    def channels(self, name: str, first: str) -> tuple[str, str]:
        """(where the owner of the place ``first`` hears its turn, the primitive's)."""
        owner = first.split(" ")[0]
        channel, private = self._layout.listen(self._layout.keys(name, CLASSIC), owner)
        assert private is not None
        return private, channel

    @property
    def _layout(self) -> Any:
        return REDISSON_FAIR if self.layout == "redisson" else REDLEASE


KINDS = {
    "lock": Kind(lambda c, n: c.lock(n)),
    "fair": Kind(lambda c, n: c.fair_lock(n)),
    "redisson-fair": Kind(lambda c, n: c.fair_lock(n, layout="redisson"), "redisson"),
}


def _first_place(raw: redis.Redis, key: str) -> str:
    if raw.type(key) == b"list":
        return str(reply_bytes(raw.lindex(key, 0)).decode())
    return str(reply_bytes(raw.zrange(key, 0, 0)[0]).decode())


async def _listened(raw: redis.Redis, *channels: str) -> None:
    """Wait until a client listens on each of ``channels`` (after the link was cut)."""

    def listening() -> bool:
        counts = dict(raw.pubsub_numsub(*channels))
        return all(counts.get(channel.encode(), 0) > 0 for channel in channels)

    await eventually(listening, 20)


@pytest.fixture
def proxied(server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        yield proxy


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_turn_for_an_abandoned_wait_goes_on_to_the_live_waiter(
    side, server, proxied, name, kind
):
    make, line = KINDS[kind].make, KINDS[kind].line(name)
    raw = redis.Redis.from_url(server.url)
    holder = redlease.Client.from_url(server.url)
    try:
        held = make(holder, name)
        assert held.acquire(timeout=5)  # renewed by its watchdog: it outlasts the test
        client = side.client(proxied.url + "?socket_timeout=0.5&socket_connect_timeout=0.5")

        # T1 waits with a lease of its own; its link freezes; it gives up, and neither its
        # leave nor the give-back after it reaches the server
        t1 = Waiting(side, lambda: make(client, name).acquire(timeout=1.5, lease=ABANDONED_LEASE))
        await eventually(lambda: _places(raw, line) == 1)
        await _listened(raw, *KINDS[kind].channels(name, _first_place(raw, line)))
        proxied.freeze()
        outcome = await t1.wait(30)
        assert outcome is False or isinstance(outcome, ServerUnavailableError), outcome
        await asyncio.sleep(3.0)  # the give-back sent in the background times out too
        proxied.cut()  # what was held back is never delivered
        proxied.thaw()
        assert _places(raw, line) == 1, "the abandoned wait's place is still in line"

        # T2, another owner of the same client, waits; the holder releases: the turn goes
        # to T1's place first, and must go on to T2
        t2 = Waiting(side, lambda: make(client, name).acquire(timeout=LIVE_TIMEOUT))
        await eventually(lambda: _places(raw, line) == 2, 20)
        # once the client listens again where T1's turn is told, and T2 on its channel
        await _listened(raw, *KINDS[kind].channels(name, _first_place(raw, line)))
        held.release()
        assert await t2.wait(LIVE_TIMEOUT + 20) is True
    finally:
        holder.close()
        raw.close()
