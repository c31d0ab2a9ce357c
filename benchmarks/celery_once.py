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
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    with RedisServer(find_server()) as server, tempfile.TemporaryDirectory() as tmp:
        celery_app.configure(server.url)
        worker = Worker(server.url, Path(tmp) / "worker.log")
        try:
            worker.start()
            raw = redis.Redis.from_url(server.url)
            print(f"server {server.binary.label}; worker: prefork, 4 processes; lease 2 s")
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
