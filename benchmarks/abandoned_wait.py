"""A wait abandoned during a link freeze: how soon a live waiter holds after the release.

    python benchmarks/abandoned_wait.py                         # 5 runs on each server found
    python benchmarks/abandoned_wait.py --runs 3 --server valkey-8.1.8 --kind fair
    PYTHONPATH=/path/to/old/src python benchmarks/abandoned_wait.py   # another checkout's code

The scenario of issue 31 item 3, on a private server (``redlease.testing.RedisServer``),
loopback. A holder (its own client, renewed by its watchdog) holds the lock. A second client,
through a ``TcpProxy`` (socket timeouts 0.5 s), has a waiter T1 with
``acquire(timeout=1.5, lease=--lease)``; its link freezes once T1 waits and listens; T1 gives
up, and neither its leave nor the give-back sent after it reaches the server (3 s frozen,
then every proxied connection cut). T2, another thread of that client, then waits for the
lock (and listens, checked with ``PUBSUB NUMSUB``), and the holder releases. Measured: the
time from the start of the holder's ``release()`` call to T2's ``acquire`` returning
(``time.monotonic()``, one process). Before the give-back the lock went to T1's place for its
whole lease; after, T2 holds within a round trip or two.

Medians (and min/max) over ``--runs``. Stops only the servers and proxies it started.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

import redlease
from redlease._core.fair import REDISSON_FAIR
from redlease._core.keys import CLASSIC
from redlease._core.lock import REDLEASE
from redlease.testing import RedisServer, TcpProxy, find_servers

BOUND = 120.0
"""Seconds any one wait of a run may take before the run is called failed."""

KINDS: dict[str, tuple[Callable[[Any, str], Any], Any]] = {
    "lock": (lambda c, n: c.lock(n), REDLEASE),
    "fair": (lambda c, n: c.fair_lock(n), REDLEASE),
    "redisson-fair": (lambda c, n: c.fair_lock(n, layout="redisson"), REDISSON_FAIR),
}


def _wait(condition: Callable[[], object], what: str, timeout: float = BOUND) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"abandoned_wait.py: {what} not seen within {timeout} s")
        time.sleep(0.002)


def _line(r: redis.Redis, key: str) -> list[str]:
    kind = r.type(key)
    if kind == b"zset":
        return [m.decode() for m in r.zrange(key, 0, -1)]
    if kind == b"list":
        return [m.decode() for m in r.lrange(key, 0, -1)]
    return []


def _listening(r: redis.Redis, channels: tuple[str, ...]) -> bool:
    counts = dict(r.pubsub_numsub(*channels))
    return all(counts.get(c.encode(), 0) > 0 for c in channels)


def one_run(server: RedisServer, kind: str, lease: float) -> float:
    make, layout = KINDS[kind]
    name = f"bench:abandoned:{uuid.uuid4().hex[:8]}"
    keys = layout.keys(name, CLASSIC)
    r = redis.Redis.from_url(server.url)
    with (
        TcpProxy(("127.0.0.1", server.port)) as proxy,
        redlease.Client.from_url(server.url) as holder,
        redlease.Client.from_url(
            proxy.url + "?socket_timeout=0.5&socket_connect_timeout=0.5"
        ) as client,
    ):
        held = make(holder, name)
        assert held.acquire(timeout=5)

        def listens_where_the_head_is_told() -> bool:
            line = _line(r, keys.line)
            if not line:
                return False
            channel, private = layout.listen(keys, line[0].split(" ")[0])
            return _listening(r, (channel, private or channel))

        def t1() -> None:
            with contextlib.suppress(redlease.RedleaseError):
                make(client, name).acquire(timeout=1.5, lease=lease)

        first = threading.Thread(target=t1)
        first.start()
        _wait(listens_where_the_head_is_told, "T1 waiting and listening")
        proxy.freeze()
        first.join(BOUND)
        time.sleep(3.0)  # the give-back sent in the background times out too
        proxy.cut()
        proxy.thaw()
        if len(_line(r, keys.line)) != 1:
            raise SystemExit("abandoned_wait.py: T1's place left the line: no scenario")

        got: list[float] = []

        def t2() -> None:
            lock = make(client, name)
            if lock.acquire(timeout=BOUND):
                got.append(time.monotonic())
                lock.release()

        second = threading.Thread(target=t2)
        second.start()
        _wait(lambda: len(_line(r, keys.line)) == 2, "T2 in line")
        _wait(listens_where_the_head_is_told, "the client listening again")
        started = time.monotonic()
        held.release()
        second.join(BOUND + 10)
        if not got:
            raise SystemExit("abandoned_wait.py: T2 never held the lock")
    r.close()
    return got[0] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lease", type=float, default=20.0, help="T1's lease (seconds)")
    parser.add_argument("--kind", choices=sorted(KINDS), default="lock")
    parser.add_argument("--server", action="append", help="a server label (default: all)")
    args = parser.parse_args()
    print(f"redlease from {redlease.__file__}")
    for binary in find_servers():
        if args.server and binary.label not in args.server:
            continue
        with RedisServer(binary) as server:
            times = [one_run(server, args.kind, args.lease) for _ in range(args.runs)]
        ms = [t * 1000 for t in times]
        print(
            f"{binary.label} {args.kind}: release -> live waiter holds, median "
            f"{statistics.median(ms):.1f} ms (min {min(ms):.1f}, max {max(ms):.1f}; "
            f"{args.runs} runs, T1's lease {args.lease:g} s)"
        )


if __name__ == "__main__":
    main()
