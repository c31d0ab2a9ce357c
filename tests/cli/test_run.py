"""``redlease run NAME -- COMMAND`` run as a user runs it, against a private server.

Children are small Python scripts whose loops are bounded (60 s at most), so nothing is left
running when a test fails. Waits poll a condition with a deadline; the only fixed waits are
the leases that must run out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redlease import Client
from redlease.testing import RedisServer, free_port

from .helpers import (
    assert_one_line,
    cli_env,
    eventually,
    finish,
    python_script,
    run_cli,
    start_cli,
)

SLEEPER = """\
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text("started")
for _ in range(600):  # 60 s at most
    time.sleep(0.1)
"""

TRAPPER = """\
import pathlib, signal, sys, time
got = pathlib.Path(sys.argv[2])
def handler(signum, frame):
    got.write_text(signal.Signals(signum).name)
    sys.exit(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, handler)
pathlib.Path(sys.argv[1]).write_text("started")
for _ in range(600):  # 60 s at most
    time.sleep(0.1)
sys.exit(3)
"""

STUBBORN = """\
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[1]).write_text("started")
for _ in range(600):  # 60 s at most
    time.sleep(0.1)
"""

FINISHER = """\
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text("started")
go = pathlib.Path(sys.argv[2])
for _ in range(600):  # 60 s at most
    if go.exists():
        pathlib.Path(sys.argv[3]).write_text("finished")
        sys.exit(0)
    time.sleep(0.05)
sys.exit(4)
"""


@pytest.fixture
def other(url: str) -> Iterator[Client]:
    """Another client, to hold locks the CLI then finds busy."""
    with Client.from_url(url) as client:
        yield client


def subscribers(r: redis.Redis, name: str) -> int:
    """Clients waiting on the lock's unlock channel (a waiting ``redlease run`` is one)."""
    channel = f"redisson_lock__channel:{{{name}}}"
    return int(dict(r.pubsub_numsub(channel))[channel.encode()])


def test_exit_status_passes_through(url: str, name: str, r: redis.Redis) -> None:
    result = run_cli(
        "run", "--url", url, name, "--", sys.executable, "-c", "import sys; sys.exit(7)"
    )
    assert result.returncode == 7, result.stderr
    assert result.stderr == ""
    assert r.exists(name) == 0


def test_command_runs_while_the_lock_is_held(url: str, name: str, r: redis.Redis) -> None:
    check = (
        "import sys, redis\n"
        "r = redis.Redis.from_url(sys.argv[1])\n"
        "owners = [f for f in r.hkeys(sys.argv[2]) if not f.startswith(b'redlease:')]\n"
        "sys.exit(0 if len(owners) == 1 and r.pttl(sys.argv[2]) > 0 else 9)\n"
    )
    result = run_cli("run", "--url", url, name, "--", sys.executable, "-c", check, url, name)
    assert result.returncode == 0, result.stderr
    assert r.exists(name) == 0  # released afterwards


def test_options_after_name_and_dashes_inside_command(url: str, name: str) -> None:
    result = run_cli(
        "run", name, "--url", url, "--wait", "5", "--",
        sys.executable, "-c", "import sys; print(sys.argv[1:])", "--wait", "--", "x",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--wait', '--', 'x']"


def test_killed_command_gives_128_plus_signal(url: str, name: str) -> None:
    suicide = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = run_cli("run", "--url", url, name, "--", sys.executable, "-c", suicide)
    assert result.returncode == 128 + signal.SIGKILL, result.stderr


def test_wait_0_on_a_held_lock_exits_75_at_once(
    url: str, name: str, other: Client, tmp_path: Path
) -> None:
    assert other.lock(name).acquire(lease=60)
    marker = tmp_path / "ran"
    started = time.monotonic()
    result = run_cli(
        "run", "--url", url, "--wait", "0", name, "--",
        sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 75, result.stderr
    assert result.stderr == ""  # silent unless --verbose (tests/cli/test_run_flock.py)
    assert not marker.exists()
    assert elapsed < 10


def test_wait_runs_out_with_75(url: str, name: str, other: Client) -> None:
    assert other.lock(name).acquire(lease=60)
    started = time.monotonic()
    result = run_cli(
        "run", "--url", url, "--verbose", "--wait", "1", name, "--", sys.executable, "-c", ""
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 75, result.stderr
    assert "not acquired within 1 s" in assert_one_line(result.stderr)
    assert 0.9 < elapsed < 30


def test_waits_for_the_holder_then_runs(url: str, name: str, other: Client, r: redis.Redis) -> None:
    held = other.lock(name)
    assert held.acquire(lease=60)
    proc = start_cli("run", "--url", url, "--wait", "30", name, "--", sys.executable, "-c", "")
    try:
        eventually(lambda: subscribers(r, name) > 0, what="redlease run waiting", proc=proc)
        held.release()
    finally:
        status, _, err = finish(proc)
    assert status == 0, err
    assert r.exists(name) == 0


def test_lost_lease_stops_the_command(url: str, name: str, r: redis.Redis, tmp_path: Path) -> None:
    started = tmp_path / "started"
    command = python_script(tmp_path, "sleeper.py", SLEEPER)
    proc = start_cli("run", "--url", url, "--watchdog", "1", name, "--", *command, str(started))
    try:
        eventually(started.exists, what="command started", proc=proc)
        assert r.delete(name) == 1  # as a force release or an expiry would
    finally:
        status, _, err = finish(proc, timeout=30)
    assert status == 76, err
    assert "Traceback" not in err
    assert f"lost the lock {name!r}" in err
    assert "SIGTERM" in err
    assert f"exited with status {128 + signal.SIGTERM}" in err  # the child died of SIGTERM


def test_force_release_stops_the_command_at_once(url: str, name: str, r: redis.Redis) -> None:
    """A real ``redlease run -- sleep 600`` force-released by a real ``redlease release
    --force``: ``run`` is told at once on its client's own channel of the lock (its watchdog,
    with a 600 s lease, would look only after 200 s), stops the command and exits 76."""
    proc = start_cli("run", "--url", url, "--watchdog", "600", name, "--", "sleep", "600")
    try:
        # it holds the lock and listens where a force release tells it
        eventually(
            lambda: r.pubsub_channels(f"redlease:holder:{{{name}}}:*"),
            what="the lock held and its holder channel subscribed",
            proc=proc,
        )
        result = run_cli("release", "--force", "--yes", "--url", url, name)
        assert result.returncode == 0, result.stderr
        status, _, err = finish(proc, timeout=60)  # well before the watchdog's 200 s
    finally:
        if proc.poll() is None:  # (a failure: nothing of ours is left running)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: run and sleep
            finish(proc, timeout=10)
    assert status == 76, err
    assert "Traceback" not in err
    assert f"lost the lock {name!r}" in err and "force-released" in err
    assert f"exited with status {128 + signal.SIGTERM}" in err  # sleep died of SIGTERM


def test_lost_lease_then_sigkill_after_grace(
    url: str, name: str, r: redis.Redis, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    command = python_script(tmp_path, "stubborn.py", STUBBORN)
    proc = start_cli(
        "run", "--url", url, "--watchdog", "1", "--grace", "1", name, "--", *command, str(started)
    )
    try:
        eventually(started.exists, what="command started", proc=proc)
        r.delete(name)
    finally:
        status, _, err = finish(proc, timeout=30)
    assert status == 76, err
    assert "SIGKILL" in err
    assert f"exited with status {128 + signal.SIGKILL}" in err


def test_keep_going_lets_the_command_finish_but_exits_76(
    url: str, name: str, r: redis.Redis, tmp_path: Path
) -> None:
    started, go, finished = tmp_path / "started", tmp_path / "go", tmp_path / "finished"
    log = tmp_path / "stderr.txt"
    command = python_script(tmp_path, "finisher.py", FINISHER)
    with log.open("w") as err_file:
        proc = start_cli(
            "run", "--url", url, "--watchdog", "1", "--keep-going", name, "--",
            *command, str(started), str(go), str(finished),
            stderr=err_file,
        )  # fmt: skip
        try:
            eventually(started.exists, what="command started", proc=proc)
            r.delete(name)
            eventually(lambda: "lost the lock" in log.read_text(), what="loss reported", proc=proc)
            go.touch()
        finally:
            status, _, _ = finish(proc, timeout=30)
    err = log.read_text()
    assert status == 76, err
    assert finished.read_text() == "finished"  # not stopped
    assert "--keep-going" in err
    assert "exited with status 0" in err
    assert "Traceback" not in err


def test_lease_option_limits_the_hold(url: str, name: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    command = python_script(tmp_path, "sleeper.py", SLEEPER)
    result = run_cli("run", "--url", url, "--lease", "1", name, "--", *command, str(started))
    assert result.returncode == 76, result.stderr
    assert "lease of 1 s ran out" in result.stderr
    assert "Traceback" not in result.stderr


def test_lease_option_command_that_ends_in_time(url: str, name: str, r: redis.Redis) -> None:
    result = run_cli("run", "--url", url, "--lease", "30", name, "--", sys.executable, "-c", "")
    assert result.returncode == 0, result.stderr
    assert r.exists(name) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_are_forwarded_and_the_lock_released(
    url: str, name: str, r: redis.Redis, tmp_path: Path, signum: signal.Signals
) -> None:
    started, got = tmp_path / "started", tmp_path / "got"
    command = python_script(tmp_path, "trapper.py", TRAPPER)
    proc = start_cli("run", "--url", url, name, "--", *command, str(started), str(got))
    try:
        eventually(started.exists, what="command started", proc=proc)
        assert r.exists(name) == 1
        proc.send_signal(signum)
    finally:
        status, _, err = finish(proc, timeout=30)
    assert got.read_text() == signum.name
    assert status == 0, err  # the command's own status: its handler exits 0
    assert "Traceback" not in err
    assert r.exists(name) == 0


def test_signal_while_waiting_ends_the_wait(
    url: str, name: str, other: Client, r: redis.Redis, tmp_path: Path
) -> None:
    assert other.lock(name).acquire(lease=60)
    marker = tmp_path / "ran"
    proc = start_cli(
        "run", "--url", url, name, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"
    )
    try:
        eventually(lambda: subscribers(r, name) > 0, what="redlease run waiting", proc=proc)
        proc.send_signal(signal.SIGTERM)
    finally:
        status, _, err = finish(proc, timeout=30)
    assert status == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM" in assert_one_line(err)
    assert not marker.exists()


def test_command_not_found_is_127_and_releases(url: str, name: str, r: redis.Redis) -> None:
    result = run_cli("run", "--url", url, name, "--", "redlease-no-such-command-xyz")
    assert result.returncode == 127
    assert "cannot run" in assert_one_line(result.stderr)
    assert r.exists(name) == 0


def test_missing_url_is_exit_2_one_line(name: str) -> None:
    result = run_cli("run", name, "--", sys.executable, "-c", "")
    assert result.returncode == 2
    line = assert_one_line(result.stderr, starts="redlease: error: ")
    assert "--url" in line and "REDLEASE_URL" in line


def test_url_from_environment(url: str, name: str) -> None:
    result = run_cli(
        "run", name, "--", sys.executable, "-c", "raise SystemExit(5)",
        env=cli_env(REDLEASE_URL=url),
    )  # fmt: skip
    assert result.returncode == 5, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--url", "http://:s3cret@127.0.0.1:1"],
        ["--url", "redis://:s3cret@127.0.0.1:notaport"],
        ["--wait", "-1"],
        ["--wait", "soon"],
        ["--lease", "0"],
        ["--lease", "-5"],
        ["--lease", "nan"],
        ["--watchdog", "0"],
        ["--grace", "-1"],
        ["--lease", "5", "--watchdog", "5"],
    ],
)
def test_usage_errors_are_one_line_exit_2(name: str, args: list[str]) -> None:
    result = run_cli("run", *args, name, "--", sys.executable, "-c", "")
    assert result.returncode == 2, result.stderr
    assert_one_line(result.stderr)
    assert "s3cret" not in result.stderr


def test_no_command_is_a_usage_error(url: str, name: str) -> None:
    result = run_cli("run", "--url", url, name)
    assert result.returncode == 2
    assert "COMMAND" in assert_one_line(result.stderr)


@pytest.mark.parametrize(
    ("args", "out"),
    [(["true"], ""), (["echo", "--wait", "1"], "--wait 1"), (["echo", "--", "x"], "-- x")],
)
def test_command_without_dashes(url: str, name: str, args: list[str], out: str) -> None:
    """As flock: COMMAND is the first word after NAME that is not an option; its own
    options (even redlease's names, even '--') are passed on."""
    result = run_cli("run", "--url", url, name, *args)
    assert (result.returncode, result.stdout.strip()) == (0, out), result.stderr


def test_bad_url_in_environment_is_exit_2(name: str) -> None:
    env = cli_env(REDLEASE_URL="http://:s3cret@127.0.0.1:1")
    result = run_cli("run", name, "--", sys.executable, "-c", "", env=env)
    assert result.returncode == 2
    assert "REDLEASE_URL" in assert_one_line(result.stderr)
    assert "s3cret" not in result.stderr


@pytest.mark.parametrize("via_env", [False, True])
def test_server_down_is_one_line_exit_1_without_password(name: str, via_env: bool) -> None:
    down = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    args = ["run", name, "--", sys.executable, "-c", ""]
    if via_env:
        result = run_cli(*args, env=cli_env(REDLEASE_URL=down))
    else:
        result = run_cli("run", "--url", down, *args[1:])
    assert result.returncode == 1
    assert "cannot reach" in assert_one_line(result.stderr, starts="redlease: error: ")
    assert "s3cret" not in result.stdout + result.stderr


def test_loss_found_at_release_with_lease_option(
    url: str, name: str, r: redis.Redis, tmp_path: Path
) -> None:
    """With --lease there is no watchdog: a force release shows when the release finds it."""
    started, go, finished = tmp_path / "started", tmp_path / "go", tmp_path / "finished"
    command = python_script(tmp_path, "finisher.py", FINISHER)
    proc = start_cli(
        "run", "--url", url, "--lease", "60", name, "--",
        *command, str(started), str(go), str(finished),
    )  # fmt: skip
    try:
        eventually(started.exists, what="command started", proc=proc)
        r.delete(name)
        go.touch()
    finally:
        status, _, err = finish(proc, timeout=30)
    assert status == 76, err
    assert finished.exists()
    assert f"lost the lock {name!r}" in err
    assert "Traceback" not in err


@pytest.mark.fault
def test_server_gone_while_running_stops_the_command(name: str, tmp_path: Path) -> None:
    started = tmp_path / "started"
    command = python_script(tmp_path, "sleeper.py", SLEEPER)
    with RedisServer() as server:
        proc = start_cli(
            "run", "--url", server.url, "--watchdog", "2", name, "--", *command, str(started)
        )
        try:
            eventually(started.exists, what="command started", proc=proc)
            server.kill()
        finally:
            status, _, err = finish(proc, timeout=45)
    assert status == 76, err
    assert f"lost the lock {name!r}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        ["--watchdog", "1e12"],
        ["--watchdog", "0.001"],
        ["--lease", "1e12"],
        ["--grace", "1e12"],
        ["--at-least", "1e12"],
    ],
)
def test_durations_out_of_bounds_are_usage_errors(url: str, name: str, args: list[str]) -> None:
    """A duration the library refuses (a lease or watchdog lease outside 10 ms..10 years) is
    a usage error as every other bad argument: exit 2, one line naming the option, nothing
    run or written (it exited 1 with an InvalidArgumentError for --watchdog)."""
    result = run_cli(
        "run", "--url", url, *args, name, "--", sys.executable, "-c", "print('ran')"
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert args[0] in assert_one_line(result.stderr, starts="redlease: error: ")
    assert "ran" not in result.stdout
    with redis.Redis.from_url(url) as r:
        assert r.exists(name) == 0
