"""Fixtures and helpers for the Redlock and multi-lock tests.

They run against one server binary only (``find_server()``, the newest found), not every binary
the suite knows, so that many private servers stay cheap: five shared ones per module for tests
that only read and write, three fresh ones for each test that kills, stops or restarts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redlease._async.redlock import AsyncRedlockClient
from redlease._sync.redlock import RedlockClient
from redlease.testing import RedisServer, ServerBinary, find_server

from .helpers import reply_str_hash


@pytest.fixture(scope="session")
def redlock_binary() -> ServerBinary:
    return find_server()


def _start(binary: ServerBinary, count: int) -> list[RedisServer]:
    servers: list[RedisServer] = []
    try:
        for _ in range(count):
            servers.append(RedisServer(binary).start())
    except BaseException:
        _stop(servers)
        raise
    return servers


def _stop(servers: list[RedisServer]) -> None:
    for server in servers:
        server.resume()  # a test that failed while a server was stopped
        server.close()


@pytest.fixture(scope="module")
def five(redlock_binary: ServerBinary) -> Iterator[list[RedisServer]]:
    """Five masters shared by a module's tests (which use unique lock names)."""
    servers = _start(redlock_binary, 5)
    yield servers
    _stop(servers)


@pytest.fixture(scope="module")
def three(five: list[RedisServer]) -> list[RedisServer]:
    return five[:3]


@pytest.fixture
def private3(redlock_binary: ServerBinary) -> Iterator[list[RedisServer]]:
    """Three masters of this test's own, to kill, stop or restart."""
    servers = _start(redlock_binary, 3)
    yield servers
    _stop(servers)


TEST_MASTER_TIMEOUT = 0.5
"""Per-master timeout of the tests' clients unless a test is about timing: roomier than the
default 0.1 s, so that a loaded machine does not turn a slow reply into a failed test."""


def redlock(side: Any, servers: list[RedisServer], **kwargs: Any) -> Any:
    """A ``RedlockClient`` or ``AsyncRedlockClient`` (by side), closed after the test."""
    kwargs.setdefault("master_timeout", TEST_MASTER_TIMEOUT)
    factory = AsyncRedlockClient if side.is_async else RedlockClient
    client = factory.from_urls([s.url for s in servers], **kwargs)
    side._clients.append(client)
    return client


def holders(server: RedisServer, name: str) -> dict[str, str]:
    """The owner fields of ``name`` on one master (a stopped master must not be asked)."""
    raw = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=5)
    try:
        fields = raw.hgetall(name)
    finally:
        raw.close()
    return {k: v for k, v in reply_str_hash(fields).items() if not k.startswith("redlease:")}


def held_on(servers: list[RedisServer], name: str) -> list[int]:
    """Which of ``servers`` have the lock key at all."""
    return [i for i, s in enumerate(servers) if holders(s, name)]


def listening(client: Any, name: str) -> int:
    """How many of a Redlock client's master subscribers have a waiter on ``name``."""
    channel = f"redisson_lock__channel:{{{name}}}"
    total = 0
    for master in client._masters:
        sub = master.client._subscriber
        total += sub.waiting(channel) if sub is not None else 0
    return total
