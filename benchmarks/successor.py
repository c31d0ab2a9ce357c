"""A dead holder's successor: how soon after a SIGKILLed holder's lease runs out does the first
waiter in line hold?

    python benchmarks/successor.py          # lock, fair, lease-semaphore; 1 2 4 16 waiters
    python benchmarks/successor.py --primitive lock fair fair-redisson rw rw-redisson \\
        lease-semaphore --waiters 1 2 4 16 --trials 5 --side sync asyncio

A holder process takes the primitive (default settings: the watchdog renews its lease,
``watchdog_timeout`` 3 s unless ``--watchdog``), N waiter processes block on it (each its own
client, so each waits in the server's line), and the holder is SIGKILLed. The parent reads when
the dead holder's lease ends on the server (the lock key's ``PEXPIRETIME``; the permit's lease
end for the lease semaphore) and each waiter prints the wall-clock time its acquire returned:
the figure is the first waiter's time minus that end (one clock: every process is on this
machine). Medians and worst over ``--trials``, per primitive, side and N. Goal (issue 31):
median <= 50 ms, worst <= 200 ms. The first to hold is also checked to be the first in line
(FIFO: "-" for a primitive without a line), and the script calls from the kill until the
first waiter holds are counted (INFO commandstats; every waiter's re-checks in that time): only
the first in line re-checks at the lease's end, the others about once per lease each.

Primitives: ``lock``, ``fair`` and ``fair-redisson`` (``fair_lock``, both layouts), ``rw`` and
``rw-redisson`` (``rw_lock(...).write_lock()``, both layouts), ``lease-semaphore`` (one permit).
The counting ``semaphore`` has no leases (a dead holder's permit never comes back), so no
dead-holder successor to time. The election's takeover: ``benchmarks/election.py``.

Needs a server with ``PEXPIRETIME`` (Redis/Valkey 7+). Stops only the processes it started,
by PID. The machine's load shows in the figures: run it on a quiet machine to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import sys
import time
import uuid
from typing import Any

import redis
from children import Child

import redlease
from redlease.testing import RedisServer, find_server, find_servers

PRIMITIVES = ("lock", "fair", "fair-redisson", "rw", "rw-redisson", "lease-semaphore")
LINED = ("lock", "fair", "fair-redisson", "rw")
"""The primitives whose waiters wait in a line (the others: "-" for "first in line first")."""
HOLD_AFTER = 0.05
"""How long each waiter holds before it releases (the rest of the line then goes by hand-over)."""


def _say(*words: object) -> None:
    print(*words, flush=True)


# --- a holder or waiter (a child process) ------------------------------------------------------


def _primitive(client: Any, kind: str, name: str) -> Any:
    if kind == "lock":
        return client.lock(name)
    if kind in ("fair", "fair-redisson"):
        return client.fair_lock(name, layout="redisson" if kind == "fair-redisson" else "redlease")
    if kind in ("rw", "rw-redisson"):
        return client.rw_lock(
            name, layout="redisson" if kind == "rw-redisson" else "redlease"
        ).write_lock()
    if kind == "lease-semaphore":
        return client.lease_semaphore(name)
    raise SystemExit(f"unknown primitive {kind!r}")


def child_sync(role: str, url: str, kind: str, name: str, watchdog: float) -> None:
    with redlease.Client.from_url(url, watchdog_timeout=watchdog) as client:
        thing = _primitive(client, kind, name)
        if kind == "lease-semaphore" and role == "holder":
            thing.try_set_permits(1)
        _say("ready")
        got = thing.acquire()
        _say("held", repr(time.time()))
        if role == "holder":
            time.sleep(600)
        time.sleep(HOLD_AFTER)
        if kind == "lease-semaphore":
            thing.release(got)
        else:
            thing.release()


async def child_async(role: str, url: str, kind: str, name: str, watchdog: float) -> None:
    async with redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog) as client:
        thing = _primitive(client, kind, name)
        if kind == "lease-semaphore" and role == "holder":
            await thing.try_set_permits(1)
        _say("ready")
        got = await thing.acquire()
        _say("held", repr(time.time()))
        if role == "holder":
            await asyncio.sleep(600)
        await asyncio.sleep(HOLD_AFTER)
        if kind == "lease-semaphore":
            await thing.release(got)
        else:
            await thing.release()


# --- the parent ----------------------------------------------------------------------------------


def child(role: str, side: str, url: str, kind: str, name: str, watchdog: float) -> Child:
    return Child(__file__, "--child", role, side, url, kind, name, str(watchdog))


def _lease_end_ms(r: redis.Redis, kind: str, name: str, client: redlease.Client) -> int:
    """When the dead holder's lease ends on the server (unix ms)."""
    if kind == "lease-semaphore":
        leases = client.lease_semaphore(name)._keys.leases
        ends = r.zrange(leases, 0, -1, withscores=True)
        if len(ends) != 1:
            raise SystemExit(f"expected one leased permit, found {ends}")
        return int(ends[0][1])
    key = name if kind != "rw" else client.rw_lock(name).write_lock()._rw.writer
    end = int(r.execute_command("PEXPIRETIME", key))
    if end < 0:
        raise SystemExit(f"{key!r} has no expiry ({end})")
    return end


def _script_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(
        int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
    )


def trial(side: str, url: str, kind: str, waiters: int, watchdog: float) -> tuple[float, bool, int]:
    """(seconds from the lease's end to the first waiter holding, the first in line was the
    first to hold, script calls from the kill to that moment)."""
    name = f"bench:successor:{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(url)
    started: list[Child] = []
    try:
        holder = child("holder", side, url, kind, name, watchdog)
        started.append(holder)
        for expected in ("ready", "held"):
            if holder.next(60)[0] != expected:
                raise SystemExit("the holder did not start")
        line: list[Child] = []
        for _ in range(waiters):  # one at a time, so that the line's order is known
            each = child("waiter", side, url, kind, name, watchdog)
            started.append(each)
            if each.next(60) != ["ready"]:
                raise SystemExit("a waiter did not start")
            time.sleep(0.2)  # it took its place
            line.append(each)
        time.sleep(0.3)
        holder.stop()
        time.sleep(0.05)  # a renewal already on the wire has landed
        with redlease.Client.from_url(url) as client:
            end = _lease_end_ms(r, kind, name, client) / 1000
        calls = _script_calls(r)
        deadline = time.monotonic() + watchdog + 30
        while time.monotonic() < deadline:
            for each in line:
                try:
                    words = each.lines.get(timeout=0.002)
                except queue.Empty:
                    continue
                if words[0] == "held":
                    spent = _script_calls(r) - calls
                    for rest in line:
                        rest.proc.wait(60)
                    return float(words[1]) - end, each is line[0], spent
        raise SystemExit(f"no waiter held within {watchdog + 30} s of the kill")
    finally:
        for each in started:
            each.stop()
        r.delete(name)
        r.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--primitive", nargs="+", default=["lock", "fair", "lease-semaphore"])
    parser.add_argument("--waiters", nargs="+", type=int, default=[1, 2, 4, 16])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--side", nargs="+", default=["sync"], choices=["sync", "asyncio"])
    parser.add_argument("--watchdog", type=float, default=3.0)
    parser.add_argument("--server", help="a server label, e.g. redis-7.0.15 (default: newest)")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        role, side, url, kind, name, watchdog = args.child
        if side == "sync":
            child_sync(role, url, kind, name, float(watchdog))
        else:
            asyncio.run(child_async(role, url, kind, name, float(watchdog)))
        return
    for kind in args.primitive:
        if kind not in PRIMITIVES:
            parser.error(f"--primitive: {kind!r} is not one of {', '.join(PRIMITIVES)}")
    binary = find_server()
    if args.server:
        found = [b for b in find_servers() if b.label == args.server]
        if not found:
            parser.error(f"--server: no {args.server!r} among {[b.label for b in find_servers()]}")
        binary = found[0]
    with RedisServer(binary) as server:
        _say(
            f"# {binary.label}, "
            f"watchdog_timeout {args.watchdog} s, {args.trials} trials, Python "
            f"{sys.version.split()[0]}"
        )
        _say(
            "| primitive | side | waiters | median ms | worst ms | first in line first | "
            "script calls (median) |"
        )
        _say("|---|---|---|---|---|---|---|")
        for kind in args.primitive:
            for side in args.side:
                for n in args.waiters:
                    runs = [
                        trial(side, server.url, kind, n, args.watchdog) for _ in range(args.trials)
                    ]
                    ms = [d * 1000 for d, _, _ in runs]
                    fifo = sum(1 for _, first, _ in runs if first)
                    order = f"{fifo}/{len(runs)}" if kind in LINED else "-"
                    calls = statistics.median(c for _, _, c in runs)
                    _say(
                        f"| {kind} | {side} | {n} | {statistics.median(ms):.0f} | "
                        f"{max(ms):.0f} | {order} | {calls:.0f} |"
                    )


if __name__ == "__main__":
    main()
