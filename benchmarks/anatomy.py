"""Where a redlease cycle's time goes (issue #15 goals 2 to 4), on a private server.

    python benchmarks/anatomy.py                  # all three sections, about 30 s
    python benchmarks/anatomy.py --sections server,gc --server valkey

server
    The server's CPU time per uncontended acquire+release (``INFO cpu``, user and system:
    commands, scripts and socket I/O) and the part of it spent in scripts (``INFO
    commandstats`` of ``EVALSHA``, which includes the commands a script runs) for redlease's
    ``Client`` against the raw floor (``SET NX PX`` and a compare-and-delete ``EVALSHA``),
    and each command's calls per cycle (Lua-internal ones included).
contention
    Commands per critical section in steady state: ``procs`` processes loop acquire, GET and
    SET a counter, release; ``INFO commandstats`` is reset after a warm-up and read 2 s later.
gc
    1,000 asyncio tasks on distinct names through one ``AsyncClient(pipeline=True)``: cycles per
    second with the garbage collector on and off, and the collections of each generation with
    the time they took (``gc.callbacks``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import time
import uuid
from typing import Any

import redis

import redlease
from redlease.testing import RedisServer, ServerBinary, find_servers

COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def _per_cycle(probe: redis.Redis, cycles: int) -> tuple[float, dict[str, float]]:
    """Microseconds per cycle in scripts (their commands included), and each command's calls
    per cycle, since the reset."""
    stats: dict[str, Any] = probe.info("commandstats")
    stats.pop("cmdstat_config|resetstat", None)
    stats.pop("cmdstat_config", None)
    scripts = sum(int(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_eval"))
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) / cycles for k, v in stats.items()}
    return scripts / cycles, dict(sorted(calls.items(), key=lambda kv: -kv[1]))


def _cpu_seconds(probe: redis.Redis) -> float:
    cpu: dict[str, Any] = probe.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def section_server(url: str, cycles: int = 3000) -> None:
    client = redlease.Client.from_url(url)
    lock = client.lock("anatomy:server")
    conn = redis.Redis.from_url(url)
    delete = conn.register_script(COMPARE_AND_DELETE)
    token = uuid.uuid4().hex
    for _ in range(200):  # scripts loaded, connections open
        lock.acquire()
        lock.release()
        conn.set("anatomy:raw", token, nx=True, px=30_000)
        delete(keys=["anatomy:raw"], args=[token])
    print("server time per uncontended acquire+release (INFO cpu; INFO commandstats)")
    for label in ("redlease Client", "raw floor"):
        conn.config_resetstat()
        cpu = _cpu_seconds(conn)
        started = time.perf_counter()
        for _ in range(cycles):
            if label == "raw floor":
                conn.set("anatomy:raw", token, nx=True, px=30_000)
                delete(keys=["anatomy:raw"], args=[token])
            else:
                lock.acquire()
                lock.release()
        wall = (time.perf_counter() - started) / cycles * 1e6
        cpu = (_cpu_seconds(conn) - cpu) / cycles * 1e6
        scripts, calls = _per_cycle(conn, cycles)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in calls.items() if v >= 0.5)
        print(
            f"  {label:16} server CPU {cpu:5.1f} us, in scripts {scripts:5.1f} us,"
            f" of {wall:6.1f} us/cycle; calls: {shown}"
        )
    client.close()
    conn.close()


def _contender(url: str, stop_at: float, done: Any) -> None:
    client = redlease.Client.from_url(url)
    lock = client.lock("anatomy:contended")
    conn = redis.Redis.from_url(url)
    while time.time() < stop_at:
        lock.acquire()
        conn.set("anatomy:counter", int(conn.get("anatomy:counter") or 0) + 1)
        lock.release()
    client.close()
    done.put(True)


def section_contention(url: str, procs: int) -> None:
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    stop_at = time.time() + 5.0
    workers = [ctx.Process(target=_contender, args=(url, stop_at, done)) for _ in range(procs)]
    for w in workers:
        w.start()
    probe = redis.Redis.from_url(url)
    time.sleep(2.0)  # started, connected, in line
    probe.config_resetstat()
    before = int(probe.get("anatomy:counter") or 0)
    time.sleep(2.0)
    sections = int(probe.get("anatomy:counter") or 0) - before
    _, calls = _per_cycle(probe, max(1, sections))
    total = sum(calls.values())
    for w in workers:
        w.join(timeout=30)
    print(f"commands per critical section, {procs} processes, steady state: {total:.3f}")
    print("  " + ", ".join(f"{k} {v:.3f}" for k, v in calls.items()))
    probe.close()


async def _pipelined(url: str, tasks: int, seconds: float) -> tuple[float, dict[int, list[float]]]:
    client = redlease.AsyncClient.from_url(url, pipeline=True)
    stop = False
    cycles = 0

    async def worker(i: int) -> None:
        nonlocal cycles
        lock = client.lock(f"anatomy:gc:{i}")
        while not stop:
            await lock.acquire()
            await lock.release()
            cycles += 1

    running = [asyncio.create_task(worker(i)) for i in range(tasks)]
    await asyncio.sleep(1.0)
    collections: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    began = [0.0]

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            entry = collections[info["generation"]]
            entry[0] += 1
            entry[1] += time.perf_counter() - began[0]

    gc.callbacks.append(watch)
    first, started = cycles, time.perf_counter()
    await asyncio.sleep(seconds)
    rate = (cycles - first) / (time.perf_counter() - started)
    gc.callbacks.remove(watch)
    stop = True
    await asyncio.gather(*running)
    await client.close()
    return rate, collections


def section_gc(url: str, tasks: int = 1000, seconds: float = 3.0) -> None:
    print(f"{tasks:,} asyncio tasks on distinct names, AsyncClient(pipeline=True), {seconds} s")
    for enabled in (True, False):
        if not enabled:
            gc.disable()
        try:
            rate, collections = asyncio.run(_pipelined(url, tasks, seconds))
        finally:
            gc.enable()
        spent = sum(t for _, t in collections.values())
        shown = ", ".join(f"gen{g} {n:.0f} ({t:.2f} s)" for g, (n, t) in collections.items())
        state = "gc on " if enabled else "gc off"
        print(f"  {state} {rate:8,.0f} cycles/s; collections: {shown}; {spent:.2f} s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", default="server,contention,gc")
    parser.add_argument("--procs", type=int, default=8, help="contention processes (8)")
    parser.add_argument("--server", help="a server binary label to pick (default: the first)")
    args = parser.parse_args()
    binaries: list[ServerBinary] = find_servers()
    binary = next((b for b in binaries if args.server and args.server in b.label), binaries[0])
    sections = args.sections.split(",")
    with RedisServer(binary) as server:
        print(f"server: {binary.label}")
        if "server" in sections:
            section_server(server.url)
        if "contention" in sections:
            section_contention(server.url, args.procs)
        if "gc" in sections:
            section_gc(server.url)


if __name__ == "__main__":
    main()
