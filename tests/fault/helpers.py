"""Helpers of the fault tests: a lock holder in another process, bounded waits, scripts' SHAs."""

from __future__ import annotations

import asyncio
import inspect
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redlease._core import scripts

HOLDER = str(Path(__file__).with_name("holder.py"))

ACQUIRE_SHA = scripts.LOCK_ACQUIRE.sha.encode()
"""Bytes that only an acquire's EVALSHA carries: ``TcpProxy.drop_next_reply(ACQUIRE_SHA)``."""
RELEASE_SHA = scripts.LOCK_RELEASE.sha.encode()
FENCED_SET_SHA = scripts.FENCED_SET.sha.encode()


class Holder:
    """``tests/fault/holder.py`` in a child process: ``ask("acquire")`` returns its answer line.

    Stopped, resumed and killed only by the PID this object started.
    """

    def __init__(
        self, side: str, url: str, name: str, watchdog: float, resource_url: str | None = None
    ) -> None:
        args = [sys.executable, HOLDER, side, url, name, str(watchdog)]
        if resource_url:
            args.append(resource_url)
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert self.next_line(timeout=30) == "ready"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def next_line(self, timeout: float = 15.0) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"holder said nothing within {timeout} s") from None

    def ask(self, command: str, timeout: float = 15.0) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.next_line(timeout)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # in case it was left stopped
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, step: float = 0.005) -> float:
    """Wait until ``condition()`` is true; returns the seconds it took. Fails after ``timeout``."""
    started = time.monotonic()
    deadline = started + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)
    return time.monotonic() - started


async def eventually(condition: Callable[[], Any], timeout: float = 10.0) -> float:
    """``wait_until`` for either side: ``condition()`` may return an awaitable."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.005)


def waiting(client: Any, name: str) -> bool:
    """Whether a thread or task of ``client`` is waiting for the unlock message of ``name``."""
    sub = client._subscriber
    return sub is not None and sub.waiting(f"redisson_lock__channel:{{{name}}}") > 0
