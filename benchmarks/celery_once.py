"""Celery tasks that never run twice (issue #24, section 3), against a real worker.

    .venv/bin/python benchmarks/celery_once.py                 # 20 rounds each, about a minute
    .venv/bin/python benchmarks/celery_once.py --rounds 50 --kills 10

A private server (broker, result backend, redlease) and ``celery worker -P prefork -c 4`` on
the app of ``tests/integration/celery_app.py`` (watchdog_timeout 2 s), as the tests start them.

duplicates
    Per round, 8 threads call ``delay()`` of one fresh key at the same moment; the runs the
    worker made of it beyond the first are duplicates (goal 0). ``held``: the first run lasts
    until the other 7 were dealt with (skipped at the worker, stage ``run``; answered with the
    first's ``AsyncResult``, stage ``enqueue``), so any second run would overlap it. ``short``:
    the task returns at once: a later ``delay()`` finding the first run over may run again (a
    run after another, never beside it: stage ``run`` excludes only while running); the runs
    that overlapped another are counted apart (goal 0).
takeover
    A run's worker process killed with SIGKILL mid-task: seconds until its key can be taken
    (goal: within the 2 s lease).
redelivery
    The at-least-once recipe (``acks_late=True, reject_on_worker_lost=True``): ``--tasks``
    tasks of keys of their own, the pool process running each of the first ``--kills`` killed
    with SIGKILL mid-task (by its PID). Work lost: tasks whose work was never done (goal 0);
    done twice, runs beside another (goal 0); and the seconds from each kill to the start of
    its redelivered run (it waits for the dead run's hold to run out: at most one lease).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from integration import celery_app
from integration.test_celery import Worker, delay_at_once

import redlease
from redlease.contrib.celery import TaskSkippedError
from redlease.testing import RedisServer, find_server

PREFIX = "redlease:celery:"


def wait(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s")
        time.sleep(0.01)


def runs(raw: redis.Redis, name: str) -> list[dict[str, Any]]:
    return [json.loads(item) for item in raw.lrange(f"{name}:runs", 0, -1)]


def one_round(raw: redis.Redis, stage: str, held: bool) -> tuple[int, int]:
    """(duplicates run, runs that overlapped another) for 8 simultaneous delay()."""
    task = celery_app.run_skip if stage == "run" else celery_app.enqueue_skip
    name = uuid.uuid4().hex[:12]
    results = delay_at_once(task, 8, name, 30 if held else 0.01)
    if held:
        wait(lambda: len(runs(raw, name)) >= 1)
        distinct = {r.id for r in results}
        if stage == "run":  # the 7 others reached the worker and were dealt with
            wait(lambda: sum(r.ready() for r in results) >= 7)
        raw.rpush(f"{name}:go", *([1] * len(distinct)))  # one for each task sent
    for result in results:
        with contextlib.suppress(TaskSkippedError):  # a duplicate, skipped
            result.get(timeout=30)
    recorded = runs(raw, name)
    return len(recorded) - 1, sum(run["overlap"] for run in recorded)


def takeover(raw: redis.Redis, url: str) -> float:
    name = uuid.uuid4().hex[:12]
    celery_app.run_skip.delay(name, 60)
    wait(lambda: len(runs(raw, name)) == 1)
    os.kill(runs(raw, name)[0]["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    with redlease.Client.from_url(url) as client:
        lock = client.lock(f"{PREFIX}skip:{name}")
        if not lock.acquire(timeout=30):
            raise TimeoutError("the key was not freed within 30 s")
        freed = time.monotonic() - killed_at
        lock.release()
    time.sleep(0.5)  # the pool starts a new process in place of the killed one
    return freed


def redelivery(raw: redis.Redis, tasks: int, kills: int) -> tuple[int, int, int, list[float]]:
    """(work lost, done twice, runs beside another, seconds from each kill to its redelivered
    run's start) for ``tasks`` acks_late tasks of which ``kills`` are killed mid-task."""
    base = uuid.uuid4().hex[:12]
    names = [f"{base}-{i}" for i in range(tasks)]
    results = [celery_app.acks_late.delay(n, 60) for n in names]
    killed_at: dict[int, float] = {}
    rerun_at: dict[int, float] = {}
    let_go: set[int] = set()

    def step() -> bool:
        for i, key in enumerate(names):
            recorded = runs(raw, key)
            if not recorded or i in let_go:
                continue
            if i < kills and i not in killed_at:
                raw.decr(f"{key}:active")  # (the killed run never counts itself out)
                os.kill(recorded[0]["pid"], signal.SIGKILL)
                killed_at[i] = time.monotonic()
            elif i not in killed_at or len(recorded) > 1 or results[i].ready():
                if i in killed_at and len(recorded) > 1:
                    rerun_at[i] = time.monotonic()
                raw.rpush(f"{key}:go", 1)
                let_go.add(i)
        return len(let_go) == tasks

    wait(step, timeout=60 + 10 * tasks)
    for result in results:
        try:
            result.get(timeout=60)
        except Exception as exc:
            print(f"  task {result.id}: {exc!r}")
    done = [raw.llen(f"{n}:done") for n in names]
    overlaps = sum(run["overlap"] for n in names for run in runs(raw, n))
    delays = [rerun_at[i] - killed_at[i] for i in sorted(rerun_at)]
    return sum(d == 0 for d in done), sum(d > 1 for d in done), overlaps, delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=12, help="acks_late tasks (redelivery)")
    parser.add_argument("--redelivery-kills", type=int, default=6)
    parser.add_argument("--only-redelivery", action="store_true")
    args = parser.parse_args()
    with RedisServer(find_server()) as server, tempfile.TemporaryDirectory() as tmp:
        celery_app.configure(server.url)
        worker = Worker(server.url, Path(tmp) / "worker.log")
        try:
            worker.start()
            raw = redis.Redis.from_url(server.url)
            print(f"server {server.binary.label}; worker: prefork, 4 processes; lease 2 s")
            lost, twice, overlaps, delays = redelivery(raw, args.tasks, args.redelivery_kills)
            print(
                f"acks_late, {args.tasks} tasks, {args.redelivery_kills} SIGKILLs mid-task: "
                f"work lost {lost}, done twice {twice}, runs beside another {overlaps}; "
                + (
                    f"kill to redelivered run: median {statistics.median(delays):.2f} s, "
                    f"max {max(delays):.2f} s"
                    if delays
                    else "no redelivered run"
                )
            )
            if args.only_redelivery:
                return
            print("8 simultaneous delay() of one key, per round: duplicates run (overlapping)")
            for held in (True, False):
                for stage in ("run", "enqueue"):
                    found = [one_round(raw, stage, held) for _ in range(args.rounds)]
                    dups = [d for d, _ in found]
                    overlaps = [o for _, o in found]
                    print(
                        f"  {'held' if held else 'short':5} stage {stage:7}: duplicates "
                        f"total {sum(dups)}, median {statistics.median(dups)}, max {max(dups)} "
                        f"(overlapping: {sum(overlaps)}) over {args.rounds} rounds"
                    )
            times = [takeover(raw, server.url) for _ in range(args.kills)]
            print(
                f"SIGKILL mid-task, key free after: median {statistics.median(times):.2f} s, "
                f"max {max(times):.2f} s over {args.kills} kills"
            )
        except BaseException:
            print(worker.log_tail(), file=sys.stderr)
            raise
        finally:
            worker.stop()


if __name__ == "__main__":
    main()
