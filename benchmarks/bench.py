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

A section is a function ``(Context) -> None`` in a module of ``suite/`` (``common.py`` holds
what they share), registered in ``SECTIONS`` below; a lock under test is a factory registered in
``suite/subjects.py``'s ``SYNC_LOCKS`` (and ``CONTENDED`` to run in the contention section) or
``ASYNC_LOCKS``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import multiprocessing as mp
import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence

from suite.common import Context, Settings, choose_server
from suite.contention import section_contention
from suite.scale import scale_child, section_scale
from suite.summary import section_summary
from suite.uncontended import section_ping, section_uncontended

SECTIONS: dict[str, Callable[[Context], None]] = {
    "ping": section_ping,
    "uncontended": section_uncontended,
    "contention": section_contention,
    "scale": section_scale,
    "summary": section_summary,
}

# --- main -----------------------------------------------------------------------------------


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
