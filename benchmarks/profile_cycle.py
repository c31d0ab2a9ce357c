"""Where the client's CPU goes in one uncontended acquire+release (issue #33), on a private
server: cProfile over N cycles of redlease's ``Client`` or ``AsyncClient`` against redis-py's
``Lock`` (sync or ``redis.asyncio``), the client's CPU time per cycle (``time.process_time``,
without the profiler) and the functions with the most own time per cycle.

    python benchmarks/profile_cycle.py                 # sync and asyncio, 3,000 cycles
    python benchmarks/profile_cycle.py --api asyncio --top 30 --server valkey
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio
from suite.common import choose_server

import redlease
from redlease.testing import RedisServer

LEASE_S = 30
Cycle = Callable[[], Any]


def _sync_subjects(url: str) -> dict[str, tuple[Cycle, Callable[[], None]]]:
    client = redlease.Client.from_url(url)
    lock = client.lock("profile:redlease")
    leased = client.lock("profile:redlease-lease")
    conn = redis.Redis.from_url(url)
    peer = conn.lock("profile:redis-py", timeout=LEASE_S)

    def redlease_cycle() -> None:
        lock.acquire()
        lock.release()

    def redlease_lease_cycle() -> None:
        leased.acquire(lease=LEASE_S)
        leased.release()

    def peer_cycle() -> None:
        peer.acquire()
        peer.release()

    return {
        "redlease Client": (redlease_cycle, client.close),
        "redlease Client lease=30s": (redlease_lease_cycle, lambda: None),
        "redis-py Lock": (peer_cycle, conn.close),
    }


def _cpu_per_cycle(cycle: Cycle, cycles: int) -> float:
    started = time.process_time()
    for _ in range(cycles):
        cycle()
    return (time.process_time() - started) / cycles * 1e6


def _show(stats: pstats.Stats, cycles: int, top: int) -> None:
    rows: list[tuple[float, int, str]] = []
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (path, line, func), (_cc, calls, own, _cum, _callers) in raw.items():
        where = f"{path.rsplit('/site-packages/', 1)[-1].rsplit('/src/', 1)[-1]}:{line}"
        rows.append((own / cycles * 1e6, calls // cycles, f"{func} ({where})"))
    rows.sort(reverse=True)
    print(f"    {'own us/cycle':>12}  {'calls/cycle':>11}  function")
    for own, calls, name in rows[:top]:
        print(f"    {own:12.1f}  {calls:11d}  {name}")
    total_calls = sum(c for (_, _, _), (_, c, _, _, _) in raw.items()) / cycles
    print(f"    Python function calls per cycle: {total_calls:.0f}")


def profile_sync(url: str, cycles: int, top: int) -> None:
    subjects = _sync_subjects(url)
    for label, (cycle, _close) in subjects.items():
        for _ in range(300):
            cycle()
        cpu = min(_cpu_per_cycle(cycle, cycles) for _ in range(3))
        profiler = cProfile.Profile()
        profiler.runcall(lambda c=cycle: [c() for _ in range(cycles)])  # type: ignore[misc]
        print(f"\n{label} (sync): client CPU {cpu:.0f} us/cycle (best of 3 x {cycles})")
        _show(pstats.Stats(profiler), cycles, top)
    for _cycle, close in subjects.values():
        close()


async def _async_subjects(url: str) -> dict[str, tuple[Callable[[], Awaitable[Any]], Any]]:
    client = redlease.AsyncClient.from_url(url)
    lock = client.lock("profile:aredlease")
    conn = redis.asyncio.Redis.from_url(url)
    peer = conn.lock("profile:aredis-py", timeout=LEASE_S)

    async def redlease_cycle() -> None:
        await lock.acquire()
        await lock.release()

    async def peer_cycle() -> None:
        await peer.acquire()
        await peer.release()

    return {
        "redlease AsyncClient": (redlease_cycle, client.aclose),
        "redis-py asyncio Lock": (peer_cycle, conn.aclose),
    }


async def _async_cpu(cycle: Callable[[], Awaitable[Any]], cycles: int) -> float:
    started = time.process_time()
    for _ in range(cycles):
        await cycle()
    return (time.process_time() - started) / cycles * 1e6


async def _async_profile(url: str, cycles: int, top: int) -> None:
    subjects = await _async_subjects(url)
    for label, (cycle, _close) in subjects.items():
        for _ in range(300):
            await cycle()
        cpu = min([await _async_cpu(cycle, cycles) for _ in range(3)])
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(cycles):
            await cycle()
        profiler.disable()
        print(f"\n{label}: client CPU {cpu:.0f} us/cycle (best of 3 x {cycles})")
        _show(pstats.Stats(profiler), cycles, top)
    for _cycle, close in subjects.values():
        await close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", choices=["sync", "asyncio", "both"], default="both")
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--top", type=int, default=15, help="functions shown (15)")
    parser.add_argument("--server", help="server label or path substring, e.g. valkey")
    args = parser.parse_args()
    binary = choose_server(args.server)
    with RedisServer(binary) as server:
        print(f"{binary.label}, redlease {redlease.__version__}, redis {redis.__version__}")
        if args.api in ("sync", "both"):
            profile_sync(server.url, args.cycles, args.top)
        if args.api in ("asyncio", "both"):
            asyncio.run(_async_profile(server.url, args.cycles, args.top))


if __name__ == "__main__":
    main()
