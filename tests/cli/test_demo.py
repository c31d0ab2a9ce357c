"""``redlease demo`` run as a user runs it: ``python -m redlease demo ...`` in a subprocess.

Only the locked round is asserted exact; the unlocked round is a race that may by chance come
out right, so it is only checked to run and report.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version

import pytest
import redis

from redlease.testing import RedisServer, ServerBinary, find_servers, free_port

from .helpers import call_cli

TIMEOUT = 120
SERVERS = [
    max(group, key=lambda s: s.version_tuple)
    for flavor in sorted({s.flavor for s in find_servers()})
    if (group := [s for s in find_servers() if s.flavor == flavor])
]
"""The newest binary of each flavor (Redis, Valkey): the demo's scripts are the library's,
run on every binary by the other tests; a demo run is among the slowest tests (27 s at -n 6)."""
ROUND_LINE = re.compile(
    r"^\s*(?P<label>no lock|with lock): sold=(?P<sold>\d+) stock=(?P<stock>\d+)"
    r" expected=(?P<expected>\d+) seconds=(?P<seconds>[\d.]+)$",
    re.MULTILINE,
)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redlease", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def rounds(stdout: str) -> dict[str, dict[str, float]]:
    """``{"no lock": {...}, "with lock": {...}}`` from the machine-checkable round lines."""
    return {
        m["label"]: {k: float(m[k]) for k in ("sold", "stock", "expected", "seconds")}
        for m in ROUND_LINE.finditer(stdout)
    }


def assert_demo_ok(result: subprocess.CompletedProcess[str], stock: int) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    found = rounds(result.stdout)
    assert set(found) == {"no lock", "with lock"}, result.stdout
    assert found["with lock"]["sold"] == stock
    assert found["with lock"]["stock"] == 0
    assert found["with lock"]["expected"] == stock
    assert found["no lock"]["expected"] == stock  # ran and reported; its outcome is a race
    assert "verdict:" in result.stdout


def assert_one_line_error(result: subprocess.CompletedProcess[str], status: int) -> None:
    assert result.returncode == status, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("redlease: error: ")


@pytest.fixture(params=SERVERS, ids=[s.label for s in SERVERS])
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    binary: ServerBinary = request.param
    srv = RedisServer(binary).start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def password_server() -> Iterator[RedisServer]:
    """A server that requires the password ``s3cret`` (set after start: the readiness PING
    of ``RedisServer`` is unauthenticated)."""
    srv = RedisServer().start()
    try:
        admin = redis.Redis.from_url(srv.url)
        admin.config_set("requirepass", "s3cret")
        admin.close()
        yield srv
    finally:
        srv.close()


def test_demo_with_defaults_on_a_private_server() -> None:
    result = run_cli("demo")
    assert_demo_ok(result, stock=100)
    assert "4 worker processes" in result.stdout
    assert "private" in result.stdout


def test_demo_with_url_uses_that_server_and_cleans_up(server: RedisServer) -> None:
    result = run_cli("demo", "--url", server.url, "--workers", "3", "--stock", "30")
    assert_demo_ok(result, stock=30)
    assert f"127.0.0.1:{server.port}" in result.stdout
    with redis.Redis.from_url(server.url) as r:
        assert r.keys("redlease:demo:*") == []


def test_unreachable_server_is_one_line_and_exit_1() -> None:
    result = run_cli("demo", "--url", f"redis://127.0.0.1:{free_port()}")
    assert_one_line_error(result, 1)
    assert "cannot reach" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("password", ["s3cret", "wrong-s3cret"])
def test_password_in_url_is_never_printed(password_server: RedisServer, password: str) -> None:
    url = f"redis://:{password}@127.0.0.1:{password_server.port}/0"
    result = run_cli("demo", "--url", url, "--stock", "20")
    assert password not in result.stdout + result.stderr
    if password == "s3cret":
        assert_demo_ok(result, stock=20)
        assert f"127.0.0.1:{password_server.port}" in result.stdout
    else:
        assert_one_line_error(result, 1)
        assert "authentication failed" in result.stderr


def test_password_not_printed_when_server_is_down() -> None:
    result = run_cli("demo", "--url", f"redis://:s3cret@127.0.0.1:{free_port()}")
    assert_one_line_error(result, 1)
    assert "s3cret" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--workers", "0"],
        ["--stock", "-1"],
        ["--stock", "many"],
        ["--url", "http://:s3cret@127.0.0.1:1"],
        ["--url", "redis://:s3cret@127.0.0.1:notaport"],
        ["--no-such-option"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = call_cli("demo", *args)  # in this process: argparse's answer, no demo started
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "error:" in result.stderr
    assert "s3cret" not in result.stdout + result.stderr


def test_no_command_is_a_usage_error() -> None:
    result = run_cli()
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"redlease {version('redlease')}"
