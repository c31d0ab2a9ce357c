"""One private server for the CLI tests of ``run``, ``status``, ``list`` and ``release``
(the newest binary found; tests use unique lock names instead of flushing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from redlease.testing import RedisServer


@pytest.fixture(scope="session")
def cli_server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def url(cli_server: RedisServer) -> str:
    return cli_server.url


@pytest.fixture
def r(cli_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(cli_server.url, socket_timeout=10)
    try:
        yield client
    finally:
        client.close()
