"""The group lock against ``MultiLock`` over the same values: round trips and time per
acquire + release.

    python benchmarks/group_lock.py                    # 100 values, 7 rounds of 20 each
    python benchmarks/group_lock.py --values 100 --rounds 7 --iterations 20 --side sync asyncio

Both take N values all-or-nothing, uncontended, with the watchdog's lease: ``client.group_lock(
group, values)`` (one hash, one script call per acquire and per release) and ``MultiLock`` of
N ``client.lock(value)`` (one lock each, taken in turn). Per round, each subject runs
``--iterations`` acquire + release pairs, alternately (the order swapped each round), on one
private server it started (stopped by its PID); a round's figure is its median time per pair,
and the ratio MultiLock / group lock is taken within each round (both saw the same load), its
median reported. Round trips: the server's own count of commands run (``INFO commandstats``,
EVALSHA and EVAL, each one round trip) over the pairs, per pair, and the commands the server ran
for them (the scripts' own included). Timing figures depend on the machine
and its load; the ratio and the command counts are what to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

import redlease
from redlease.testing import RedisServer, find_server


def counts(raw: redis.Redis) -> tuple[int, int]:
    """(script calls, commands) the server ran so far: EVALSHA/EVAL, each a round trip
    (redlease sends nothing else on an uncontended acquire or release), and every command,
    those the scripts ran included (INFO's own calls left out)."""
    stats = raw.info("commandstats")
    scripts = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))
    return scripts, sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def subjects(client: Any, values: list[str]) -> dict[str, Any]:
    group = client.group_lock(f"bench:{uuid.uuid4().hex[:8]}", values)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    multi_type = redlease.AsyncMultiLock if isinstance(client, redlease.AsyncClient) else (
        redlease.MultiLock
    )  # fmt: skip
    multi = multi_type(*(client.lock(prefix + v) for v in values))
    return {"group lock": group, "MultiLock": multi}


Run = tuple[Callable[[str], float], Callable[[], None]]
"""Time ``--iterations`` pairs of one subject (seconds per pair); close the client."""


def run_sync(url: str, values: list[str], iterations: int) -> Run:
    client = redlease.Client.from_url(url)
    locks = subjects(client, values)

    def pairs(which: str) -> float:
        lock = locks[which]
        began = time.perf_counter()
        for _ in range(iterations):
            lock.acquire()
            lock.release()
        return (time.perf_counter() - began) / iterations

    return pairs, client.close


def run_async(url: str, values: list[str], iterations: int) -> Run:
    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(_async_client(url))
    locks = subjects(client, values)

    async def go(lock: Any) -> float:
        began = time.perf_counter()
        for _ in range(iterations):
            await lock.acquire()
            await lock.release()
        return (time.perf_counter() - began) / iterations

    def close() -> None:
        loop.run_until_complete(client.close())
        loop.close()

    return (lambda which: loop.run_until_complete(go(locks[which]))), close


async def _async_client(url: str) -> redlease.AsyncClient:
    return redlease.AsyncClient.from_url(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--side", nargs="+", default=["sync", "asyncio"])
    args = parser.parse_args()
    values = [f"value-{i}" for i in range(args.values)]
    with RedisServer(find_server()) as server:
        raw = redis.Redis.from_url(server.url)
        print(f"server: {server.binary.label}, {args.values} values, {args.rounds} rounds of "
              f"{args.iterations} acquire + release pairs")  # fmt: skip
        for side in args.side:
            run = run_sync if side == "sync" else run_async
            pairs, close = run(server.url, values, args.iterations)
            for which in ("group lock", "MultiLock"):
                pairs(which)  # warm up: scripts loaded, connections made
            times: dict[str, list[float]] = {"group lock": [], "MultiLock": []}
            trips: dict[str, list[float]] = {"group lock": [], "MultiLock": []}
            cmds: dict[str, list[float]] = {"group lock": [], "MultiLock": []}
            ratios = []
            for r in range(args.rounds):
                order = ("group lock", "MultiLock") if r % 2 == 0 else ("MultiLock", "group lock")
                for which in order:
                    before = counts(raw)
                    times[which].append(pairs(which))
                    after = counts(raw)
                    trips[which].append((after[0] - before[0]) / args.iterations)
                    cmds[which].append((after[1] - before[1]) / args.iterations)
                ratios.append(times["MultiLock"][-1] / times["group lock"][-1])
            print(f"\n{side}:")
            header = f"{'median ms/pair':>15} {'round trips/pair':>17} {'commands/pair':>14}"
            print(f"  {'':12} {header}")
            for which in ("group lock", "MultiLock"):
                print(
                    f"  {which:12} {statistics.median(times[which]) * 1000:15.2f} "
                    f"{statistics.median(trips[which]):17.1f} "
                    f"{statistics.median(cmds[which]):14.1f}"
                )
            print(f"  MultiLock / group lock time, median of per-round ratios: "
                  f"{statistics.median(ratios):.1f}x")  # fmt: skip
            close()
        raw.close()


if __name__ == "__main__":
    main()
