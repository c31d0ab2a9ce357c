"""A benchmark's child process that reports on stdout, one event per line
(``benchmarks/election.py``'s candidates, ``benchmarks/successor.py``'s holder and waiters)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading


class Child:
    """``python <script> *args`` with its stdout lines (split into words) in ``lines``."""

    def __init__(self, script: str, *args: str, quiet: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, script, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if quiet else None,
            text=True,
        )
        self.lines: queue.Queue[list[str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.split())

    def next(self, timeout: float) -> list[str]:
        """Its next line; exits the benchmark when it says nothing within ``timeout`` s."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise SystemExit(f"child {self.proc.pid} said nothing within {timeout} s") from None

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        """Kill it (SIGKILL) if it still runs, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
