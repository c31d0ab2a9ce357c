"""A reply lost after the server ran the command (``TcpProxy.drop_next_reply``): the command
is sent again, by redlease itself (once, on a new connection), by redis-py's retry when the
client has one, or by the caller after ``ServerUnavailableError`` when every attempt lost its
reply. A retried release must not fail with "not owner" nor release twice; a retried acquire
must not count two holds. Sync and asyncio."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio.retry
import redis.backoff
import redis.retry

from redlease import ServerUnavailableError, StaleTokenError
from redlease.testing import TcpProxy

from .helpers import ACQUIRE_SHA, FENCED_SET_SHA, RELEASE_SHA

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


RETRIES = {
    "resend": (False, 1),
    "redis-retry": (True, 2),
    "caller-retry": (False, 2),
}
"""How a lost reply is made up for: (redis-py retries on, replies lost in a row)."""


def _client(side: Any, url: str, redis_retry: bool) -> Any:
    kwargs: dict[str, Any] = {"socket_timeout": 5}
    if redis_retry:
        retry_cls = redis.asyncio.retry.Retry if side.is_async else redis.retry.Retry
        kwargs["retry"] = retry_cls(redis.backoff.NoBackoff(), 3)
    return side.client(url, **kwargs)


async def _lose_replies(side: Any, proxy: TcpProxy, match: bytes, how: str, call: Any) -> Any:
    """Run ``call()`` with the replies of its first attempts lost; in the caller-retry case
    every attempt of the first call loses its reply, it raises ``ServerUnavailableError``, and
    the caller calls again."""
    _, lost = RETRIES[how]
    drops = [proxy.drop_next_reply(match) for _ in range(lost)]
    if how == "caller-retry":
        with pytest.raises(ServerUnavailableError):
            await side(call())
        result = await side(call())
    else:
        result = await side(call())
    assert all(d.is_set() for d in drops), "a reply was not lost"
    return result


@pytest.mark.parametrize("how", list(RETRIES))
async def test_lost_release_reply(side, lock_server, name, how):
    with TcpProxy(lock_server) as proxy:
        client = _client(side, proxy.url, RETRIES[how][0])
        other = side.client(lock_server.url)
        lock = client.lock(name)
        assert await side(lock.acquire())
        assert await side(lock.acquire())  # two holds: a double release would free the lock
        await _lose_replies(side, proxy, RELEASE_SHA, how, lock.release)
        assert await side(lock.hold_count()) == 1, "released twice"
        assert not await side(other.lock(name).acquire(blocking=False))
        # the last hold: the key is deleted, a retry finds only the release receipt
        await _lose_replies(side, proxy, RELEASE_SHA, how, lock.release)
        assert not await side(lock.locked())
        assert not lock.lease_lost
        other_lock = other.lock(name)
        assert await side(other_lock.acquire(blocking=False))
        await side(other_lock.release())


@pytest.mark.parametrize("how", list(RETRIES))
async def test_lost_acquire_reply(side, lock_server, name, how):
    with TcpProxy(lock_server) as proxy:
        client = _client(side, proxy.url, RETRIES[how][0])
        other = side.client(lock_server.url)
        lock = client.lock(name)
        acquire = lambda: lock.acquire(timeout=5)  # noqa: E731
        assert await _lose_replies(side, proxy, ACQUIRE_SHA, how, acquire)
        assert await side(lock.hold_count()) == 1, "a retried acquire counted two holds"
        assert await _lose_replies(side, proxy, ACQUIRE_SHA, how, acquire)  # re-entry
        assert await side(lock.hold_count()) == 2
        await side(lock.release())
        assert await side(lock.hold_count()) == 1
        await side(lock.release())
        assert not await side(lock.locked())
        other_lock = other.lock(name)
        assert await side(other_lock.acquire(blocking=False))
        await side(other_lock.release())


async def test_lost_fenced_write_reply(side, lock_server, name):
    """A fenced write sent again with the same token is accepted again (not stale)."""
    with TcpProxy(lock_server) as proxy:
        client = _client(side, proxy.url, redis_retry=False)
        lock = client.lock(name)
        assert await side(lock.acquire())
        token = lock.fencing_token
        write = lambda: client.fenced_set(name + ":resource", "v", token)  # noqa: E731
        try:
            await _lose_replies(side, proxy, FENCED_SET_SHA, "caller-retry", write)
        except StaleTokenError:  # pragma: no cover - the failure this test is about
            pytest.fail("a fenced write sent again was refused as stale")
        await side(lock.release())


async def test_every_pooled_connection_dead(side, lock_server, name):
    """A restart or a cut kills every idle connection at once: the first failure closes the
    other idle ones, so the call's second try opens a fresh connection instead of picking
    another dead one and raising ``ServerUnavailableError`` for a server that is up."""
    client = side.client(lock_server.url)
    locks = [client.lock(f"{name}:{i}") for i in range(6)]

    async def cycles(lock: Any) -> None:
        for _ in range(20):
            assert await side(lock.acquire())
            await side(lock.release())
            await asyncio.sleep(0)

    if side.is_async:  # several calls in flight at once: several pooled connections
        await asyncio.gather(*(cycles(lock) for lock in locks))
    else:
        await asyncio.gather(*(asyncio.to_thread(asyncio.run, cycles(lock)) for lock in locks))
    raw = redis.Redis.from_url(lock_server.url)
    try:
        assert len(raw.client_list(_type="normal")) >= 3  # the test needs several idle ones
        raw.client_kill_filter(_type="normal", skipme=True)
        for lock in locks:
            assert await side(lock.acquire(blocking=False))
            await side(lock.release())
    finally:
        raw.close()
