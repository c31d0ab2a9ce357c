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
    SET a counter, release; ``INFO commandstats`` is reset once every process has run a few
    critical sections (waited for, up to 60 s) and read 2 s later.
gc
    1,000 asyncio tasks on distinct names through one ``AsyncClient(pipeline=True)``, and through
    redis.asyncio (``benchmarks/pipeline.py``'s two subjects): cycles per second and CPU per
    cycle with the garbage collector on and off, the time it took (``gc.callbacks``), and the
    GC-tracked objects each task keeps alive while its call is in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import time
import uuid
from collections.abc import Callable
from typing import Any

import pipeline  # benchmarks/pipeline.py: the pipelined subjects
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


def _contender(url: str, stop: Any, done: Any) -> None:
    client = redlease.Client.from_url(url)
    lock = client.lock("anatomy:contended")
    conn = redis.Redis.from_url(url)
    while not stop.is_set():
        lock.acquire()
        conn.set("anatomy:counter", int(conn.get("anatomy:counter") or 0) + 1)
        lock.release()
    client.close()
    done.put(True)


def section_contention(url: str, procs: int) -> None:
    ctx = mp.get_context("spawn")
    done, stop = ctx.Queue(), ctx.Event()
    workers = [ctx.Process(target=_contender, args=(url, stop, done)) for _ in range(procs)]
    for w in workers:
        w.start()
    probe = redis.Redis.from_url(url)
    # started, connected, in line: on a loaded machine spawning and importing can take more
    # than a fixed pause, so the window opens once every process has done a critical section
    # or two (the counter at 4 per process), bounded at 60 s
    opens_by = time.monotonic() + 60.0
    while int(probe.get("anatomy:counter") or 0) < 4 * procs and time.monotonic() < opens_by:
        time.sleep(0.1)
    time.sleep(0.5)
    probe.config_resetstat()
    before = int(probe.get("anatomy:counter") or 0)
    time.sleep(2.0)
    sections = int(probe.get("anatomy:counter") or 0) - before
    _, calls = _per_cycle(probe, max(1, sections))
    stop.set()
    total = sum(calls.values())
    for w in workers:
        w.join(timeout=30)
    print(f"commands per critical section, {procs} processes, steady state: {total:.3f}")
    print("  " + ", ".join(f"{k} {v:.3f}" for k, v in calls.items()))
    probe.close()


async def _pipelined(
    make: Callable[[str, str], Any], url: str, tasks: int, seconds: float, enabled: bool
) -> tuple[float, float, dict[int, list[float]], float]:
    """``tasks`` tasks cycling through one subject of ``benchmarks/pipeline.py``: (cycles per
    second, the process's CPU per cycle, the collections of each generation with their time,
    GC-tracked objects alive per task in flight beyond those before it started)."""
    subject = make(url, f"anatomy:{uuid.uuid4().hex[:8]}")
    stop = False
    cycles = 0

    async def worker(i: int) -> None:
        nonlocal cycles
        cycle = subject.cycle(i)
        while not stop:
            await cycle()
            cycles += 1

    gc.collect()
    before = len(gc.get_objects())
    running = [asyncio.create_task(worker(i)) for i in range(tasks)]
    await asyncio.sleep(1.0)
    gc.collect()  # only what is alive (reachable) counts
    in_flight = (len(gc.get_objects()) - before) / tasks
    if not enabled:
        gc.disable()
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
    try:
        first, started, cpu = cycles, time.perf_counter(), time.process_time()
        await asyncio.sleep(seconds)
        counted = cycles - first
        rate = counted / (time.perf_counter() - started)
        cpu_per_cycle = (time.process_time() - cpu) / max(1, counted)
    finally:
        gc.callbacks.remove(watch)
        gc.enable()
    stop = True
    await asyncio.gather(*running)
    await subject.close()
    return rate, cpu_per_cycle, collections, in_flight


def section_gc(url: str, tasks: int = 1000, seconds: float = 3.0) -> None:
    """redlease's pipeline and redis.asyncio (``benchmarks/pipeline.py``'s subjects), each
    with the garbage collector on and off: how much of a cycle the collector takes, and how
    many GC-tracked objects each task keeps alive while its call is in flight (what every
    collection of the young generations has to scan and promote)."""
    print(f"{tasks:,} asyncio tasks on distinct names, {seconds} s per run")
    for label, make in (
        ("redlease pipeline", pipeline.RedleaseSubject),
        ("redis.asyncio", pipeline.PeerSubject),
    ):
        for enabled in (True, False):
            rate, cpu, collections, in_flight = asyncio.run(
                _pipelined(make, url, tasks, seconds, enabled)
            )
            spent = sum(t for _, t in collections.values())
            shown = ", ".join(
                f"gen{g} {n / max(1, rate * seconds) * 1000:.2f}"
                for g, (n, _) in collections.items()
            )
            state = "gc on " if enabled else "gc off"
            print(
                f"  {label:<18} {state} {rate:8,.0f} cycles/s, {cpu * 1e6:6.1f} us CPU per cycle"
                f" ({spent / max(1, rate * seconds) * 1e6:5.1f} us collecting); tracked objects"
                f" per task in flight {in_flight:5.1f}; collections per 1,000 cycles: {shown}"
            )


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
