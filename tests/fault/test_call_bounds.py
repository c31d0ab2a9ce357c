"""Every call is bounded by what the caller asked: a server that stops answering (SIGSTOP)
makes ``acquire(timeout=3)`` raise within the timeout and one call's own bound (redlease's
default socket timeouts), not after redis-py's retries; and a Redlock's first non-blocking
acquire is not failed by slow connection set-up against healthy masters.
Sync and asyncio."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio

import redlease
from redlease import ServerUnavailableError
from redlease._shared.clientbase import CALL_TIMEOUT
from redlease.testing import RedisServer

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


@pytest.mark.parametrize("held", [False, True], ids=["free", "held"])
async def test_acquire_with_a_timeout_is_bounded_against_a_paused_server(
    side: Any, lock_server: RedisServer, name: str, held: bool
) -> None:
    client = side.client(lock_server.url)  # no timeouts given: redlease's defaults apply
    if held:  # a waiter in line when the server stops
        other = side.client(lock_server.url)
        assert await side(other.lock(name).acquire(blocking=False))
    assert await side(client.lock(f"{name}:warm").acquire(blocking=False))  # connected
    lock_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(ServerUnavailableError) as caught:
            await side(client.lock(name).acquire(timeout=3))
        took = time.monotonic() - started
    finally:
        lock_server.resume()
    # the wait (3 s) plus at most one call in flight (its socket timeout) and some slack
    assert took < 3 + CALL_TIMEOUT + 2.5, took
    assert lock_server.url.split("//")[1].split("/")[0] in str(caught.value)


async def test_from_url_sets_timeouts_only_when_none_are_given(
    side: Any, lock_server: RedisServer
) -> None:
    client = side.client(lock_server.url)
    kwargs = client.redis.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == CALL_TIMEOUT
    assert kwargs["socket_connect_timeout"] > 0
    own = side.client(lock_server.url, socket_timeout=7.5, socket_connect_timeout=1.5)
    kwargs = own.redis.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (7.5, 1.5)


class _SlowConnect(redis.Connection):
    """A connection whose set-up takes 0.3 s (a distant master, a TLS handshake): longer
    than the default ``master_timeout`` (0.1 s), though the master answers promptly."""

    def connect(self, *args: Any, **kwargs: Any) -> None:
        if self._sock is None:
            time.sleep(0.3)
        super().connect(*args, **kwargs)


class _AsyncSlowConnect(redis.asyncio.Connection):
    async def connect(self, *args: Any, **kwargs: Any) -> None:
        if not self.is_connected:
            await asyncio.sleep(0.3)
        await super().connect(*args, **kwargs)


async def test_slow_connection_set_up_does_not_fail_the_first_redlock_acquire(
    side: Any, fault_binary: Any, name: str
) -> None:
    servers = [RedisServer(fault_binary).start() for _ in range(3)]
    try:
        factory = redlease.AsyncRedlockClient if side.is_async else redlease.RedlockClient
        slow = _AsyncSlowConnect if side.is_async else _SlowConnect
        client = factory.from_urls([s.url for s in servers], connection_class=slow)
        try:
            started = time.monotonic()
            assert await side(client.lock(name).acquire(blocking=False))
            # set-up has its own bound; the whole call stays within it and master_timeout
            assert time.monotonic() - started < 0.3 + 1.0 + client.master_timeout + 1.0
            # once connected, master_timeout applies to the replies as before
            assert await side(client.lock(f"{name}:2").acquire(blocking=False))
        finally:
            await side(client.close())
    finally:
        for server in servers:
            server.stop()
