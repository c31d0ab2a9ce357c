"""``AsyncClient.aclose()`` (redis-py's spelling since 5.0.1; ``close()`` stays): it closes as
``close()`` does, ``contextlib.aclosing`` works, and ``async with`` still closes."""

from __future__ import annotations

import contextlib

import pytest

from redlease import AsyncClient, AsyncRedlockClient, Client, ClientClosedError
from redlease.testing import RedisServer


async def test_aclose_closes_as_close_does(server: RedisServer, name: str) -> None:
    client = AsyncClient.from_url(server.url)
    lock = client.lock(name)
    assert await lock.acquire()  # the watchdog and the connections are up
    await lock.release()
    await client.aclose()
    with pytest.raises(ClientClosedError):
        await lock.acquire()
    await client.aclose()  # a second close does nothing, as close() does
    await client.close()


async def test_aclosing_and_async_with(server: RedisServer, name: str) -> None:
    async with contextlib.aclosing(AsyncClient.from_url(server.url)) as client:
        assert await client.lock(name).acquire(timeout=0)
        await client.lock(name).release()
    with pytest.raises(ClientClosedError):
        await client.lock(name).acquire()
    async with AsyncClient.from_url(server.url) as other:
        assert await other.lock(name).acquire(timeout=0)
        await other.lock(name).release()
    with pytest.raises(ClientClosedError):
        await other.lock(name).acquire()


async def test_redlock_client_aclose(server: RedisServer, name: str) -> None:
    client = AsyncRedlockClient.from_urls([server.url])
    assert await client.lock(name).acquire(timeout=0)
    await client.lock(name).release()
    await client.aclose()
    with pytest.raises(ClientClosedError):
        await client.lock(name).acquire()


def test_the_sync_client_keeps_close_only(server: RedisServer) -> None:
    with Client.from_url(server.url) as client:
        assert not hasattr(client, "aclose")
