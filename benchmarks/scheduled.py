"""Runs per tick of a scheduled job on 3 instances (processes), each ticking at nearly the same
times, on a private server: ``client.scheduled_lock`` against the obvious ``Lock`` around the
job (goal: exactly 1 run per tick).

    python benchmarks/scheduled.py                    # 20 ticks, 0.5 s apart: ~40 s
    python benchmarks/scheduled.py --ticks 50 --jitter 0.2 --at-least 0.3
    python benchmarks/scheduled.py --server valkey

Each instance is a process of its own with its own client (two sync, one asyncio). At each
tick, ``--interval`` s apart from a start time they share, each instance calls the job late by
a random 0..``--jitter`` s (ticks and clocks a little apart, as on several machines). The job
counts its run in a per-tick key and takes ``--work`` s. Subjects:

* ``scheduled_lock``: ``@client.scheduled_lock(name, at_most_for=10, at_least_for=AT_LEAST)``
* ``scheduled_lock, at_least_for=0``: the same without the at-least time
* ``Lock (try, run, release)``: ``if lock.acquire(blocking=False): try: job() finally:
  lock.release()``, the 15 lines a user writes by hand

Printed per subject: the median, min and max runs per tick, and how many ticks ran exactly
once, never, or more than once.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter

import redis

import redlease
from redlease.testing import RedisServer, ServerBinary, find_servers

SUBJECTS = {
    "scheduled": "scheduled_lock",
    "scheduled0": "scheduled_lock, at_least_for=0",
    "lock": "Lock (try, run, release)",
}


def _ticks(args: argparse.Namespace, start: float) -> list[tuple[int, float]]:
    """(tick, when) of each tick, late by a random 0..jitter s."""
    return [
        (tick, start + tick * args.interval + random.uniform(0, args.jitter))
        for tick in range(args.ticks)
    ]


def instance_sync(args: argparse.Namespace) -> None:
    raw = redis.Redis.from_url(args.url)
    client = redlease.Client.from_url(args.url)

    def job(tick: int) -> None:
        raw.incr(f"{args.name}:runs:{tick}")
        time.sleep(args.work)

    if args.subject == "lock":
        lock = client.lock(args.name, lease=10)

        def run(tick: int) -> None:
            if lock.acquire(blocking=False):
                try:
                    job(tick)
                finally:
                    lock.release()

    else:
        at_least = args.at_least if args.subject == "scheduled" else 0
        run = client.scheduled_lock(args.name, at_most_for=10, at_least_for=at_least)(job)
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    for tick, when in _ticks(args, start):
        time.sleep(max(0.0, when - time.time()))
        run(tick)
    client.close()
    raw.close()
    print("done", flush=True)


async def instance_async(args: argparse.Namespace) -> None:
    raw = redis.asyncio.Redis.from_url(args.url)
    client = redlease.AsyncClient.from_url(args.url)

    async def job(tick: int) -> None:
        await raw.incr(f"{args.name}:runs:{tick}")
        await asyncio.sleep(args.work)

    if args.subject == "lock":
        lock = client.lock(args.name, lease=10)

        async def run(tick: int) -> None:
            if await lock.acquire(blocking=False):
                try:
                    await job(tick)
                finally:
                    await lock.release()

    else:
        at_least = args.at_least if args.subject == "scheduled" else 0
        run = client.scheduled_lock(args.name, at_most_for=10, at_least_for=at_least)(job)
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for tick, when in _ticks(args, float(line)):
        await asyncio.sleep(max(0.0, when - time.time()))
        await run(tick)
    await client.close()
    await raw.aclose()
    print("done", flush=True)


def measure(args: argparse.Namespace, url: str, subject: str) -> list[int]:
    """Runs of each tick for one subject, 3 instances."""
    name = f"bench:scheduled:{uuid.uuid4().hex[:8]}"
    common = [
        "--url", url, "--name", name, "--subject", subject, "--ticks", str(args.ticks),
        "--interval", str(args.interval), "--jitter", str(args.jitter),
        "--at-least", str(args.at_least), "--work", str(args.work),
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--instance", kind, *common],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for kind in ("sync", "sync", "async")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("an instance did not start")
        start = time.time() + 0.5
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start}\n")
            proc.stdin.flush()
        for proc in procs:
            out, _ = proc.communicate(timeout=args.ticks * args.interval + 60)
            if proc.returncode != 0 or "done" not in out:
                raise SystemExit(f"an instance failed (status {proc.returncode})")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    with redis.Redis.from_url(url) as r:
        return [int(r.get(f"{name}:runs:{tick}") or 0) for tick in range(args.ticks)]


def report(label: str, runs: list[int]) -> None:
    counts = Counter(runs)
    spread = ", ".join(f"{n} run{'s' if n != 1 else ''}: {counts[n]}" for n in sorted(counts))
    print(
        f"{label:32} median {statistics.median(runs):g}  min {min(runs)}  max {max(runs)}"
        f"  ticks with exactly 1: {counts[1]}/{len(runs)}  ({spread})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between ticks")
    parser.add_argument("--jitter", type=float, default=0.1, help="each tick late by 0..this")
    parser.add_argument("--at-least", type=float, default=0.3, help="the at_least_for measured")
    parser.add_argument("--work", type=float, default=0.02, help="seconds the job takes")
    parser.add_argument("--server", default="", help="server binary label (e.g. valkey)")
    parser.add_argument("--subjects", default=",".join(SUBJECTS), help="which, comma-separated")
    parser.add_argument("--instance", choices=["sync", "async"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--subject", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instance == "sync":
        instance_sync(args)
        return
    if args.instance == "async":
        asyncio.run(instance_async(args))
        return
    binaries: list[ServerBinary] = [s for s in find_servers() if args.server in s.label]
    if not binaries:
        raise SystemExit(f"no server binary matches {args.server!r}")
    binary = binaries[0]
    print(
        f"3 instances (2 sync, 1 asyncio processes), {args.ticks} ticks {args.interval:g} s apart,"
        f" each late by 0-{args.jitter:g} s; job {args.work:g} s; at_least_for {args.at_least:g} s;"
        f" {binary.label}",
        flush=True,
    )
    with RedisServer(binary) as server:
        for subject in args.subjects.split(","):
            report(SUBJECTS[subject], measure(args, server.url, subject))


if __name__ == "__main__":
    main()
