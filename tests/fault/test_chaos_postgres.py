"""``tools/chaos_postgres.py`` (the chaos run's postgres-rmw scenario), short: worker processes
increment a counter row of a private PostgreSQL under one lock, by a read-modify-write in one
transaction; holders are stopped (SIGSTOP) past their lease, between their read and their
write or before their claim, then resumed, and the lock server fails over to a replica among
them. With the SQL fencing helpers (claim, read, write) the database loses no update and
accepts no write with a token below one it had already seen; with a plain ``UPDATE`` the same
run loses updates (a holder resumed mid-transaction writes what it read before its pause, over
the writes of the holders after it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.fault, pytest.mark.timeout(240)]

TOOL = Path(__file__).parents[2] / "tools" / "chaos_postgres.py"
LINE = re.compile(
    r"postgres-rmw s1 (fenced|unfenced): lost updates (\d+), stale writes accepted (\d+) "
    r"\(counter (\d+), writes accepted (\d+), refused (\d+), holds (\d+), pauses (\d+), "
    r"failovers (\d+)\)"
)


def test_fenced_sql_writes_lose_no_update_under_pauses_and_failovers(fault_binary):
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("psycopg")
    from redlease.testing import find_postgres

    try:
        find_postgres()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    out = subprocess.run(
        [sys.executable, str(TOOL), "--quick", "--seed", "1", "--workers", "3",
         "--duration", "10", "--server", fault_binary.path],
        capture_output=True, text=True, timeout=220, check=False,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr[-2000:]
    runs = {m[0]: [int(x) for x in m[1:]] for m in LINE.findall(out.stdout)}
    assert set(runs) == {"fenced", "unfenced"}, out.stdout + out.stderr[-2000:]
    for mode, (_lost, _stale, _counter, writes, _refused, holds, pauses, failovers) in runs.items():
        assert pauses >= 1 and failovers >= 1, (mode, out.stdout)  # the faults were injected
        assert holds > 0 and writes > 0, (mode, out.stdout)
    lost, stale, counter, writes = runs["fenced"][:4]
    assert (lost, stale, counter) == (0, 0, writes), out.stdout
    # the same faults without fencing: a holder stopped 4 leases between its read and its
    # write resumes and writes over the increments of the holders that ran meanwhile
    assert runs["unfenced"][0] > 0, out.stdout
