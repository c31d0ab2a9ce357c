"""``tools/chaos.py``'s failover-rmw scenario, short: worker processes contend for one
lock, each hold a fenced read-modify-write of a counter on another server, while the lock's
master fails over (twice) to a replica that missed its last writes. No fencing token may be
handed out twice and no fenced update may be lost: the counter at the end is the number of
writes the resource accepted.

Before the fixes of issue #23 (a hand-over token without the server-time floor; a first
acquire granted its owner's stale hold with its old token) every seed tried showed tokens
handed out twice in such a run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

CHAOS = Path(__file__).parents[2] / "tools" / "chaos.py"
LINE = re.compile(
    r"failover-rmw s(\d+): tokens handed out twice (\d+), lost fenced updates (\d+) "
    r"\(final counter (\d+), accepted writes (\d+)\)"
)


def test_failover_rmw_hands_out_no_token_twice_and_loses_no_fenced_update(fault_binary):
    out = subprocess.run(
        [
            sys.executable,
            str(CHAOS),
            "--quick",
            "--scenario",
            "failover-rmw",
            "--seed",
            "1",
            "--workers",
            "3",
            "--duration",
            "6",
            "--server",
            fault_binary.path,
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]
    found = LINE.findall(out.stdout)
    assert len(found) == 1, out.stdout
    seed, twice, lost, counter, accepted = (int(x) for x in found[0])
    assert seed == 1
    assert "2 failover" in out.stdout, out.stdout  # the faults were injected
    assert accepted > 0, out.stdout
    assert (twice, lost, counter) == (0, 0, accepted), out.stdout
