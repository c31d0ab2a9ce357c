"""A forced release: how soon its holder knows, and how soon ``redlease run`` stops its command.

    python benchmarks/forced_release.py                    # 15 runs, 3 of the old path
    python benchmarks/forced_release.py --runs 5 --old-runs 2 --server redis-7.0.15

On a private server (``redlease.testing.RedisServer``), loopback. Each run force-releases a
lock held with a lease the watchdog renews (``--watchdog``, default 30 s, the default), once it
is held and its client listens on its holder channel (the subscription is made in the
background after the acquire). Times are ``time.monotonic()`` (one clock for every process of
a Linux machine). Measured:

library holder    a ``Client`` in this process holds the lock; the force release is a real
                  ``redlease release --force --yes`` process: time from the start of that
                  call, and from its return, until the holder's ``on_lease_lost`` ran (the
                  start includes the CLI's own start, its interpreter and imports; a
                  negative "from return": the holder knew before the CLI process had exited);
                  and with an in-process ``force_release()`` of another client (no process
                  start): from the call's start and return
redlease run      a real ``redlease run --watchdog W NAME -- python child.py`` (the child
                  records when it gets SIGTERM), force-released by a real ``redlease release
                  --force``: time from the start and from the return of that call until the
                  command got its SIGTERM, and until ``redlease run`` exited; and with an
                  in-process ``force_release()``
old path          the same holders when nothing tells them (the lock key deleted, as a force
                  release did before): the watchdog finds the hold gone at its next round,
                  up to a third of ``--watchdog`` later (the force comes at a random point of
                  the round, as in production)

Medians (and min/max) over ``--runs`` (``--old-runs`` for the old path, each up to
``--watchdog / 3`` long). Stops only the processes it started, by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis

import redlease
from redlease._core.keys import LockKeys
from redlease.testing import RedisServer, find_server, find_servers

CHILD = """\
import signal, sys, time
out = sys.argv[1]
def handler(signum, frame):
    with open(out, "w") as f:
        f.write(repr(time.monotonic()))
    sys.exit(0)
signal.signal(signal.SIGTERM, handler)
with open(out + ".started", "w") as f:
    f.write("started")
for _ in range(6000):  # 600 s at most
    time.sleep(0.1)
"""

BOUND = 120.0
"""Seconds any one wait of a run may take before the run is called failed."""


def _wait(condition: object, what: str, timeout: float = BOUND) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"forced_release.py: {what} not seen within {timeout} s")
        time.sleep(0.002)


def _listening(r: redis.Redis, channel: str) -> bool:
    return int(r.pubsub_numsub(channel)[0][1]) > 0


def _cli(url: str, *args: str) -> tuple[float, float]:
    """Run ``redlease ARGS``; (when it started, when it returned)."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "redlease", *args, "--url", url],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=BOUND,
    )
    return started, time.monotonic()


def _force(
    url: str,
    r: redis.Redis,
    operator: redlease.Client,
    name: str,
    watchdog: float,
    old: bool,
    in_process: bool,
) -> tuple[float, float]:
    """Take the lock away from its holder; (when that started, when it returned). ``old``: a
    plain DEL at a random point of the watchdog's round (it tells nobody); ``in_process``:
    another client's ``force_release()``; else a ``redlease release --force`` process."""
    if old:
        time.sleep(random.uniform(0, watchdog / 3))
        started = time.monotonic()
        r.delete(name)
        return started, time.monotonic()
    if in_process:
        started = time.monotonic()
        assert operator.lock(name).force_release()
        return started, time.monotonic()
    return _cli(url, "release", "--force", "--yes", name)


def library(
    url: str, watchdog: float, runs: int, *, old: bool, in_process: bool = False
) -> dict[str, list[float]]:
    """The holder is a ``Client`` here; the force release a CLI process (``in_process``:
    another client's ``force_release()``; ``old``: a plain DEL, which tells nobody)."""
    out: dict[str, list[float]] = {"from start": [], "from return": []}
    r = redis.Redis.from_url(url)
    with (
        redlease.Client.from_url(url, watchdog_timeout=watchdog) as client,
        redlease.Client.from_url(url) as operator,
    ):
        for _ in range(runs):
            name = f"bench:forced:{uuid.uuid4().hex[:8]}"
            told: list[float] = []
            seen = threading.Event()

            def on_lost(
                _error: redlease.LeaseLostError,
                told: list[float] = told,
                seen: threading.Event = seen,
            ) -> None:
                told.append(time.monotonic())
                seen.set()

            lock = client.lock(name, on_lease_lost=on_lost)
            assert lock.acquire()
            channel = LockKeys.for_name(name).holder(f"{client.id}:1")
            _wait(lambda channel=channel: _listening(r, channel), "the holder listening")
            started, returned = _force(url, r, operator, name, watchdog, old, in_process)
            if not seen.wait(BOUND):
                raise SystemExit("forced_release.py: the holder was never told")
            out["from start"].append(told[0] - started)
            out["from return"].append(told[0] - returned)
            with contextlib.suppress(redlease.LeaseLostError):
                lock.release()
    r.close()
    return out


def run_command(
    url: str, watchdog: float, runs: int, *, old: bool, in_process: bool = False
) -> dict[str, list[float]]:
    """A real ``redlease run``; its command records when it got SIGTERM (``in_process``: the
    force release is a ``force_release()`` of a client here, no process start)."""
    out: dict[str, list[float]] = {
        "SIGTERM from start": [],
        "SIGTERM from return": [],
        "run exited from return": [],
    }
    r = redis.Redis.from_url(url)
    operator = redlease.Client.from_url(url)
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / "child.py"
        child.write_text(CHILD)
        for i in range(runs):
            name = f"bench:forced-run:{uuid.uuid4().hex[:8]}"
            mark = Path(tmp) / f"term-{i}"
            started_mark = Path(f"{mark}.started")
            proc = subprocess.Popen(
                [sys.executable, "-m", "redlease", "run", "--url", url, "--watchdog",
                 str(watchdog), name, "--", sys.executable, str(child), str(mark)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
            try:
                pattern = f"redlease:holder:{{{name}}}:*"
                _wait(
                    lambda p=pattern, m=started_mark: m.exists() and r.pubsub_channels(p),
                    "redlease run holding the lock and listening",
                )
                ended: list[float] = []
                waiter = threading.Thread(
                    target=lambda p=proc, e=ended: (p.wait(BOUND), e.append(time.monotonic()))
                )
                waiter.start()
                started, returned = _force(url, r, operator, name, watchdog, old, in_process)
                waiter.join(BOUND)
                exited = ended[0]
                term = float(mark.read_text())
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: run and its child
                    proc.wait(10)
            out["SIGTERM from start"].append(term - started)
            out["SIGTERM from return"].append(term - returned)
            out["run exited from return"].append(exited - returned)
    operator.close()
    r.close()
    return out


def shown(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"median {statistics.median(ms):9.1f} ms   min {ms[0]:9.1f}   max {ms[-1]:9.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of the new path (15)")
    parser.add_argument(
        "--old-runs", type=int, default=3, help="runs of the old path, each up to W/3 (3)"
    )
    parser.add_argument("--watchdog", type=float, default=30.0, help="the lease W (30 s)")
    parser.add_argument("--server", help="a server label (redis-7.0.15, valkey-8.1.8, ...)")
    args = parser.parse_args(argv)
    logging.getLogger("redlease").setLevel(logging.ERROR)  # (each loss is logged)
    binary = find_server()
    if args.server:
        binary = next((s for s in find_servers() if s.label == args.server), None) or binary
    print(f"server {binary.label}, loopback; watchdog {args.watchdog} s; "
          f"{args.runs} runs, {args.old_runs} of the old path")  # fmt: skip
    with RedisServer(binary) as server:
        url = server.url
        rows: dict[str, dict[str, list[float]]] = {
            "library holder, `redlease release --force`": library(
                url, args.watchdog, args.runs, old=False
            ),
            "library holder, in-process force_release()": library(
                url, args.watchdog, args.runs, old=False, in_process=True
            ),
            "`redlease run`, `redlease release --force`": run_command(
                url, args.watchdog, args.runs, old=False
            ),
            "`redlease run`, in-process force_release()": run_command(
                url, args.watchdog, args.runs, old=False, in_process=True
            ),
        }
        if args.old_runs:
            rows["old path: library holder, its watchdog"] = library(
                url, args.watchdog, args.old_runs, old=True
            )
            rows["old path: `redlease run`, its watchdog"] = run_command(
                url, args.watchdog, args.old_runs, old=True
            )
    for title, measured in rows.items():
        print(f"\n{title}")
        for what, values in measured.items():
            print(f"  {what:<24} {shown(values)}")
    if args.old_runs:
        new = statistics.median(rows["library holder, in-process force_release()"]["from start"])
        old = statistics.median(rows["old path: library holder, its watchdog"]["from start"])
        new_run = statistics.median(
            rows["`redlease run`, in-process force_release()"]["SIGTERM from start"]
        )
        old_run = statistics.median(
            rows["old path: `redlease run`, its watchdog"]["SIGTERM from start"]
        )
        print(
            "\nold path / new path (medians from the start of the force, in-process): "
            f"holder told {old / new:,.0f}x later, command stopped {old_run / new_run:,.0f}x later"
        )


if __name__ == "__main__":
    main()
