"""Fencing tokens and fenced writes, on a real server, sync and asyncio."""

from __future__ import annotations

import pytest
import redis

from redlease import StaleTokenError
from redlease._core import scripts
from redlease._core.keys import LockKeys

from .helpers import eventually


async def test_tokens_increase_with_every_acquisition(side, server, name):
    clients = [side.client(server.url) for _ in range(3)]
    tokens = []
    for _ in range(3):
        for client in clients:
            lock = client.lock(name)
            async with side.hold(lock, timeout=5) as lease:
                assert lease.fencing_token == lock.fencing_token
                tokens.append(lease.fencing_token)
            assert lock.fencing_token is None
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


async def test_reentry_keeps_the_token_and_statistics_show_it(side, server, name):
    lock = side.client(server.url).lock(name)
    async with side.hold(lock) as outer:
        async with side.hold(lock) as inner:
            assert inner.fencing_token == outer.fencing_token
            assert inner.hold_count == 2
        stats = await side(lock.statistics())
        assert stats.fencing_token == outer.fencing_token
        assert list(stats.holders.values()) == [1]  # the token field is not a holder


async def test_tokens_keep_increasing_after_the_server_lost_its_data(side, private_server, name):
    client = side.client(private_server.url)
    lock = client.lock(name)
    async with side.hold(lock) as first:
        pass
    private_server.restart()  # no persistence: the counter is gone
    await eventually(lambda: _answers(private_server.url))
    async with side.hold(lock, timeout=10) as second:
        assert second.fencing_token > first.fencing_token


def _answers(url: str) -> bool:
    raw = redis.Redis.from_url(url)
    try:
        return bool(raw.ping())
    except redis.ConnectionError:
        return False
    finally:
        raw.close()


def test_a_retried_acquire_gets_the_same_hold_and_token(server, name):
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url)
    args = (4, keys.name, keys.line, keys.places, keys.fence)
    # lease, owner, held, join_line, fair, hand-over lease, wait id, own channels, publish command
    call = (30000, "c:1", 0, 0, 0, "30000", "wait-1", keys.handover_prefix, "publish")
    first = raw.eval(scripts.LOCK_ACQUIRE.source.decode(), *args, *call)
    again = raw.eval(scripts.LOCK_ACQUIRE.source.decode(), *args, *call)  # its reply was lost
    assert first[0] == again[0] == 1 and first[1] == again[1] == 1
    assert first[3] == again[3]
    assert raw.hget(name, "c:1") == b"1"
    raw.close()


async def test_fenced_write_rejects_a_stale_holder(side, server, name):
    resource = f"{name}:resource"
    paused = side.client(server.url).lock(name)
    assert await side(paused.acquire(lease=0.3))
    stale_token = paused.fencing_token
    # the holder "pauses" past its lease; someone else takes the lock and writes
    newer = side.client(server.url)
    async with side.hold(newer.lock(name), timeout=10) as lease:
        assert lease.fencing_token > stale_token
        await side(newer.fenced_set(resource, "from the new holder", lease.fencing_token))
    with pytest.raises(StaleTokenError) as info:
        await side(newer.fenced_set(resource, "from the paused holder", stale_token))
    assert info.value.token == stale_token and info.value.seen > stale_token
    assert resource in str(info.value)
    raw = redis.Redis.from_url(server.url)
    assert raw.get(resource) == b"from the new holder"
    raw.close()


async def test_fenced_write_bad_arguments(side, server, name):
    client = side.client(server.url)
    for token in (0, -3, "12", None, True):
        with pytest.raises(ValueError, match="token"):
            await side(client.fenced_set(name, "v", token))
    with pytest.raises(ValueError, match="px"):
        await side(client.fenced_set(name, "v", 5, px=0))


async def test_fenced_read_modify_write_shuts_out_a_stale_holder(side, server, name):
    resource = f"{name}:counter"
    stale = side.client(server.url).lock(name)
    assert await side(stale.acquire(lease=0.2))
    stale_token = stale.fencing_token
    client = side.client(server.url)
    assert await side(client.fenced_get(resource, stale_token)) is None  # reads 0
    newer = client.lock(name)
    async with side.hold(newer, timeout=10) as lease:  # after the stale lease ran out
        assert await side(client.fenced_get(resource, lease.fencing_token)) is None
        # the stale holder writes between the new holder's read and write: refused
        with pytest.raises(StaleTokenError):
            await side(client.fenced_set(resource, "1", stale_token))
        await side(client.fenced_set(resource, "1", lease.fencing_token))
    with pytest.raises(StaleTokenError):
        await side(client.fenced_get(resource, stale_token))
    assert await side(client.fenced_get(resource, lease.fencing_token)) == b"1"
