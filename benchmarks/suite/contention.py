"""Section contention: N processes on one name."""

import itertools
import math
import multiprocessing as mp
import os
import queue
import statistics
import time
from collections.abc import Sequence
from typing import Any

import redis

from .common import READY_TIMEOUT, ContentionResult, Context, note, print_table, progress, quantile
from .subjects import CONTENDED, SYNC_LOCKS, Subject

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
