"""Running ``python -m redlease`` as a user does, and bounded waits (never a bare sleep)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
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


def call_cli(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``redlease ...`` run in this process (``redlease.cli.main(argv)``, the function the
    command line calls), answered as ``run_cli`` answers: status, stdout, stderr.

    For the tests of what ``status``, ``list`` and ``release`` print and return: a process
    of its own each costs a Python start and the package's imports (a third of a CPU second).
    The environment's ``REDLEASE_URL`` is the one of ``env`` (none by default, as for
    ``run_cli``), stdin reads as /dev/null does (no terminal), and a log record of WARNING or
    above goes to stderr as Python's last-resort handler writes it in a process of its own,
    and so does a warning (``warnings.showwarning``'s text).
    Exit statuses, signals, terminals and ``run`` stay tested in real processes (``run_cli``)."""
    from redlease.cli import main

    wanted = (env if env is not None else cli_env()).get("REDLEASE_URL")
    saved = os.environ.get("REDLEASE_URL")
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        if wanted is None:
            os.environ.pop("REDLEASE_URL", None)
        else:
            os.environ["REDLEASE_URL"] = wanted
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _stdin_like_devnull(),
            warnings.catch_warnings(record=True) as warned,
        ):
            warnings.simplefilter("default")
            status = main(list(args))
        for w in warned:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        root.removeHandler(handler)
        if saved is None:
            os.environ.pop("REDLEASE_URL", None)
        else:
            os.environ["REDLEASE_URL"] = saved
    argv = [sys.executable, "-m", "redlease", *args]
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _stdin_like_devnull() -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


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
