"""Leader election: how soon another candidate leads, and how soon a deposed leader knows.

    python benchmarks/election.py                     # both sides, 7 runs each, lease 2 s
    python benchmarks/election.py --runs 3 --side sync --lease 1.5 --server redis-7.0.15

Candidates are processes of their own (this script run with ``--candidate``), on a private
server (``redlease.testing.RedisServer``); each campaigns as long as it lives and prints when
it leads and when it learns it lost (``time.monotonic()``: one clock for every process of a
Linux machine). Measured, per side (sync: ``Client``; asyncio: ``AsyncClient`` with
``cancel_on_loss=True``):

takeover after SIGKILL   3 candidates; the leader is killed: time from the kill until another
                         says it leads (goal: within the lease + 0.2 s: the dead leader's lease
                         ends at most a lease after its last renewal, and the first candidate
                         in line leads about a round trip later; a replacement candidate
                         keeps 3 in the race)
takeover after SIGSTOP   the leader is stopped: time until another leads (same goal)
frozen leader learns     the stopped leader is resumed (SIGCONT) once another leads: time from
                         the SIGCONT until its ``term.lost`` is set
hand-over on resign      two candidates in one process (threads or tasks): time from the
                         leader leaving its block until the other leads (goal: about one
                         round trip; no process start, no lease to wait for)

Medians (and min/max) over ``--runs``. Stops only the processes it started, by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import signal
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from children import Child

import redlease
from redlease.testing import RedisServer, find_server, find_servers


def _say(*words: object) -> None:
    print(*words, flush=True)


# --- a candidate (a child process) -----------------------------------------------------------


def candidate_sync(url: str, name: str, lease: float) -> None:
    client = redlease.Client.from_url(url, watchdog_timeout=lease)
    election = client.election(name)
    _say("ready")
    while True:
        try:
            with election.leadership() as term:
                _say("leading", term.token, time.monotonic())
                term.lost.wait()
                _say("lost", time.monotonic())
        except redlease.LeaseLostError:
            pass


async def candidate_async(url: str, name: str, lease: float) -> None:
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=lease)
    election = client.election(name)
    _say("ready")
    while True:
        try:
            async with election.leadership(cancel_on_loss=True) as term:
                _say("leading", term.token, time.monotonic())
                await asyncio.Event().wait()
        except redlease.LeaseLostError:
            _say("lost", time.monotonic())


# --- the parent ----------------------------------------------------------------------------


def candidate(side: str, url: str, name: str, lease: float) -> Child:
    return Child(__file__, "--candidate", side, url, name, str(lease), quiet=True)


def next_leader(candidates: list[Child], timeout: float) -> tuple[Child, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for each in candidates:
            try:
                words = each.lines.get(timeout=0.005)
            except queue.Empty:
                continue
            if words[0] == "leading":
                return each, float(words[2])
    raise SystemExit(f"nobody led within {timeout} s")


def race(side: str, url: str, lease: float, runs: int) -> dict[str, list[float]]:
    """SIGKILL and SIGSTOP runs with 3 candidate processes."""
    name = f"bench:election:{uuid.uuid4().hex[:8]}"
    started: list[Child] = []

    def spawn(count: int) -> list[Child]:
        batch = [candidate(side, url, name, lease) for _ in range(count)]
        started.extend(batch)
        for each in batch:
            if each.next(60) != ["ready"]:
                raise SystemExit("a candidate did not start")
        return batch

    out: dict[str, list[float]] = {"kill": [], "stop": [], "learns": []}
    try:
        pool = spawn(3)
        leader, _ = next_leader(pool, 60)
        for _ in range(runs):
            killed = time.monotonic()
            leader.signal(signal.SIGKILL)
            leader.stop()
            pool.remove(leader)
            leader, led_at = next_leader(pool, lease + 30)
            out["kill"].append(led_at - killed)
            pool.extend(spawn(1))
        for _ in range(runs):
            frozen = time.monotonic()
            leader.signal(signal.SIGSTOP)
            others = [c for c in pool if c is not leader]
            successor, led_at = next_leader(others, lease + 30)
            out["stop"].append(led_at - frozen)
            resumed = time.monotonic()
            leader.signal(signal.SIGCONT)
            words = leader.next(lease + 30)
            if words[0] != "lost":
                raise SystemExit(f"the resumed leader said {words}")
            out["learns"].append(float(words[1]) - resumed)
            leader = successor
    finally:
        for each in started:
            if each.proc.poll() is None:
                each.signal(signal.SIGCONT)
            each.stop()
    return out


def resign_sync(url: str, lease: float, runs: int) -> list[float]:
    name = f"bench:election:{uuid.uuid4().hex[:8]}"
    times: list[float] = []

    def follow(election: Any, led: list[float]) -> None:
        with election.leadership():
            led.append(time.monotonic())

    with (
        redlease.Client.from_url(url, watchdog_timeout=lease) as a,
        redlease.Client.from_url(url, watchdog_timeout=lease) as b,
    ):
        for _ in range(runs):
            led: list[float] = []
            with a.election(name).leadership():
                thread = threading.Thread(target=follow, args=(b.election(name), led))
                thread.start()
                time.sleep(0.05)  # the follower waits in line
                left = time.monotonic()
            thread.join(lease + 10)
            if not led:
                raise SystemExit("the follower never led")
            times.append(led[0] - left)
    return times


async def resign_async(url: str, lease: float, runs: int) -> list[float]:
    name = f"bench:election:{uuid.uuid4().hex[:8]}"
    times: list[float] = []

    async def follow(election: Any, led: list[float]) -> None:
        async with election.leadership():
            led.append(time.monotonic())

    async with (
        redlease.AsyncClient.from_url(url, watchdog_timeout=lease) as a,
        redlease.AsyncClient.from_url(url, watchdog_timeout=lease) as b,
    ):
        for _ in range(runs):
            led: list[float] = []
            async with a.election(name).leadership():
                task = asyncio.ensure_future(follow(b.election(name), led))
                await asyncio.sleep(0.05)  # the follower waits in line
                left = time.monotonic()
            await asyncio.wait_for(task, lease + 10)
            times.append(led[0] - left)
    return times


def shown(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"median {statistics.median(ms):8.1f} ms   min {ms[0]:8.1f}   max {ms[-1]:8.1f}"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--candidate"]:
        side, url, name, lease = argv[1:5]
        if side == "sync":
            candidate_sync(url, name, float(lease))
        else:
            asyncio.run(candidate_async(url, name, float(lease)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--lease", type=float, default=2.0, help="watchdog_timeout (s)")
    parser.add_argument("--side", choices=["sync", "async", "both"], default="both")
    parser.add_argument("--server", help="binary label (default: the newest found)")
    args = parser.parse_args(argv)
    binary = find_server()
    if args.server:
        binary = next((s for s in find_servers() if s.label == args.server), None) or binary
    sides = ["sync", "async"] if args.side == "both" else [args.side]
    print(f"server {binary.label}, lease {args.lease} s, {args.runs} runs, python "
          f"{sys.version.split()[0]}, {os.cpu_count()} cpus")  # fmt: skip
    with RedisServer(binary) as server:
        for side in sides:
            got = race(side, server.url, args.lease, args.runs)
            resign: Any = (
                resign_sync(server.url, args.lease, args.runs)
                if side == "sync"
                else asyncio.run(resign_async(server.url, args.lease, args.runs))
            )
            print(f"{side}:")
            goal = f"goal <= {args.lease + 0.2:g} s"
            print(f"  takeover after SIGKILL  {shown(got['kill'])}   ({goal})")
            print(f"  takeover after SIGSTOP  {shown(got['stop'])}")
            print(f"  frozen leader learns    {shown(got['learns'])}   (after SIGCONT)")
            print(f"  hand-over on resign     {shown(resign)}")


if __name__ == "__main__":
    main()
