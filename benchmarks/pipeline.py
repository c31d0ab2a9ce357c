"""Many asyncio tasks on one client (issue #15 goal 2): redlease's pipeline against redis.asyncio.

    python benchmarks/pipeline.py                       # 1,000 tasks, 3 rounds of 3 s each
    python benchmarks/pipeline.py --tasks 200 --seconds 1 --rounds 5 --server valkey

One private server (``redlease.testing.RedisServer``, a free loopback port) serves every round.
In each round, ``tasks`` asyncio tasks loop acquire -> release, each on a name of its own, for
``seconds`` (after a short warm-up), through:

redlease
    one ``AsyncClient.from_url(url, pipeline=True)`` (its default pool): ``lock.acquire()``
    then ``lock.release()``, two script calls per cycle, on the client's pipeline (opt-in:
    without it each call under way takes a pooled connection).
redis.asyncio
    the peer: one ``redis.asyncio.Redis`` over a ``BlockingConnectionPool`` with redis-py's
    defaults (50 connections; redis-py's plain default pool of 100 fails a burst of 1,000
    tasks with "Too many connections"), two commands per cycle: ``SET name token NX PX``, then
    a compare-and-delete script by ``EVALSHA``.

The two are interleaved round by round; the figures are the medians of the rounds, and the
ratio is redlease's median over the peer's. ``connections`` is the most server connections the
subject had open at once, sampled with ``CLIENT LIST`` from a separate probe connection
(itself not counted) every ``SAMPLE_EVERY`` seconds.

``measure(url)`` is the entry point for other scripts (``bench.py``'s ``scale`` section);
``anatomy.py`` runs the two subjects (``RedleaseSubject``, ``PeerSubject``) itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

import redlease
from redlease.testing import RedisServer, find_servers

COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""

LEASE_MS = 30_000
"""Every lock's lease: never expires within a round."""

WARM_UP = 0.5
"""Seconds each round runs before counting (connections opened, scripts loaded)."""

SAMPLE_EVERY = 0.1
"""Seconds between two ``CLIENT LIST`` samples of the connections in use."""

STOP_GRACE = 30.0
"""Seconds the tasks get to finish their last cycle once a round ends."""

Cycle = Callable[[], Awaitable[None]]


class Subject:
    """A contestant: makes one task's cycle, and is closed after its round."""

    label = ""

    def cycle(self, index: int) -> Cycle:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class RedleaseSubject(Subject):
    label = "redlease AsyncClient(pipeline=True)"

    def __init__(self, url: str, run: str) -> None:
        self.client = redlease.AsyncClient.from_url(url, pipeline=True)
        self.run = run

    def cycle(self, index: int) -> Cycle:
        lock = self.client.lock(f"bench:pipeline:{self.run}:{index}")

        async def one() -> None:
            if not await lock.acquire():
                raise RuntimeError(f"redlease: {lock.name} was not free")
            await lock.release()

        return one

    async def close(self) -> None:
        await self.client.close()


class PeerSubject(Subject):
    label = "redis.asyncio"

    def __init__(self, url: str, run: str) -> None:
        self.pool = redis.asyncio.BlockingConnectionPool.from_url(url)
        self.conn = redis.asyncio.Redis(connection_pool=self.pool)
        self.delete = self.conn.register_script(COMPARE_AND_DELETE)
        self.run = run

    def cycle(self, index: int) -> Cycle:
        name, token = f"bench:peer:{self.run}:{index}", uuid.uuid4().hex
        conn, delete = self.conn, self.delete

        async def one() -> None:
            if not await conn.set(name, token, nx=True, px=LEASE_MS):
                raise RuntimeError(f"peer: {name} was not free")
            if not await delete(keys=[name], args=[token]):
                raise RuntimeError(f"peer: {name} was not held at release")

        return one

    async def close(self) -> None:
        await self.conn.aclose()
        await self.pool.aclose()


async def _connections(probe: redis.asyncio.Redis) -> int:
    """Server connections open now, the probe's own left out."""
    clients = await probe.client_list()
    return len(clients) - 1


async def _round(
    subject: Subject, probe: redis.asyncio.Redis, tasks: int, seconds: float
) -> tuple[float, int]:
    """(cycles per second, most connections at once) of ``tasks`` tasks for ``seconds``."""
    done = [0]
    stop = asyncio.Event()
    failures: list[BaseException] = []

    async def worker(index: int) -> None:
        cycle = subject.cycle(index)
        try:
            while not stop.is_set():
                await cycle()
                done[0] += 1
        except Exception as exc:  # reported after the round
            failures.append(exc)
            stop.set()

    most = [0]

    async def watch(duration: float) -> None:
        """Sample the connections until ``duration`` has passed (or a task failed)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + duration
        for _ in range(int(duration / SAMPLE_EVERY) + 2):  # bounded, and ends on time
            most[0] = max(most[0], await _connections(probe))
            left = until - loop.time()
            if left <= 0 or stop.is_set():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), min(SAMPLE_EVERY, left))

    for _ in range(200):  # bounded: the previous subject's connections are gone
        if await _connections(probe) == 0:
            break
        await asyncio.sleep(0.01)
    workers = [asyncio.create_task(worker(i)) for i in range(tasks)]
    try:
        await watch(WARM_UP)
        counted, started = done[0], time.perf_counter()
        await watch(seconds)
        cycles, elapsed = done[0] - counted, time.perf_counter() - started
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), STOP_GRACE)
    if failures:
        raise RuntimeError(f"{subject.label}: {failures[0]!r}") from failures[0]
    return cycles / elapsed, most[0]


async def _measure(url: str, tasks: int, seconds: float, rounds: int) -> dict[str, Any]:
    probe = redis.asyncio.Redis.from_url(url)
    rates: dict[str, list[float]] = {"redlease": [], "peer": []}
    most: dict[str, int] = {"redlease": 0, "peer": 0}
    try:
        for number in range(rounds):
            for key, make in (("redlease", RedleaseSubject), ("peer", PeerSubject)):
                subject = make(url, f"{number}:{uuid.uuid4().hex[:8]}")
                try:
                    rate, connections = await _round(subject, probe, tasks, seconds)
                finally:
                    await subject.close()
                rates[key].append(rate)
                most[key] = max(most[key], connections)
    finally:
        await probe.aclose()
    redlease_rate = statistics.median(rates["redlease"])
    peer_rate = statistics.median(rates["peer"])
    return {
        "tasks": tasks,
        "seconds": seconds,
        "rounds": rounds,
        "redlease": redlease_rate,
        "peer": peer_rate,
        "ratio": redlease_rate / peer_rate if peer_rate else float("inf"),
        "redlease_rounds": rates["redlease"],
        "peer_rounds": rates["peer"],
        "connections": most["redlease"],
        "peer_connections": most["peer"],
    }


def measure(url: str, tasks: int = 1000, seconds: float = 3.0, rounds: int = 3) -> dict[str, Any]:
    """Cycles per second (acquire + release on distinct names) of ``tasks`` asyncio tasks
    through one redlease ``AsyncClient``, against redis.asyncio issuing two commands per cycle
    in the same run: medians of ``rounds`` interleaved rounds of ``seconds`` each, their ratio,
    and the most server connections each used. Runs its own event loop (call it from sync
    code); ``url`` is a server nothing else is using, since connections are counted on it."""
    return asyncio.run(_measure(url, tasks, seconds, rounds))


def report(result: dict[str, Any]) -> None:
    print(
        f"{result['tasks']:,} tasks, {result['rounds']} rounds of {result['seconds']:g} s "
        "(medians; acquire+release cycles per second)"
    )
    rows = [
        ("redlease AsyncClient", result["redlease"], result["connections"]),
        ("redis.asyncio (blocking pool)", result["peer"], result["peer_connections"]),
    ]
    for label, rate, connections in rows:
        print(f"  {label:<30} {rate:>10,.0f} cycles/s   {connections:>4} connections at most")
    print(f"  ratio redlease / redis.asyncio: {result['ratio']:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", help="a server binary label to pick (default: the first)")
    args = parser.parse_args(argv)
    servers = find_servers()
    if args.server:
        servers = [s for s in servers if args.server.lower() in s.label.lower()]
    if not servers:
        sys.exit("no matching redis-server or valkey-server found")
    with RedisServer(servers[0]) as server:
        print(f"server: {servers[0].label} at {server.url}")
        started = time.perf_counter()
        report(measure(server.url, args.tasks, args.seconds, args.rounds))
        print(f"  ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
