"""``redlease run --at-least SECONDS`` and ``--conflict-exit-code N``: a cron job started on
several machines at about the same time runs once, and a skipped run can exit 0 silently."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from integration.helpers import reply_bytes

from redlease import Client

from .helpers import assert_one_line, cli_env, run_cli

INCR = "import redis, sys; redis.Redis.from_url(sys.argv[1]).incr(sys.argv[2])"


@pytest.fixture
def other(url: str) -> Iterator[Client]:
    with Client.from_url(url) as client:
        yield client


def test_at_least_keeps_the_lock_after_a_fast_command(
    url: str, name: str, r: redis.Redis, tmp_path: Path
) -> None:
    started = time.monotonic()
    first = run_cli(
        "run", "--url", url, "--wait", "0", "--at-least", "20", name, "--",
        sys.executable, "-c", INCR, url, name + ":runs",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    ttl = r.pttl(name) / 1000
    # measured once the TTL was read: time spent before the read counts in elapsed too
    elapsed = time.monotonic() - started
    assert 20 - elapsed - 0.1 <= ttl <= 20  # kept for what is left of the 20 s, by no one
    fields = [reply_bytes(f) for f in r.hkeys(name)]
    assert all(f.startswith(b"redlease:") or f.endswith(b":kept") for f in fields)
    marker = tmp_path / "ran"
    second = run_cli(
        "run", "--url", url, "--wait", "0", "--at-least", "20", name, "--",
        sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    )  # fmt: skip
    assert second.returncode == 75, second.stderr
    assert second.stderr == ""  # a busy lock is silent unless --verbose
    assert not marker.exists()
    assert int(r.get(name + ":runs") or 0) == 1


def test_without_at_least_the_lock_is_released(url: str, name: str, r: redis.Redis) -> None:
    result = run_cli("run", "--url", url, "--wait", "0", name, "--", sys.executable, "-c", "")
    assert result.returncode == 0, result.stderr
    assert r.exists(name) == 0


def test_at_least_shorter_than_the_command_releases_at_its_end(
    url: str, name: str, r: redis.Redis
) -> None:
    result = run_cli(
        "run", "--url", url, "--at-least", "0.2", name, "--",
        sys.executable, "-c", "import time; time.sleep(0.5)",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert r.exists(name) == 0


def test_at_least_with_lease_keeps_the_lock(url: str, name: str, r: redis.Redis) -> None:
    started = time.monotonic()
    result = run_cli(
        "run", "--url", url, "--lease", "30", "--at-least", "10", name, "--",
        sys.executable, "-c", "",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # cut from the 30 s lease to 10 s from the acquire, which came after ``started``
    left, since = r.pttl(name) / 1000, time.monotonic() - started
    assert 10 - since - 0.05 < left <= 10, (left, since)


def test_conflict_exit_code_0_is_silent(url: str, name: str, other: Client, tmp_path: Path) -> None:
    assert other.lock(name).acquire(lease=60)
    marker = tmp_path / "ran"
    result = run_cli(
        "run", "--url", url, "--wait", "0", "--conflict-exit-code", "0", name, "--",
        sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stdout == "" and result.stderr == ""  # cron mails nobody
    assert not marker.exists()


def test_conflict_exit_code_n_after_a_wait(url: str, name: str, other: Client) -> None:
    assert other.lock(name).acquire(lease=60)
    result = run_cli(
        "run", "--url", url, "--verbose", "--wait", "0.5", "--conflict-exit-code", "3", name, "--",
        sys.executable, "-c", "",
    )  # fmt: skip
    assert result.returncode == 3
    assert "not acquired within 0.5 s" in assert_one_line(result.stderr)


def test_conflict_exit_code_does_not_change_the_command_s_status(url: str, name: str) -> None:
    result = run_cli(
        "run", "--url", url, "--conflict-exit-code", "0", name, "--",
        sys.executable, "-c", "import sys; sys.exit(7)",
    )  # fmt: skip
    assert result.returncode == 7


def test_cron_on_three_machines_runs_the_job_once(url: str, name: str, r: redis.Redis) -> None:
    """Three ``redlease run`` started together (as cron on three machines): one runs the
    job, the two others find the lock taken, however soon the job ended, and exit 0."""
    argv = [
        sys.executable, "-m", "redlease", "run", "--url", url, "--wait", "0",
        "--at-least", "30", "--conflict-exit-code", "0", name, "--",
        sys.executable, "-c", INCR, url, name + ":runs",
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        for _ in range(3)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert results == [(0, "", "")] * 3
    assert int(r.get(name + ":runs") or 0) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--at-least", "-1"],
        ["--at-least", "soon"],
        ["--at-least", "inf"],
        ["--lease", "5", "--at-least", "6"],
        ["--conflict-exit-code", "256"],
        ["--conflict-exit-code", "-1"],
        ["--conflict-exit-code", "zero"],
    ],
)
def test_usage_errors_are_one_line_exit_2(url: str, name: str, args: list[str]) -> None:
    result = run_cli("run", "--url", url, *args, name, "--", sys.executable, "-c", "")
    assert result.returncode == 2, result.stderr
    line = assert_one_line(result.stderr)
    assert args[-2] in line or "--at-least" in line


def test_help_tells_of_both_options() -> None:
    result = run_cli("run", "--help")
    assert result.returncode == 0
    assert "--at-least SECONDS" in result.stdout
    assert "--conflict-exit-code N" in result.stdout
    assert "--at-least 60 -E 0" in result.stdout  # the cron example
