"""Fixtures: private servers (every binary found), and each test run on the sync and asyncio side.

Servers come from ``redlease.testing`` (the same code the demo and benchmarks use): a free
127.0.0.1 port, nothing persisted, stopped by PID. Nothing here assumes a server on 6379.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import redlease
from redlease.testing import PostgresServer, RedisServer, ServerBinary, find_servers

SERVERS = find_servers()


def pytest_report_header() -> str:
    return "servers: " + (", ".join(s.label for s in SERVERS) or "none found")


@pytest.fixture(scope="session", params=SERVERS, ids=[s.label for s in SERVERS])
def binary(request: pytest.FixtureRequest) -> ServerBinary:
    return request.param  # type: ignore[no-any-return]


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
