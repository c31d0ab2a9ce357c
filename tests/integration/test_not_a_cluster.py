"""``from_url(url, cluster=True)`` on a server that is not a cluster (issue #25, section 3):
a clear ``InvalidArgumentError`` (a ``RedleaseError``) saying so, naming the server without
the URL's password, instead of redis-py's ``RedisClusterException``. The sync client reads the
cluster's layout in ``from_url``; the asyncio one at its first command. An unreachable one
is a ``ServerUnavailableError``."""

from __future__ import annotations

import pytest

from redlease import AsyncClient, Client, InvalidArgumentError, ServerUnavailableError
from redlease.testing import RedisServer, free_port

PASSWORD = "s3cret-pw"


def chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def assert_no_password(exc: BaseException) -> None:
    for error in chain(exc):
        assert PASSWORD not in str(error) and PASSWORD not in repr(error.args)


def test_sync_from_url_on_a_single_server(server: RedisServer) -> None:
    url = server.url.replace("redis://", f"redis://:{PASSWORD}@")
    with pytest.raises(InvalidArgumentError) as info:
        Client.from_url(url, cluster=True)
    message = str(info.value)
    assert "is not a Redis Cluster" in message and "cluster=False" in message
    assert f"127.0.0.1:{server.port}" in message and "***" in message
    assert_no_password(info.value)
    with Client.from_url(server.url) as client:  # the same server as a single one is fine
        assert client.lock("x").acquire(timeout=0)
        client.lock("x").release()


async def test_async_client_on_a_single_server(server: RedisServer) -> None:
    url = server.url.replace("redis://", f"redis://:{PASSWORD}@")
    client = AsyncClient.from_url(url, cluster=True)  # no I/O yet
    try:
        with pytest.raises(InvalidArgumentError) as info:
            await client.lock("x").acquire(timeout=0)
        message = str(info.value)
        assert "is not a Redis Cluster" in message and "cluster=False" in message
        assert f"127.0.0.1:{server.port}" in message
        assert_no_password(info.value)
    finally:
        await client.close()


def test_sync_from_url_on_no_server() -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    with pytest.raises(ServerUnavailableError) as info:
        Client.from_url(url, cluster=True, socket_connect_timeout=2)
    assert "could not be read" in str(info.value) and "***" in str(info.value)
    assert_no_password(info.value)
