"""Redlock side by side: redlease on 3 and 5 masters, pottery's Redlock on the same masters, and
redlease's single-master lock, all in one run on private servers started for it.

    python benchmarks/bench_redlock.py            # about 70 s on 2 cores
    python benchmarks/bench_redlock.py --quick    # about 12 s
    python benchmarks/bench_redlock.py --server valkey --cycles 3000 --rounds 7

Five servers are started with ``redlease.testing.RedisServer`` (free loopback ports, nothing on
disk); the 3-master runs use the first three. Every lock gets an explicit 30 s lease, so no
watchdog runs and every peer does the same work: acquire a free lock, release it.

For each lock, rounds are interleaved with the other locks' rounds (so a noisy moment hurts
everyone alike). A round is ``--cycles`` acquire+release cycles on one name: cycles per second
is the round's count over its wall time (median over rounds); acquire latency is the time
``acquire()`` takes, every sample of every round pooled (p50, p99). Ratios compare acquire p50
with the single-master lock's and with pottery's on the same number of masters.

pottery is imported only when its rows run; without it (``pip install pottery``) they are
skipped with a note. The "raw pipeline floor" rows send the same acquire and release scripts
to every master on bare connections (pack once, send to all, read all) with no decision,
state or error handling: what this machine allows for one and for five masters. The asyncio
rows compare ``AsyncRedlockClient`` with ``AsyncClient``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from redlease._async.client import AsyncClient
from redlease._async.redlock import AsyncRedlockClient
from redlease._sync.client import Client
from redlease._sync.redlock import RedlockClient
from redlease.testing import RedisServer, ServerBinary, find_server, find_servers

LEASE_S = 30.0

TARGET_VS_SINGLE = 2.0
"""Target: 5-master acquire p50 at most this many times the single-master acquire p50."""


@dataclass
class Result:
    label: str
    masters: int
    rates: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    note: str | None = None

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else math.nan

    def pct(self, q: float) -> float:
        if not self.latencies:
            return math.nan
        ranked = sorted(self.latencies)
        return ranked[min(len(ranked) - 1, int(q * len(ranked)))]


@dataclass
class Peer:
    """A lock under test: ``acquire()`` and ``release()`` on one name, and a ``close``."""

    label: str
    masters: int
    acquire: Callable[[], Any]
    release: Callable[[], Any]
    close: Callable[[], Any]


# --- peers ----------------------------------------------------------------------------------


def redlease_single(url: str) -> Peer:
    client = Client.from_url(url)
    lock = client.lock(f"bench:{uuid.uuid4().hex[:8]}")
    return Peer(
        "redlease Lock",
        1,
        lambda: _check(lock.acquire(lease=LEASE_S)),
        lock.release,
        client.close,
    )


def redlease_redlock(urls: list[str]) -> Peer:
    client = RedlockClient.from_urls(urls)
    lock = client.lock(f"bench:{uuid.uuid4().hex[:8]}")
    return Peer(
        "redlease RedlockLock",
        len(urls),
        lambda: _check(lock.acquire(lease=LEASE_S)),
        lock.release,
        client.close,
    )


def pottery_redlock(urls: list[str]) -> Peer:
    from pottery import Redlock  # imported here: optional

    masters = [redis.Redis.from_url(url) for url in urls]
    lock = Redlock(
        key=f"bench:{uuid.uuid4().hex[:8]}", masters=set(masters), auto_release_time=LEASE_S
    )

    def close() -> None:
        for master in masters:
            master.close()

    return Peer(
        "pottery Redlock",
        len(urls),
        lambda: _check(lock.acquire(blocking=False)),
        lock.release,
        close,
    )


def raw_floor(urls: list[str]) -> Peer:
    """The same two scripts, pipelined to every master on bare redis-py connections, with no
    decision, state or error handling: the floor this machine allows for N masters."""
    from redlease._core import lock as core
    from redlease._core import redlock as redlock_core
    from redlease._core.keys import LockKeys

    clients = [redis.Redis.from_url(url) for url in urls]
    conns = []
    for client in clients:
        pool = client.connection_pool
        conn = pool.connection_class(**pool.connection_kwargs)
        conn.connect()
        conns.append(conn)
    keys = LockKeys.for_name(f"bench:{uuid.uuid4().hex[:8]}")
    owner = f"{uuid.uuid4()}:1"
    acquire_call = redlock_core.acquire_call(keys, owner, 0, LEASE_S)
    for client in clients:
        for script in (
            acquire_call.script,
            core.release_call(keys, owner, 1, request_id="", token=0).script,
        ):
            client.script_load(script.source)

    def send_all(call: Any) -> list[Any]:
        packed = conns[0]._command_packer.pack(
            "EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args
        )
        for conn in conns:
            conn.send_packed_command(packed, check_health=False)
        return [conn.read_response() for conn in conns]

    def acquire() -> None:
        _check(all(int(reply[0]) == 1 for reply in send_all(acquire_call)))

    def release() -> None:
        send_all(core.release_call(keys, owner, 1, request_id=uuid.uuid4().hex, token=0))

    def close() -> None:
        for conn in conns:
            conn.disconnect()
        for client in clients:
            client.close()

    return Peer("raw pipeline floor", len(urls), acquire, release, close)


def _check(acquired: bool) -> None:
    if not acquired:
        raise RuntimeError("a free lock was not acquired")


# --- measuring ------------------------------------------------------------------------------


def run_round(peer: Peer, result: Result, cycles: int) -> None:
    acquire, release, clock = peer.acquire, peer.release, time.perf_counter
    samples = []
    started = clock()
    for _ in range(cycles):
        t0 = clock()
        acquire()
        samples.append(clock() - t0)
        release()
    result.rates.append(cycles / (clock() - started))
    result.latencies.extend(samples)


async def run_round_async(
    acquire: Callable[[], Awaitable[Any]],
    release: Callable[[], Awaitable[Any]],
    result: Result,
    cycles: int,
) -> None:
    clock = time.perf_counter
    samples = []
    started = clock()
    for _ in range(cycles):
        t0 = clock()
        await acquire()
        samples.append(clock() - t0)
        await release()
    result.rates.append(cycles / (clock() - started))
    result.latencies.extend(samples)


def measure_sync(urls: list[str], rounds: int, cycles: int, warmup: int) -> list[Result]:
    makers: list[tuple[str, int, Callable[[], Peer]]] = [
        ("redlease Lock", 1, lambda: redlease_single(urls[0])),
        ("redlease RedlockLock", 3, lambda: redlease_redlock(urls[:3])),
        ("redlease RedlockLock", 5, lambda: redlease_redlock(urls[:5])),
        ("pottery Redlock", 3, lambda: pottery_redlock(urls[:3])),
        ("pottery Redlock", 5, lambda: pottery_redlock(urls[:5])),
        ("raw pipeline floor", 1, lambda: raw_floor(urls[:1])),
        ("raw pipeline floor", 5, lambda: raw_floor(urls[:5])),
    ]
    peers: list[tuple[Peer, Result]] = []
    results: list[Result] = []
    for label, masters, make in makers:
        result = Result(label, masters)
        results.append(result)
        try:
            peer = make()
        except ImportError as exc:
            result.note = f"skipped: {exc} (pip install pottery)"
            continue
        peers.append((peer, result))
    try:
        for peer, _ in peers:
            for _ in range(warmup):
                peer.acquire()
                peer.release()
        for _ in range(rounds):
            for peer, result in peers:
                run_round(peer, result, cycles)
    finally:
        for peer, _ in peers:
            peer.close()
    return results


async def measure_async(urls: list[str], rounds: int, cycles: int, warmup: int) -> list[Result]:
    single = AsyncClient.from_url(urls[0])
    three = AsyncRedlockClient.from_urls(urls[:3])
    five = AsyncRedlockClient.from_urls(urls[:5])
    rows = [
        (Result("redlease AsyncLock", 1), single.lock(f"bench:{uuid.uuid4().hex[:8]}")),
        (Result("redlease AsyncRedlockLock", 3), three.lock(f"bench:{uuid.uuid4().hex[:8]}")),
        (Result("redlease AsyncRedlockLock", 5), five.lock(f"bench:{uuid.uuid4().hex[:8]}")),
    ]

    async def acquire_with(lock: Any) -> None:
        _check(await lock.acquire(lease=LEASE_S))

    try:
        for _, lock in rows:
            for _ in range(warmup):
                await acquire_with(lock)
                await lock.release()
        for _ in range(rounds):
            for result, lock in rows:
                await run_round_async(
                    lambda lock=lock: acquire_with(lock), lock.release, result, cycles
                )
    finally:
        for client in (single, three, five):
            await client.close()
    return [result for result, _ in rows]


# --- output ---------------------------------------------------------------------------------


def table(title: str, results: list[Result], pottery: dict[int, Result] | None) -> None:
    """Print one table; a skipped lock shows its note instead of figures."""
    single = results[0].pct(0.5)
    headers = ["lock", "masters", "cycles/s", "acquire p50 us", "p99 us", "x single p50"]
    if pottery is not None:
        headers.append("x pottery p50")
    rows: list[list[str]] = []
    for r in results:
        if r.note:
            rows.append([r.label, str(r.masters), r.note])
            continue
        row = [r.label, str(r.masters), f"{r.rate:,.0f}", f"{r.pct(0.5) * 1e6:,.0f}"]
        row += [f"{r.pct(0.99) * 1e6:,.0f}", f"{r.pct(0.5) / single:.2f}"]
        if pottery is not None:
            peer = pottery.get(r.masters)
            mine = r.label.startswith("redlease") and peer is not None and not peer.note
            row.append(f"{r.pct(0.5) / peer.pct(0.5):.2f}" if mine and peer else "-")
        rows.append(row)
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) == len(headers):
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: list[str]) -> str:
        if len(cells) < len(headers):  # a note runs on past the columns
            return f"{cells[0].ljust(widths[0])}  {cells[1].rjust(widths[1])}  {cells[2]}"
        out = [cells[0].ljust(widths[0])]
        out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(out)

    print(f"\n{title}")
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def pick_binary(label: str | None) -> ServerBinary:
    if not label:
        return find_server()
    for binary in find_servers():
        if label in binary.label:
            return binary
    raise SystemExit(f"no server binary matching {label!r}: {[b.label for b in find_servers()]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    parser.add_argument("--server", help="server binary label to use (e.g. redis, valkey)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per lock")
    parser.add_argument("--cycles", type=int, help="acquire+release cycles per round")
    parser.add_argument("--no-async", action="store_true", help="skip the asyncio rows")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    cycles = args.cycles or (300 if args.quick else 1000)
    warmup = 50 if args.quick else 200
    binary = pick_binary(args.server)
    try:
        import pottery

        have_pottery = True
    except ImportError:
        have_pottery = False
    print(
        f"bench_redlock: {binary.label}, Python {platform.python_version()}, "
        f"redis-py {redis.__version__}, {os.cpu_count()} CPUs, {rounds} rounds x {cycles} cycles"
    )
    if not have_pottery:
        print("  note: pottery is not installed; its rows are skipped (pip install pottery)")
    servers: list[RedisServer] = []
    try:
        for _ in range(5):
            servers.append(RedisServer(binary).start())
        urls = [s.url for s in servers]
        sync_results = measure_sync(urls, rounds, cycles, warmup)
        pottery = {r.masters: r for r in sync_results if r.label == "pottery Redlock"}
        table("sync: acquire+release of a free lock", sync_results, pottery)
        async_results = (
            [] if args.no_async else asyncio.run(measure_async(urls, rounds, cycles, warmup))
        )
        if async_results:
            table("asyncio: acquire+release of a free lock", async_results, None)
    finally:
        for server in servers:
            server.close()
    single = sync_results[0].pct(0.5)
    five = next(r for r in sync_results if r.label == "redlease RedlockLock" and r.masters == 5)
    print("\ntargets")
    ratio = five.pct(0.5) / single
    print(
        f"  {verdict(ratio <= TARGET_VS_SINGLE)}  5-master acquire p50 "
        f"{five.pct(0.5) * 1e6:,.0f} us is {ratio:.2f}x the single-master "
        f"{single * 1e6:,.0f} us (target <= {TARGET_VS_SINGLE}x)"
    )
    floors = {r.masters: r.pct(0.5) for r in sync_results if r.label == "raw pipeline floor"}
    if 1 in floors and 5 in floors:
        print(
            f"  note  the raw 5-master pipeline alone is {floors[5] / single:.2f}x the "
            f"single-master lock ({floors[5] / floors[1]:.2f}x the raw 1-master pipeline): "
            f"redlease adds {(five.pct(0.5) - floors[5]) * 1e6:,.0f} us on five masters"
        )
    peer = pottery.get(5)
    if peer is None or peer.note:
        print("  ----  faster than pottery: not measured (pottery not installed)")
    else:
        print(
            f"  {verdict(five.pct(0.5) < peer.pct(0.5))}  5-master acquire p50 "
            f"{five.pct(0.5) * 1e6:,.0f} us vs pottery's {peer.pct(0.5) * 1e6:,.0f} us"
            f" ({peer.pct(0.5) / five.pct(0.5):.1f}x faster)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
