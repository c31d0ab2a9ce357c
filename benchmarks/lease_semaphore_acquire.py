"""The cost of issue #36's fix to ``lease_semaphore_acquire.lua``, on private servers.

    python benchmarks/lease_semaphore_acquire.py             # every binary found: ~1 min
    python benchmarks/lease_semaphore_acquire.py --rounds 100

The fix reads every permit id of the request (``ZMSCORE``, in chunks of 1000) so that a copy
arriving after its own lease ran out gives those permits back first. This times one
``EVALSHA`` round trip of the script before the fix (``tests/model/unfixed/``) and today's,
interleaved (the order swapped each round), for one permit and for ``acquire_many(1000)``,
on the SHORT path (nothing free: a waiting try) and the GRANTED path; each figure is the
median round trip, and ``new/old`` their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import redis

from redlease._core.keys import LeaseSemaphoreKeys
from redlease.testing import RedisServer, find_servers

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "old": (ROOT / "tests" / "model" / "unfixed" / "lease_semaphore_acquire.lua").read_bytes(),
    "new": (ROOT / "src" / "redlease" / "lua" / "lease_semaphore_acquire.lua").read_bytes(),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    rounds = parser.parse_args().rounds
    keys = LeaseSemaphoreKeys.for_name("bench")
    for binary in find_servers():
        with RedisServer(binary) as server:
            raw = redis.Redis.from_url(server.url)
            sha = {label: raw.script_load(source) for label, source in SOURCES.items()}
            for n in (1, 1000):
                for path in ("short", "granted"):
                    times: dict[str, list[float]] = {"old": [], "new": []}
                    for i in range(rounds):
                        ids = [bytes.fromhex(f"{i * 100_000 + j:032x}") for j in range(n)]
                        args = [ids[0], 60_000, "owner", 0, "publish", *ids[1:]]
                        for label in ("old", "new") if i % 2 else ("new", "old"):
                            raw.delete(keys.name, keys.leases)
                            raw.set(keys.name, 0 if path == "short" else n)
                            began = time.perf_counter()
                            reply = raw.evalsha(
                                sha[label], 4, keys.name, keys.leases, keys.channel, keys.waiters,
                                *args,
                            )  # fmt: skip
                            times[label].append(time.perf_counter() - began)
                            assert reply[0] == (0 if path == "short" else 1)
                    old, new = (statistics.median(times[k]) * 1e6 for k in ("old", "new"))
                    print(
                        f"{binary.label} n={n:<4} {path:<7}: old {old:6.0f} us  "
                        f"new {new:6.0f} us  new/old {new / old:.2f}"
                    )
            raw.close()


if __name__ == "__main__":
    main()
