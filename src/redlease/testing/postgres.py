"""A private PostgreSQL server for tests: ``PostgresServer``, a cluster made by ``initdb`` in a
temporary directory, on a free loopback port, stopped by the PID this module started.

The binaries are Debian's and Ubuntu's ``postgresql`` package (``/usr/lib/postgresql/<version>/
bin``, not on ``PATH``; the newest version found is used) or ``initdb`` and ``postgres`` on
``PATH``. PostgreSQL refuses to run as root: as root, the cluster is made and run as the
``postgres`` user (which the package creates), or ``nobody`` where there is none, and the
directory is given to that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .servers import _RUNNING, free_port

__all__ = ["PostgresServer", "find_postgres"]

_INSTALL = "apt-get install postgresql"
_DEBIAN = Path("/usr/lib/postgresql")
"""Where Debian's and Ubuntu's packages put each version's binaries (``<version>/bin``)."""


def find_postgres() -> Path:
    """The folder of the newest PostgreSQL server binaries (``initdb``, ``postgres``).

    Raises:
        RuntimeError: none found; the message says how to install them.
    """
    found: list[tuple[tuple[int, ...], Path]] = []
    with contextlib.suppress(OSError):
        for folder in _DEBIAN.iterdir():
            if re.fullmatch(r"\d+(\.\d+)*", folder.name) and (folder / "bin" / "initdb").exists():
                found.append((tuple(int(n) for n in folder.name.split(".")), folder / "bin"))
    if found:
        return max(found)[1]
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).resolve().parent
    raise RuntimeError(
        f"PostgreSQL server binaries (initdb, postgres) not found in {_DEBIAN}/*/bin "
        f"nor on PATH: install them ({_INSTALL})"
    )


class PostgresServer:
    """A private PostgreSQL cluster on 127.0.0.1, made by ``start()`` in a temporary directory
    and stopped by its own PID (``stop()``, or when the Python process that started it exits).

    ``with PostgresServer() as server: sqlalchemy.create_engine(server.url_for("psycopg"))``.
    The user is ``postgres`` with no password (trust authentication, loopback only), the
    database ``postgres``; nothing is synced to disk (``fsync=off``): a test server only.
    """

    def __init__(self, *, port: int | None = None, startup_timeout: float = 60.0) -> None:
        self.bin = find_postgres()
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres`` (libpq, psycopg, asyncpg)."""
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def url_for(self, driver: str) -> str:
        """The SQLAlchemy URL with ``driver``: ``url_for("psycopg")`` is
        ``postgresql+psycopg://postgres@127.0.0.1:<port>/postgres``."""
        return self.url.replace("postgresql://", f"postgresql+{driver}://", 1)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _user(self) -> str | None:
        """The user to run as: ``None`` (this one) unless this is root."""
        if os.geteuid() != 0:
            return None
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                pwd.getpwnam(name)
                return name
        raise RuntimeError("running as root and no 'postgres' nor 'nobody' user to run as")

    def start(self) -> PostgresServer:
        if self.process is not None:
            return self
        user = self._user()
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="redlease-postgres-")
            if user is not None:
                entry = pwd.getpwnam(user)
                os.chown(self._dir, entry.pw_uid, entry.pw_gid)
            data = os.path.join(self._dir, "data")
            initdb = subprocess.run(
                [str(self.bin / "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
                 "-E", "UTF8", "--locale=C", "--no-sync"],
                user=user, stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
            )  # fmt: skip
            if initdb.returncode != 0:
                raise RuntimeError(f"initdb failed: {initdb.stderr.decode(errors='replace')}")
        assert self._dir is not None
        log = open(os.path.join(self._dir, "server.log"), "ab")  # noqa: SIM115
        with log:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", os.path.join(self._dir, "data"),
                 "-p", str(self.port), "-k", self._dir, "-c", f"listen_addresses={self.host}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=200"],
                user=user, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _RUNNING[self.process.pid] = (self.process, os.getpid())
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until ``postmaster.pid`` says ``ready`` (PostgreSQL 10+ writes it there)."""
        assert self.process is not None and self._dir is not None
        status = Path(self._dir, "data", "postmaster.pid")
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start: {self.log_tail()}")
            with contextlib.suppress(OSError, IndexError):
                if status.read_text().splitlines()[7].strip() == "ready":
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"postgres did not get ready on port {self.port} in time")

    def log_tail(self, lines: int = 20) -> str:
        if self._dir is None:
            return ""
        try:
            text = Path(self._dir, "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server this object started (by PID: a fast shutdown, SIGINT, which
        disconnects the clients) and wait for it."""
        process, self.process = self.process, None
        if process is None:
            return
        _RUNNING.pop(process.pid, None)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def close(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
