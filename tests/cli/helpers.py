"""Running ``python -m redlease`` as a user does, and bounded waits (never a bare sleep)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

TIMEOUT = 60.0
"""Upper bound of any one CLI run in these tests (they normally take about a second)."""


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: ours without ``REDLEASE_URL``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "REDLEASE_URL"}
    env.update(extra)
    return env


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(
        [sys.executable, "-m", "redlease", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else cli_env(),
        **kwargs,
    )


def start_cli(*args: str, stderr: Any = subprocess.PIPE, **kwargs: Any) -> subprocess.Popen[str]:
    """``redlease ...`` in the background, in a session of its own (no controlling terminal,
    so SIGINT is forwarded as from any other sender)."""
    return subprocess.Popen(
        [sys.executable, "-m", "redlease", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=cli_env(),
        start_new_session=True,
        **kwargs,
    )


_finished: weakref.WeakKeyDictionary[subprocess.Popen[str], tuple[int, str, str]] = (
    weakref.WeakKeyDictionary()
)


def finish(proc: subprocess.Popen[str], timeout: float = TIMEOUT) -> tuple[int, str, str]:
    """Wait (bounded) for a background CLI run; kill it if it overstays. (status, out, err);
    the same answer again when called a second time."""
    if proc in _finished:
        return _finished[proc]
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        _finished[proc] = (proc.returncode, out or "", err or "")
        raise AssertionError(f"redlease did not end within {timeout} s: {err}") from None
    _finished[proc] = (proc.returncode, out or "", err or "")
    return _finished[proc]


def eventually(
    condition: Callable[[], Any],
    timeout: float = 20.0,
    what: str = "",
    proc: subprocess.Popen[str] | None = None,
) -> None:
    """Wait until ``condition()`` is true, failing after ``timeout`` seconds, or at once when
    the background CLI run ``proc`` has ended meanwhile (with what it printed)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            status, out, err = finish(proc)
            raise AssertionError(f"redlease ended (status {status}) before {what}: {out}{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout} s")
        time.sleep(0.02)


def python_script(directory: Path, name: str, source: str) -> list[str]:
    """A command line running ``source`` (written to ``directory/name``) with our Python."""
    path = directory / name
    path.write_text(source)
    return [sys.executable, str(path)]


def assert_one_line(stderr: str, *, starts: str = "redlease") -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(starts), stderr
    return lines[0]
