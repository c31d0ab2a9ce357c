"""Section scale: each run in a fresh process on a fresh server."""

import asyncio
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

import redlease

from .common import Context, note, print_table
from .subjects import async_available

# --- section: scale -------------------------------------------------------------------------
#
# Each measurement runs in a fresh process (this file with --scale-child), on a fresh server,
# so its peak RSS is its own; this process samples the server's client count meanwhile.

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""benchmarks/: bench.py runs each scale child (``--scale-child``), pipeline.py is measured."""

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
    They start one by one, each once the previous one is in the client's local line (its
    arrival: a thread that has set an event but not yet called acquire has no place)."""
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
            in_line = time.monotonic() + 10
            # (its place, as tests/integration/test_local_line.py counts it)
            while client._lines.waiting(lock._line) < i + 1:
                if time.monotonic() > in_line:
                    raise RuntimeError(f"thread {i} did not join the line")
                time.sleep(0.0005)
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
    here = BENCHMARKS
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
            cmd = [sys.executable, os.path.join(BENCHMARKS, "bench.py"), "--scale-child", spec]
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
