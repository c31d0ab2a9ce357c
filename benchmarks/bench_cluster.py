"""Lock throughput on a 3-master Redis Cluster against one server, in the same run.

    python benchmarks/bench_cluster.py [--quick] [--procs 6] [--names 3000]

Several worker processes each loop acquire -> release over many names (so that they spread over
the cluster's slots) for a fixed time; the figure is acquire+release cycles per second in total.
Private servers only (``redlease.testing``), loopback only; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import redlease
from redlease.testing import RedisServer, find_servers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cluster.conftest import LocalCluster


def _worker(
    url: str, cluster: bool, names: list[str], seconds: float, go: object, out: object
) -> None:
    client = redlease.Client.from_url(url, cluster=cluster)
    locks = [client.lock(n, lease=10) for n in names]
    go.wait(60)  # type: ignore[attr-defined]
    cycles, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        lock = locks[cycles % len(locks)]
        if lock.acquire(blocking=False):
            lock.release()
        cycles += 1
    out.put(cycles)  # type: ignore[attr-defined]
    client.close()


def run(url: str, cluster: bool, procs: int, names: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                url,
                cluster,
                [f"bench:{p}:{i}" for i in range(names // procs)],
                seconds,
                go,
                out,
            ),
        )
        for p in range(procs)
    ]
    for w in workers:
        w.start()
    time.sleep(2.0)  # let every worker connect (cluster clients load the slot map)
    go.set()
    total = sum(out.get(timeout=seconds + 60) for _ in workers)
    for w in workers:
        w.join(30)
        if w.is_alive():
            w.terminate()
    return total / seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 s runs, one round")
    p.add_argument("--procs", type=int, default=6)
    p.add_argument("--names", type=int, default=3000)
    a = p.parse_args()
    usable = [s for s in find_servers() if s.version_tuple >= (7,)]
    if not usable:
        print("no Redis/Valkey >= 7 found for a cluster")
        return 1
    binary = max(usable, key=lambda s: s.version_tuple)
    seconds, rounds = (2.0, 1) if a.quick else (5.0, 3)
    single: list[float] = []
    clustered: list[float] = []
    with RedisServer(binary) as server:
        cluster = LocalCluster(binary).start()
        try:
            for _ in range(rounds):
                single.append(run(server.url, False, a.procs, a.names, seconds))
                clustered.append(run(cluster.url, True, a.procs, a.names, seconds))
        finally:
            cluster.close()
    s, c = statistics.median(single), statistics.median(clustered)
    print(f"bench_cluster: {binary.label}, {a.procs} client processes, {a.names} names, 2 CPUs")
    print(f"  one server          {s:9,.0f} cycles/s")
    print(f"  cluster, 3 masters  {c:9,.0f} cycles/s   x one server: {c / s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
