"""Java and Python on one lock: a Redisson waiter's share and longest wait behind redlease's line.

    python benchmarks/interop.py             # 6 s per run, 2 redlease + 2 Redisson workers
    python benchmarks/interop.py --seconds 3 --runs 3

Redisson's side is ``redlease.peers.RedissonLock``: Redisson's own lock and unlock scripts and
its ``tryLock(wait)`` loop, each worker on its own connection (as separate JVMs). redlease's
workers are processes with a client each. Every worker loops ``acquire -> 1 ms of work ->
release`` on one name for the run's wall time; a Redisson ``tryLock(3 s)`` that runs out counts
as a failure. Printed per configuration (median over ``--runs``): holds per worker of each
side, the Redisson share of all holds, the longest Redisson wait, and Redisson failures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
import uuid
from collections.abc import Sequence

from redlease import Client
from redlease.peers import RedissonLock
from redlease.testing import RedisServer

WORK = 0.001
JAVA_WAIT = 3.0


def _redlease_worker(url: str, name: str, handoff: float, end: float, out: object) -> None:
    client = Client.from_url(url, handoff_window=handoff)
    lock = client.lock(name)
    holds = 0
    while time.time() < end:
        if lock.acquire(timeout=max(0.01, end - time.time())):
            holds += 1
            time.sleep(WORK)
            lock.release()
    client.close()
    out.put(holds)  # type: ignore[attr-defined]


def _java_worker(url: str, name: str, end: float, result: list[float]) -> None:
    java = RedissonLock(url, name)
    holds, failures, longest = 0, 0, 0.0
    while time.time() < end:
        started = time.monotonic()
        if java.try_lock(wait=min(JAVA_WAIT, max(0.01, end - time.time()))):
            longest = max(longest, time.monotonic() - started)
            holds += 1
            time.sleep(WORK)
            java.unlock()
        else:
            longest = max(longest, time.monotonic() - started)
            failures += 1
    java.close()
    result.extend([holds, failures, longest])


def one_run(url: str, handoff: float, seconds: float) -> tuple[list[int], list[list[float]]]:
    name = f"interop:{uuid.uuid4().hex[:8]}"
    end = time.time() + seconds + 0.5  # workers start together, half a second from now
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_redlease_worker, args=(url, name, handoff, end, out)) for _ in range(2)
    ]
    for proc in procs:
        proc.start()
    javas: list[list[float]] = [[], []]
    threads = [threading.Thread(target=_java_worker, args=(url, name, end, r)) for r in javas]
    while time.time() < end - seconds:
        time.sleep(0.01)
    for thread in threads:
        thread.start()
    redlease_holds = [out.get(timeout=seconds + 30) for _ in procs]
    for proc in procs:
        proc.join(30)
    for thread in threads:
        thread.join(seconds + 30)
    return redlease_holds, javas


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    with RedisServer() as server:
        print(f"server {server.binary.label}, {args.seconds:.0f} s per run, median of {args.runs}")
        print(
            f"{'configuration':<28} {'redlease holds/worker':>22} {'Redisson holds/worker':>22}"
            f" {'Redisson share':>15} {'longest Redisson wait':>22} {'tryLock fails':>14}"
        )
        for label, handoff in (("hand-over (default, 1 s)", 1.0), ("handoff_window=0", 0.0)):
            rows = [one_run(server.url, handoff, args.seconds) for _ in range(args.runs)]
            ours = statistics.median(statistics.mean(r) for r, _ in rows)
            theirs = statistics.median(statistics.mean(j[0] for j in js) for _, js in rows)
            share = statistics.median(
                sum(j[0] for j in js) / max(1, sum(r) + sum(j[0] for j in js)) for r, js in rows
            )
            longest = statistics.median(max(j[2] for j in js) for _, js in rows)
            fails = statistics.median(sum(j[1] for j in js) for _, js in rows)
            print(
                f"{label:<28} {ours:>22.0f} {theirs:>22.0f} {share:>14.1%} {longest:>21.3f}s"
                f" {fails:>14.0f}"
            )


if __name__ == "__main__":
    main()
