"""redlease under faults: worker processes contend for one lock while faults are injected; then
every hold is checked.

    python tools/chaos.py                      # every scenario, long runs (about 5 min)
    python tools/chaos.py --quick              # every scenario, short runs (under 2 min)
    python tools/chaos.py --scenario kill --scenario pause
    python tools/chaos.py --server valkey --workers 6
    python tools/chaos.py --scenario failover-rmw --seed 1 --seed 2 --seed 3

Each scenario starts its own servers (``redlease.testing.RedisServer`` on free loopback ports):
one for the lock and one for the protected resource, so that a fault of the lock server does
not take the resource's data with it. N worker processes (``--workers``) each loop:

    acquire (watchdog lease L) -> read both resources -> sleep (the critical section) ->
    write the unfenced resource (plain SET) -> write the fenced one (read with
    ``client.fenced_get`` beforehand, written with ``client.fenced_set``
    with the hold's fencing token) -> release

A resource's value is the list of the holds that wrote it, so a lost update is exact: a hold
whose write was acknowledged but whose id is missing from the final value. Every hold is
logged (worker, asked, start, end, token, write outcomes, release outcome, whether the holder
was told its lease was lost) with ``time.monotonic()``, one clock for every process of a
Linux machine; a hold's ``start`` is taken just after ``acquire`` returned and its ``end``
just before ``release`` is called, so two holds that overlap prove a broken exclusion.

Faults are bounded in time and touch only processes and proxies this script started. Each
one is aimed at a holder between its read and its write: the parent arms a trap and the next
worker to get there stops itself (SIGSTOP) until the parent has done the damage.

baseline            no fault
pause               the holder stays stopped for 2 L, then is resumed (SIGCONT)
kill                the holder is killed (SIGKILL); a new worker takes its place
restart             the lock server is killed and started again empty while the holder is
                    stopped (0.2 s in all, far less than its lease)
partition           the holder's network (a TcpProxy to each server) is frozen for 2 L; the
                    holder runs on, its writes wait in the network and land late
failover            master + replica, clients behind a proxy; replication stalls for L + 0.1 s
                    (the replica's copy of every hold expires), a holder takes the lock on the
                    master alone and is stopped; the replica is promoted (REPLICAOF NO ONE), the
                    proxy moved to it and every connection cut, the old master killed; the
                    holder resumes 0.2 s later
failover-confirmed  the same with replica-confirmed writes (replicas=1): the stopped holder's
                    hold was confirmed by the replica before replication stalled
failover-rmw        one run per seed (``--seed``; default 1 2 3, quick 1 2): master + replica,
                    clients behind a proxy, every worker contending for the lock with a fenced
                    read-modify-write in each hold; at moments drawn from the seed, replication
                    stalls (a few ms to 0.4 L: the replica misses the last hand-overs while its
                    copy of the holds and of the line stays alive), the master is killed, the
                    replica promoted and every client moved to it; two times in three a holder
                    is caught between its fenced read and its write and kept stopped across the
                    failover, then writes late: after 0.05-0.5 L, or (half of those) while a
                    holder of the new master with a token as high is between its own read and
                    write (the first such holder within 0.05-0.5 L)
reply-drop          replies to acquires and releases are dropped after the server ran them
                    (once: redlease sends again; twice in a row: the worker calls again)
pubsub-delay        the workers' pub/sub connections (only those) go through a proxy that
                    freezes now and then for 0.5-1.5 L: hand-over messages and wake-ups arrive
                    late, after their waiter re-checked by itself, or after it gave up
reentry-drop        every hold is re-entered (acquire twice, release twice); replies to the
                    re-entrant acquire and to the inner release are dropped after the server ran
                    them (once, twice, or every reply within the call's timeout)

postgres-rmw        in ``tools/chaos_postgres.py`` (it runs the servers, traps and failovers
                    of the modules below): the workers increment a PostgreSQL row with the SQL
                    fencing helpers, and without them, while holders are stopped past their
                    lease

Measured per scenario: overlapping holds; lost updates on the unfenced and on the fenced
resource; fenced writes refused as stale; leases lost and how many of those the holder was
told of (``on_lease_lost`` or ``LeaseLostError`` from release); the longest stretch with a
waiter but no holder; recovery (from each fault to the next hold of another worker); fencing
tokens handed out twice (two holds with one token, any scenario). For failover-rmw, per seed:
tokens handed out twice, fenced writes accepted, the fenced counter at the end (the resource
lists the holds that wrote it) and lost fenced updates (an accepted write missing from it; how
many of those had a token that another hold had too). Then each goal is marked PASS or FAIL.
The exit status is 0 only when every goal passes.

This file runs the scenarios and prints the result; the rest is in the modules beside it:

    chaos_worker.py     the worker process, the records it logs, what it shares with the parent
    chaos_run.py        the run of one scenario: settings, servers, proxies, workers, traps
    chaos_scenarios.py  the scenarios: what each sets up and the faults it injects
    chaos_analysis.py   the logged holds read back and measured
    chaos_report.py     the tables, the goals and their verdict, the notes
"""

from __future__ import annotations

import argparse
import inspect
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import chaos_report
from chaos_analysis import Result, analyze
from chaos_report import (
    HEADERS,
    goals,
    print_goals,
    print_notes,
    print_rmw_table,
    print_table,
    result_rows,
)
from chaos_run import Run, Settings, choose_server
from chaos_scenarios import SCENARIOS, Scenario
from chaos_worker import HAS_FENCING

import redlease

HAS_REPLICAS = "replicas" in inspect.signature(redlease.Client.__init__).parameters
DEFAULT_SEEDS = (1, 2, 3)
QUICK_SEEDS = (1, 2)
"""Seeds of the seeded scenarios when ``--seed`` is not given."""


def run_scenario(
    settings: Settings, scenario: Scenario, workdir: Path, seed: int | None = None
) -> Result:
    if scenario.replicas and not HAS_REPLICAS:
        return Result(
            scenario, available=False, notes=["replicas= not supported by Client"], seed=seed
        )
    repeats = scenario.repeats_quick if settings.quick else max(3, scenario.repeats_quick + 1)
    duration = settings.duration
    if settings.quick:
        duration = max(duration, scenario.quick_duration)
    local = Settings(**{**settings.__dict__, "repeats": repeats, "duration": duration})
    run = Run(local, scenario, workdir, seed)
    try:
        if scenario.setup is not None:
            scenario.setup(run)
        if not run.start_workers():
            run.notes.append("workers did not start: run called off")
        scenario.inject(run)
        run.sleep_until(run.end_at)
        run.finish()
        return analyze(run)
    finally:
        run.close()


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, list[str], list[int]]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="short runs, one or two faults each (under 2 min)"
    )
    p.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        help="run only this scenario (repeatable; default: all)",
    )
    p.add_argument("--workers", type=int, help="worker processes (default 4, quick 3)")
    p.add_argument("--lease", type=float, default=1.0, help="lease L in seconds (1.0)")
    p.add_argument("--cs", type=float, default=0.01, help="critical section in seconds (0.01)")
    p.add_argument("--duration", type=float, help="seconds per scenario (default 20, quick 6)")
    p.add_argument("--server", help="server label or path substring (default: the newest)")
    p.add_argument(
        "--start-method", default="spawn", choices=mp.get_all_start_methods(), help="(spawn)"
    )
    p.add_argument(
        "--seed",
        type=int,
        action="append",
        help="a seed of the seeded scenarios (failover-rmw), one run each (repeatable; "
        f"default {' '.join(map(str, DEFAULT_SEEDS))}, quick {' '.join(map(str, QUICK_SEEDS))})",
    )
    p.add_argument("--verbose", action="store_true", help="show the workers' redlease logs")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    a = p.parse_args(argv)
    chaos_report.MARKDOWN = a.markdown
    settings = Settings(
        quick=a.quick,
        workers=a.workers or (3 if a.quick else 4),
        lease=a.lease,
        cs=a.cs,
        duration=a.duration or (6.0 if a.quick else 20.0),
        repeats=1,
        binary=choose_server(a.server),
        start_method=a.start_method,
        verbose=a.verbose,
    )
    seeds = a.seed or list(QUICK_SEEDS if a.quick else DEFAULT_SEEDS)
    return settings, a.scenario or list(SCENARIOS), seeds


def main(argv: Sequence[str] | None = None) -> int:
    settings, names, seeds = parse_args(argv)
    print(
        f"redlease chaos check{' (quick)' if settings.quick else ''}: {settings.binary.label}, "
        f"{settings.workers} workers, lease {settings.lease:g} s, critical section "
        f"{settings.cs * 1000:g} ms, {settings.duration:g} s per scenario; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs"
    )
    if not HAS_FENCING:
        print("  note: fencing (Client.fenced_set) not available: fenced columns are n/a")
    started = time.monotonic()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="redlease-chaos-") as tmp:
        for name in names:
            scenario = SCENARIOS[name]
            for seed in seeds if scenario.seeded else [None]:
                t0 = time.monotonic()
                result = run_scenario(settings, scenario, Path(tmp), seed)
                results.append(result)
                print(
                    f"  {result.name}: {len(result.holds)} holds in {time.monotonic() - t0:.1f} s"
                )
    print_table(
        f"Faults (lease L = {settings.lease:g} s; {settings.workers} workers)",
        HEADERS,
        result_rows(results),
    )
    print_rmw_table(results)
    ok = print_goals(goals(results, settings.lease))
    print_notes(results)
    print(f"\n{'PASS' if ok else 'FAIL'}: done in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
