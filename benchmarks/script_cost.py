"""The server's cost of the two scripts of one uncontended acquire+release (issue #33), on a
private server: ``INFO commandstats``' microseconds of ``EVALSHA`` per cycle (each script's
own commands included), for the scripts as shipped and for variants that show where it goes:

shipped
    ``lock_acquire.lua`` and ``lock_release.lua`` as the client sends them (its own calls, built
    by ``redlease._core.lock``: the same keys and arguments).
constant replies
    Both bodies replaced by a constant reply: what an ``EVALSHA`` with these keys and
    arguments costs before any Lua runs.
acquire only
    The acquire as shipped, the release a constant reply: the acquire's share.
no receipt write
    The release without writing the receipts key on a free lock (``APPEND`` of its request
    id and ``PEXPIRE`` of 30 s; until 2026-11-29 a ``GET``, a merge and a ``SET ... PX``): the
    share of the release receipts on a free lock.
no ACL check
    The release without its ``redis.acl_check_cmd`` (a refused publish refused before any
    change).

The variants exist only in this benchmark (never sent by a client). Each round runs every
subject in turn; figures are medians over the rounds.

    python benchmarks/script_cost.py                  # 5 rounds of 3,000 cycles, about 40 s
    python benchmarks/script_cost.py --server valkey --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import uuid

import redis
from suite.common import choose_server

from redlease._core import lock as core
from redlease._core import scripts
from redlease._core.keys import LockKeys
from redlease.testing import RedisServer

OWNER = f"{uuid.uuid4()}:1"
RECEIPT_WRITE = """\
  if redis.call('append', KEYS[3], ' ' .. receipts) > 2 * RECEIPT_BYTES then
    redis.call('set', KEYS[3], newest(redis.call('get', KEYS[3])), 'px', 30000)
  else
    redis.call('pexpire', KEYS[3], 30000)
  end
"""
ACL_CHECK = "if not quiet and redis.acl_check_cmd and"


def _without(source: str, part: str, instead: str) -> str:
    if part not in source:
        raise SystemExit(f"script_cost.py: {part!r} is no longer in the script: update me")
    return source.replace(part, instead)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="redis-7", help="server label or path substring")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3000)
    options = parser.parse_args()

    acquire = scripts.LOCK_ACQUIRE.source.decode()
    release = scripts.LOCK_RELEASE.source.decode()
    granted = "return {1, 1, 30000, 1}\n"
    subjects = {
        "shipped": (acquire, release),
        "constant replies": (granted, "return {1, 0}\n"),
        "acquire only": (acquire, "return {1, 0}\n"),
        "no receipt write": (acquire, _without(release, RECEIPT_WRITE, "\n")),
        "no ACL check": (acquire, _without(release, ACL_CHECK, "if false and")),
    }
    keys = LockKeys.for_name("script-cost")
    with RedisServer(choose_server(options.server)) as server:
        conn = redis.Redis.from_url(server.url)
        loaded = {
            label: (conn.script_load(a), conn.script_load(r)) for label, (a, r) in subjects.items()
        }

        def cycle(shas: tuple[str, str]) -> None:
            call = core._acquire_call(keys, OWNER, 0, 30.0, True, uuid.uuid4().hex[:16])
            reply = conn.evalsha(shas[0], len(call.keys), *call.keys, *call.args)
            if int(reply[0]) != 1:
                raise SystemExit(f"script_cost.py: the acquire answered {reply!r}")
            call = core.release_call(
                keys, OWNER, 1, request_id=uuid.uuid4().hex, token=int(reply[3]), handover_ms=200
            )
            reply = conn.evalsha(shas[1], len(call.keys), *call.keys, *call.args)
            if int(reply[0]) != 1:
                raise SystemExit(f"script_cost.py: the release answered {reply!r}")

        figures: dict[str, list[float]] = {label: [] for label in subjects}
        for _ in range(options.rounds):
            for label, shas in loaded.items():
                for _ in range(200):
                    cycle(shas)
                conn.config_resetstat()
                for _ in range(options.cycles):
                    cycle(shas)
                usec = conn.info("commandstats")["cmdstat_evalsha"]["usec"]
                figures[label].append(usec / options.cycles)
        conn.close()
    print(
        f"{server.binary.label}: EVALSHA microseconds per acquire+release, {options.rounds} "
        f"rounds of {options.cycles:,} cycles (median, and each round)"
    )
    for label, values in figures.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {label:18s} {statistics.median(values):6.2f}   ({each})")


if __name__ == "__main__":
    main()
