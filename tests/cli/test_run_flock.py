"""``redlease run`` in flock(1)'s shapes: ``run NAME COMMAND [ARGS]`` without ``--``,
``-n``, ``-w SECONDS``, ``-E N``, ``-c 'COMMAND'`` and ``--verbose``; a busy lock is silent
(cron mails nobody) unless ``--verbose``; ``--at-least`` tries once unless ``--wait`` is given
(a machine that waited would run the job a second time)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redlease import Client

from .helpers import assert_one_line, run_cli

ARGV = "import sys; print(sys.argv[1:])"


@pytest.fixture
def other(url: str) -> Iterator[Client]:
    """Another client, to hold locks the CLI then finds busy."""
    with Client.from_url(url) as client:
        yield client


def held(other: Client, name: str) -> None:
    assert other.lock(name).acquire(lease=120)


def marker_command(path: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(path)!r}, 'w')"]


def test_command_without_dashes_runs_with_its_own_options(url: str, name: str) -> None:
    """COMMAND is the first word after NAME that is not an option: what follows is its own."""
    result = run_cli(
        "run", "--url", url, name, sys.executable, "-c", ARGV, "--wait", "0", "--", "x"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--wait', '0', '--', 'x']"
    assert result.stderr == ""


def test_options_between_name_and_command(url: str, name: str, r: redis.Redis) -> None:
    result = run_cli("run", name, "--url", url, "-w", "5", sys.executable, "-c", "print('ran')")
    assert (result.returncode, result.stdout.strip()) == (0, "ran"), result.stderr
    assert r.exists(name) == 0


@pytest.mark.parametrize(
    ("options", "status"),
    [
        (["-n"], 75),
        (["--nonblock"], 75),
        (["-w", "0.3"], 75),
        (["-w0.3"], 75),
        (["--wait", "0"], 75),
        (["-n", "-E", "3"], 3),
        (["-nE0"], 0),
        (["-E", "0", "-w", "0.3"], 0),
    ],
)
def test_busy_lock_is_silent_with_the_conflict_status(
    url: str, name: str, other: Client, tmp_path: Path, options: list[str], status: int
) -> None:
    held(other, name)
    marker = tmp_path / "ran"
    result = run_cli("run", "--url", url, *options, name, *marker_command(marker))
    assert result.returncode == status, result.stderr
    assert (result.stdout, result.stderr) == ("", "")  # as flock -n: cron mails nobody
    assert not marker.exists()


@pytest.mark.parametrize(
    ("options", "said"),
    [(["-n"], "tried once"), (["-w", "0.5"], "not acquired within 0.5 s")],
)
def test_verbose_says_the_lock_was_busy(
    url: str, name: str, other: Client, options: list[str], said: str
) -> None:
    held(other, name)
    result = run_cli("run", "--url", url, "--verbose", *options, name, "true")
    assert result.returncode == 75
    line = assert_one_line(result.stderr)
    assert name in line and "busy" in line and said in line


def test_verbose_says_how_long_taking_the_lock_took(url: str, name: str) -> None:
    result = run_cli("run", "--url", url, "--verbose", name, sys.executable, "-c", "")
    assert result.returncode == 0, result.stderr
    assert f"took lock {name!r} in " in assert_one_line(result.stderr)


def test_c_runs_one_string_through_the_shell(url: str, name: str, r: redis.Redis) -> None:
    result = run_cli("run", "--url", url, name, "-c", "echo a b | tr a-z A-Z; exit 4")
    assert (result.returncode, result.stdout.strip()) == (4, "A B"), result.stderr
    assert r.exists(name) == 0


def test_c_before_name_as_an_option(url: str, name: str) -> None:
    result = run_cli("run", "--url", url, "-n", "-c", "echo ran", name)
    assert (result.returncode, result.stdout.strip()) == (0, "ran"), result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-c", "echo a", "echo"], "not both"),
        ([], "no COMMAND given"),
        (["-n", "-w", "5", "true"], "not allowed with"),
    ],
)
def test_command_usage_errors(url: str, name: str, args: list[str], said: str) -> None:
    result = run_cli("run", "--url", url, name, *args)
    assert result.returncode == 2
    assert said in assert_one_line(result.stderr)


def test_at_least_tries_once_unless_wait_is_given(
    url: str, name: str, other: Client, tmp_path: Path
) -> None:
    """On the old CLI this run waited for the holder (120 s) and then ran the job again."""
    held(other, name)
    marker = tmp_path / "ran"
    result = run_cli(
        "run", "--url", url, "--at-least", "5", name, *marker_command(marker), timeout=40
    )
    assert result.returncode == 75, result.stderr
    assert result.stderr == ""
    assert not marker.exists()


def test_at_least_with_wait_waits(url: str, name: str, other: Client) -> None:
    held(other, name)
    result = run_cli("run", "--url", url, "--verbose", "--at-least", "5", "-w", "0.5", name, "true")
    assert result.returncode == 75
    assert "not acquired within 0.5 s" in assert_one_line(result.stderr)


def test_help_shows_flock_s_options() -> None:
    result = run_cli("run", "--help")
    assert result.returncode == 0
    for option in ("-n, --nonblock", "--verbose", "NAME COMMAND [ARGS...]"):
        assert option in result.stdout, option
    # an option's value: "-w SECONDS, --wait SECONDS", named once from Python 3.13 on
    # ("-w, --wait SECONDS")
    for short, long, value in (
        ("-w", "--wait", "SECONDS"),
        ("-E", "--conflict-exit-code", "N"),
        ("-c", "--command", "'COMMAND'"),
    ):
        shown = (f"{short} {value}, {long}", f"{short}, {long} {value}")
        assert any(each in result.stdout for each in shown), shown
