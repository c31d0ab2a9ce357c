"""Java and Python on one lock: a Redisson waiter's share and longest wait behind redlease's line.

    python benchmarks/interop.py             # 6 s per run, 2 redlease + 2 Redisson workers
    python benchmarks/interop.py --seconds 3 --runs 3

Redisson's side is ``redlease.peers.RedissonLock``, a driver of Redisson's lock protocol (its
keys, arguments, scripts' effects, channel and message) and its ``tryLock(wait)`` loop, each
worker on its own connection (as separate JVMs). redlease's workers are processes with a
client each. Every worker loops ``acquire -> 1 ms of work -> release`` on one name for the
run's wall time; a Redisson ``tryLock(3 s)`` that runs out counts as a failure (one cut short
by the end of the run does not). Printed per configuration (median over ``--runs``): holds per
worker of each side, the Redisson share of all holds, the longest Redisson wait, and Redisson
failures.

Then the hand-over latency both ways (``--latency-rounds``, default 200; ``--latency-only``
skips the runs above): a waiter blocked on the lock (a redlease ``acquire`` behind a Redisson
hold, then a Redisson ``tryLock`` behind a redlease hold), the holder lets go, and the time
from just before the unlock command is sent until the waiter's call returns holding the lock;
printed as median and p95 next to one round trip (``PING``) measured in the same run. The
floor of a hand-over is about two round trips: the unlock script (which publishes ``0``), then
the woken waiter's try. The same is measured for the fair lock and the read-write lock (write
side) in Redisson's layout (``layout="redisson"``), whose Redisson side is the stand-in the
interop tests use (``redlease.testing.RedissonFairLock``, ``RedissonReadWriteLock``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis

from redlease import Client
from redlease._core.keys import LockKeys
from redlease.peers import RedissonLock
from redlease.testing import RedisServer, RedissonFairLock, RedissonReadWriteLock

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
        wait = min(JAVA_WAIT, max(0.01, end - time.time()))
        started = time.monotonic()
        if java.try_lock(wait=wait):
            longest = max(longest, time.monotonic() - started)
            holds += 1
            time.sleep(WORK)
            java.unlock()
        else:
            longest = max(longest, time.monotonic() - started)
            failures += wait >= JAVA_WAIT  # a wait cut short by the run's end is no failure
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


def _until(condition: Callable[[], bool], what: str, bound: float = 10.0) -> None:
    """Wait (polling, bounded) until the waiter is set up: not part of what is timed."""
    end = time.monotonic() + bound
    while not condition():
        if time.monotonic() > end:
            raise RuntimeError(f"not within {bound} s: {what}")
        time.sleep(0.001)


def _java_listening(raw: redis.Redis, name: str) -> bool:
    """The Redisson thread's pub/sub connection (named ``name``) has its channel subscribed."""
    return any(
        c.get("name") == name and c.get("sub") == "1" for c in raw.client_list(_type="pubsub")
    )


def handover_latency(url: str, rounds: int) -> dict[str, list[float]]:
    """Seconds per round: ``rtt`` (PING), ``to_redlease`` (Redisson unlock -> the blocked
    redlease waiter holds), ``to_redisson`` (redlease release -> the blocked Redisson waiter
    holds). One holder and one waiter at a time, each waiter on a thread of its own."""
    name = f"interop-latency:{uuid.uuid4().hex[:8]}"
    java_conn = f"redisson-{uuid.uuid4().hex[:8]}"
    raw: redis.Redis = redis.Redis.from_url(url, decode_responses=True)
    waiter_client, holder_client = Client.from_url(url), Client.from_url(url)
    java = RedissonLock(f"{url}?client_name={java_conn}", name)
    queue = LockKeys.for_name(name).line
    out: dict[str, list[float]] = {"rtt": [], "to_redlease": [], "to_redisson": []}

    def redlease_waits(held_at: list[float]) -> None:
        lock = waiter_client.lock(name)
        if lock.acquire(timeout=10):
            held_at.append(time.perf_counter())
            lock.release()

    def redisson_waits(held_at: list[float]) -> None:
        if java.try_lock(wait=10):
            held_at.append(time.perf_counter())
            java.unlock()

    try:
        raw.ping()  # connected before timing
        for _ in range(rounds):
            started = time.perf_counter()
            raw.ping()
            out["rtt"].append(time.perf_counter() - started)
        for _ in range(rounds):
            # Redisson's unlock -> a redlease waiter blocked in acquire
            assert java.try_lock(wait=5)
            held_at: list[float] = []
            thread = threading.Thread(target=redlease_waits, args=(held_at,))
            thread.start()
            _until(lambda: raw.zcard(queue) == 1, "the redlease waiter in line")
            _until(lambda: raw.pubsub_numsub(java.channel)[0][1] >= 1, "redlease listening")
            started = time.perf_counter()
            assert java.unlock()
            thread.join(15)
            out["to_redlease"].append(held_at[0] - started)

            # redlease's release -> a Redisson waiter blocked in tryLock
            lock = holder_client.lock(name)
            assert lock.acquire(timeout=10)
            java_held_at: list[float] = []
            thread = threading.Thread(target=redisson_waits, args=(java_held_at,))
            thread.start()
            _until(lambda: _java_listening(raw, java_conn), "the Redisson waiter listening")
            started = time.perf_counter()
            lock.release()
            thread.join(15)
            out["to_redisson"].append(java_held_at[0] - started)
    finally:
        java.close()
        waiter_client.close()
        holder_client.close()
        raw.close()
    return out


def _one_handover(
    hold: Callable[[], object],
    let_go: Callable[[], object],
    wait: Callable[[], bool],
    ready: Callable[[], bool],
) -> float:
    """Seconds from just before ``let_go()`` until ``wait()``, blocked on another thread since
    ``ready()``, returns holding."""
    assert hold()
    held_at: list[float] = []

    def waiter() -> None:
        if wait():
            held_at.append(time.perf_counter())

    thread = threading.Thread(target=waiter)
    thread.start()
    _until(ready, "the waiter waiting")
    started = time.perf_counter()
    let_go()
    thread.join(15)
    return held_at[0] - started


def _rounds(
    raw: redis.Redis,
    rounds: int,
    java: Any,
    ours: list[Any],
    java_conn: str,
    redlease_ready: Callable[[], bool],
) -> tuple[list[float], list[float]]:
    """``rounds`` hand-overs each way between ``java`` (a Redisson stand-in's lock or side)
    and redlease's locks ``ours`` (one to hold, one to wait)."""

    def ours_wait() -> bool:
        if not ours[0].acquire(timeout=10):
            return False
        ours[0].release()
        return True

    def java_wait() -> bool:
        if not java.try_lock(wait=10):
            return False
        java.unlock()
        return True

    to_ours, to_java = [], []
    for _ in range(rounds):
        to_ours.append(
            _one_handover(lambda: java.try_lock(wait=5), java.unlock, ours_wait, redlease_ready)
        )
        to_java.append(
            _one_handover(
                lambda: ours[1].acquire(timeout=10),
                ours[1].release,
                java_wait,
                lambda: _java_listening(raw, java_conn),
            )
        )
    return to_ours, to_java


def layout_latency(url: str, rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """Hand-overs both ways (Redisson -> redlease, redlease -> Redisson), seconds per round,
    for the fair lock and the read-write lock's write side, each in Redisson's layout."""
    raw: redis.Redis = redis.Redis.from_url(url, decode_responses=True)
    clients = [Client.from_url(url) for _ in range(2)]
    out = {}
    try:
        name = f"interop-latency:{uuid.uuid4().hex[:8]}"
        conn = f"redisson-{uuid.uuid4().hex[:8]}"
        fair = RedissonFairLock(f"{url}?client_name={conn}", name)
        out["fair lock"] = _rounds(
            raw,
            rounds,
            fair,
            [c.fair_lock(name, layout="redisson") for c in clients],
            conn,
            lambda: raw.llen(fair.line) == 1,
        )
        fair.close()
        name = f"interop-latency:{uuid.uuid4().hex[:8]}"
        conn = f"redisson-{uuid.uuid4().hex[:8]}"
        rw = RedissonReadWriteLock(f"{url}?client_name={conn}", name)
        out["rw lock (write)"] = _rounds(
            raw,
            rounds,
            rw.write,
            [c.rw_lock(name, layout="redisson").write_lock() for c in clients],
            conn,
            lambda: int(raw.pubsub_numsub(rw.channel)[0][1]) >= 1,
        )
        rw.close()
    finally:
        for client in clients:
            client.close()
        raw.close()
    return out


def _ms(values: list[float]) -> str:
    p95 = statistics.quantiles(values, n=20)[18] if len(values) > 1 else values[0]
    return f"median {statistics.median(values) * 1000:7.3f} ms   p95 {p95 * 1000:7.3f} ms"


def print_latency(url: str, rounds: int) -> None:
    got = handover_latency(url, rounds)
    print(f"\nhand-over latency, {rounds} rounds each way")
    print(f"  {'one round trip (PING)':<42} {_ms(got['rtt'])}")
    print(f"  {'Redisson unlock -> redlease waiter holds':<42} {_ms(got['to_redlease'])}")
    print(f"  {'redlease release -> Redisson waiter holds':<42} {_ms(got['to_redisson'])}")
    for kind, (to_ours, to_java) in layout_latency(url, rounds).items():
        print(f"  {kind + ': Redisson -> redlease':<42} {_ms(to_ours)}")
        print(f"  {kind + ': redlease -> Redisson':<42} {_ms(to_java)}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--latency-rounds", type=int, default=200)
    parser.add_argument("--latency-only", action="store_true")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        if args.latency_only:
            print(f"server {server.binary.label}")
            print_latency(server.url, args.latency_rounds)
            return
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
        print_latency(server.url, args.latency_rounds)


if __name__ == "__main__":
    main()
