"""How late the watchdog's renewals land under load, and how much lease is left when they do.

    python benchmarks/renewal_lateness.py                       # every scenario: ~3 min
    python benchmarks/renewal_lateness.py --only asyncio --watchdog 3
    python benchmarks/renewal_lateness.py --tasks 1000 --burst-ms 1 --threads 8 --markdown

One client holds one lock (no explicit lease: the watchdog renews it every
``watchdog_timeout / 3``) while the process is made busy, then the renewals are read back from
the server's side: a second process runs ``MONITOR`` on the private server and timestamps
(server clock, microseconds) the lock's acquire and every ``lock_renew.lua`` call. For each
renewal:

* **late**: the time since the previous renewal (or the acquire) minus the interval, i.e. how
  much later than its schedule the round reached the server;
* **margin**: ``watchdog_timeout`` minus that time since the previous renewal, i.e. the lease
  left on the key when the renewal landed. At 0 the lock would have expired while held.

Scenarios (each with ``watchdog_timeout`` 30 s, renewed every 10 s, and 3 s, renewed every 1 s):

* ``idle``: nothing else runs (the floor);
* ``asyncio``: an ``AsyncClient`` on an event loop running ``--tasks`` tasks, each doing CPU
  bursts of ``--burst-ms`` with an ``await asyncio.sleep(0)`` between them (one pass of the
  loop's ready queue takes ``tasks x burst``);
* ``threads``: a ``Client`` in a process running ``--threads`` threads that spin in pure Python
  and never release the GIL by themselves (the watchdog thread gets it at the interpreter's
  switch interval, 5 ms).

Each scenario runs for ``--rounds`` renewals (default 3 for a 30 s timeout, 12 for 3 s). The
machine's other load shows in the figures: run it on a quiet machine for a baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import redlease
from redlease._core import scripts
from redlease.testing import RedisServer, find_servers

MONITOR = r"""
import socket, sys
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
conn.sendall(b"MONITOR\r\n")
out = conn.makefile("rb")
assert out.readline() == b"+OK\r\n"
print("ready", flush=True)
for line in out:  # +<server time> [<db> <client>] "EVALSHA" "<sha>" ...
    sys.stdout.write(line.decode(errors="replace")[1:].replace('"', ""))
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class Result:
    scenario: str
    watchdog: float
    late: list[float]  # seconds, per renewal
    margin: list[float]  # seconds, per renewal
    lost: int  # leases lost while held


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


lost: list[Exception] = []


def hold_async(url: str, name: str, watchdog: float, run_for: float, tasks: int, burst: float):
    async def main() -> None:
        stop = False

        async def busy() -> None:
            while not stop:
                spin(burst)
                await asyncio.sleep(0)

        async with redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog) as client:
            lock = client.lock(name)
            assert await lock.acquire()
            workers = [asyncio.create_task(busy()) for _ in range(tasks)]
            await asyncio.sleep(run_for)
            stop = True
            await asyncio.gather(*workers)
            try:
                await lock.release()
            except redlease.LeaseLostError as exc:
                lost.append(exc)

    asyncio.run(main())


def hold_threads(url: str, name: str, watchdog: float, run_for: float, threads: int) -> None:
    stop = threading.Event()

    def busy() -> None:
        n = 0
        while not stop.is_set():
            for _ in range(10_000):  # pure Python: holds the GIL until the switch interval
                n += 1

    with redlease.Client.from_url(url, watchdog_timeout=watchdog) as client:
        lock = client.lock(name)
        assert lock.acquire()
        workers = [threading.Thread(target=busy, daemon=True) for _ in range(threads)]
        for worker in workers:
            worker.start()
        time.sleep(run_for)
        stop.set()
        for worker in workers:
            worker.join(30)
        try:
            lock.release()
        except redlease.LeaseLostError as exc:
            lost.append(exc)


def run(server: RedisServer, scenario: str, watchdog: float, args: argparse.Namespace) -> Result:
    name = f"bench:renewal:{uuid.uuid4().hex[:8]}"
    rounds = args.rounds or (3 if watchdog >= 10 else 12)
    interval = watchdog / 3
    run_for = interval * (rounds + 0.5)
    monitor = subprocess.Popen(
        [sys.executable, "-c", MONITOR, str(server.port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert monitor.stdout is not None
        assert monitor.stdout.readline().strip() == "ready"
        if scenario == "asyncio":
            hold_async(server.url, name, watchdog, run_for, args.tasks, args.burst_ms / 1000)
        elif scenario == "threads":
            hold_threads(server.url, name, watchdog, run_for, args.threads)
        else:
            hold_threads(server.url, name, watchdog, run_for, 0)
    finally:
        monitor.terminate()  # (its own child: ended by its PID)
        out, _ = monitor.communicate(timeout=30)
    was_lost = len(lost)
    lost.clear()
    times: list[float] = []
    for line in out.splitlines():
        stamp, _, command = line.partition(" ")
        if name not in command:
            continue
        first = scripts.LOCK_ACQUIRE.sha in command and not times
        if first or (scripts.LOCK_RENEW.sha in command and times):
            times.append(float(stamp))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return Result(
        scenario,
        watchdog,
        [gap - interval for gap in gaps],
        [watchdog - gap for gap in gaps],
        was_lost,
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["idle", "asyncio", "threads"], action="append")
    parser.add_argument("--watchdog", type=float, action="append", help="default: 30 and 3")
    parser.add_argument("--rounds", type=int, default=0, help="renewals per scenario")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--burst-ms", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    scenarios = args.only or ["idle", "asyncio", "threads"]
    watchdogs = args.watchdog or [30.0, 3.0]
    binary = find_servers()[0]
    load = {
        "idle": "nothing else",
        "asyncio": f"{args.tasks} tasks x {args.burst_ms:g} ms CPU bursts",
        "threads": f"{args.threads} GIL-bound CPU threads",
    }
    print(
        f"# renewal lateness on {binary.label}, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs; late = time since the previous "
        "renewal minus the interval, margin = lease left when the renewal landed (server "
        "clock, MONITOR)"
    )
    if args.markdown:
        print()
        print(
            "| scenario | load | watchdog_timeout | renewals | late median | late worst | "
            "margin median | margin worst | lease |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    with RedisServer(binary) as server:
        for watchdog in watchdogs:
            for scenario in scenarios:
                r = run(server, scenario, watchdog, args)
                if not r.late:
                    print(f"{scenario} {watchdog:g} s: no renewal seen")
                    continue
                cells = [
                    scenario,
                    load[scenario],
                    f"{watchdog:g} s (every {watchdog / 3:g} s)",
                    str(len(r.late)),
                    f"{ms(statistics.median(r.late))} ms",
                    f"{ms(max(r.late))} ms",
                    f"{ms(statistics.median(r.margin))} ms",
                    f"{ms(min(r.margin))} ms",
                    "lost" if r.lost else "kept",
                ]
                if args.markdown:
                    print("| " + " | ".join(cells) + " |")
                else:
                    print(
                        f"{scenario:8} {load[scenario]:32} watchdog {watchdog:g} s: "
                        f"{len(r.late)} renewals, late median {cells[4]} worst {cells[5]}, "
                        f"margin median {cells[6]} worst {cells[7]}, lease {cells[8]}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
