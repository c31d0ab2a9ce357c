"""Fixtures: private servers (every binary found), and each test run on the sync and asyncio side.

Servers come from ``redlease.testing`` (the same code the demo and benchmarks use): a free
127.0.0.1 port, nothing persisted, stopped by PID. Nothing here assumes a server on 6379.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import settings

import redlease
from redlease.testing import PostgresServer, RedisServer, ServerBinary, find_servers

SERVERS = find_servers()
NEWEST_EACH = [
    max(group, key=lambda s: s.version_tuple)
    for flavor in sorted({s.flavor for s in SERVERS})
    if (group := [s for s in SERVERS if s.flavor == flavor])
]
"""The newest binary of each flavor found (Redis, Valkey): where a ``two_servers`` test runs."""

# No timing asserts in tests: Hypothesis's deadline (200 ms an example) is one, and failed
# examples that took 454 ms on a loaded machine (test_rwlock_core, Python 3.10, -n 3)
settings.register_profile("redlease", deadline=None)
settings.load_profile("redlease")


_BYTECODE_DIR: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set (no ``.pyc`` beside the sources), the Python
    processes the tests start (``python -m redlease``, the demo's and Celery's workers, a
    fresh interpreter per module in ``test_shell_boundaries``, the suite's own worker
    processes) keep their bytecode in a directory of this run's instead
    (``PYTHONPYCACHEPREFIX``, removed at the end; nothing is written in the checkout): each
    compiled the package's sources again, a tenth of a CPU second a process. Set here, before
    pytest-xdist starts its workers, which inherit it (and leave it as it is)."""
    global _BYTECODE_DIR
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        _BYTECODE_DIR = tempfile.mkdtemp(prefix="redlease-tests-pyc-")
        os.environ["PYTHONPYCACHEPREFIX"] = _BYTECODE_DIR
        del os.environ["PYTHONDONTWRITEBYTECODE"]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _BYTECODE_DIR is not None:
        shutil.rmtree(_BYTECODE_DIR, ignore_errors=True)


def pytest_report_header() -> str:
    return "servers: " + (", ".join(s.label for s in SERVERS) or "none found")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``one_server`` runs on the newest server binary found only (deselected
    on the others): what it checks is the client's own (its transport, its watchdog), the
    same on every server, and it is slow; every script is still run on every binary by the
    other tests. A test marked ``two_servers`` (a slow scenario, mostly waiting, whose scripts
    the other tests run on every binary) runs on the newest Redis and the newest Valkey only."""
    if not SERVERS:
        return
    newest = max(SERVERS, key=lambda s: s.version_tuple)
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        binary = callspec.params.get("binary", newest) if callspec is not None else newest
        one = item.get_closest_marker("one_server") is not None and binary is not newest
        two = item.get_closest_marker("two_servers") is not None and binary not in NEWEST_EACH
        if one or two:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session", params=SERVERS, ids=[s.label for s in SERVERS])
def binary(request: pytest.FixtureRequest) -> ServerBinary:
    return request.param


@pytest.fixture(scope="session")
def server(binary: ServerBinary) -> Iterator[RedisServer]:
    """One shared server per binary; tests use unique names instead of flushing."""
    with RedisServer(binary) as srv:
        yield srv


@pytest.fixture
def private_server(binary: ServerBinary) -> Iterator[RedisServer]:
    """A server of this test's own, for tests that kill, pause or restart it."""
    with RedisServer(binary) as srv:
        yield srv


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster for the fenced SQL writes (Debian's ``postgresql``
    package: where it is missing, the tests that use this fail saying to install it)."""
    with PostgresServer() as server:
        yield server


LONG_RECHECK = 60.0
"""The waiters' re-check under ``long_recheck``: longer than any wait such a test makes."""


@pytest.fixture
def long_recheck(monkeypatch: pytest.MonkeyPatch) -> float:
    """Waiters in this process re-check only every ``LONG_RECHECK`` seconds (not every
    ``RECHECK``: 5 s, the read-write lock's 2 s): a test that a message woke a waiter (its
    wait ``timeout`` well past the bound it checks) can then give a loaded machine many
    seconds and still tell a wake-up from a re-check. Returns the bound: 10 s."""
    from redlease._core import lock, redlock, rwlock, waiting

    for module in (lock, redlock, rwlock, waiting):
        monkeypatch.setattr(module, "RECHECK", LONG_RECHECK)
    return 10.0


@pytest.fixture
def name() -> str:
    return f"test:{uuid.uuid4().hex[:12]}"


class Side:
    """Runs one test body on the sync or the asyncio API: ``await side(lock.acquire())``
    works for both (a sync call has already run; an async one is awaited)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.is_async = kind == "async"
        self._clients: list[Any] = []

    def client(self, url: str, **kwargs: Any) -> Any:
        factory = redlease.AsyncClient if self.is_async else redlease.Client
        client = factory.from_url(url, **kwargs)
        self._clients.append(client)
        return client

    async def __call__(self, value: Any) -> Any:
        if inspect.isawaitable(value):
            return await value
        return value

    def hold(self, lock: Any, **kwargs: Any) -> Any:
        """``async with side.hold(lock, timeout=...)`` on either side."""
        return _AsyncView(lock.hold(**kwargs)) if not self.is_async else lock.hold(**kwargs)

    async def close(self) -> None:
        for client in self._clients:
            await self(client.close())


class _AsyncView:
    def __init__(self, cm: Any) -> None:
        self._cm = cm

    async def __aenter__(self) -> Any:
        return self._cm.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)


@pytest.fixture(params=["sync", "async"])
async def side(request: pytest.FixtureRequest) -> AsyncIterator[Side]:
    s = Side(request.param)
    yield s
    await s.close()
