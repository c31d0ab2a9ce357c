"""Keys that are not what a call expects: never deleted or overwritten, a clear error at once.

These assert the final contract: a ``WRONGTYPE`` reply from a script becomes ``WrongTypeError``
(the translation of replies lives in ``_redis/errors.py``).
"""

from __future__ import annotations

import pytest
import redis

from redlease import WrongTypeError

KINDS = {
    "string": lambda r, k: r.set(k, "user data"),
    "list": lambda r, k: r.rpush(k, "a", "b"),
    "set": lambda r, k: r.sadd(k, "a"),
    "zset": lambda r, k: r.zadd(k, {"a": 1}),
    "hash": lambda r, k: r.hset(k, mapping={"email": "a@example.com", "plan": "pro"}),
}


def _dump(r: redis.Redis, key: str) -> bytes | None:
    return r.dump(key)


@pytest.mark.parametrize("kind", list(KINDS))
async def test_force_release_never_deletes_a_key_that_is_not_a_lock(side, server, name, kind):
    raw = redis.Redis.from_url(server.url)
    KINDS[kind](raw, name)
    before = _dump(raw, name)
    lock = side.client(server.url).lock(name)
    with pytest.raises(WrongTypeError) as info:
        await side(lock.force_release())
    assert kind in str(info.value)
    assert _dump(raw, name) == before
    raw.close()


async def test_a_user_hash_as_a_lock_name_fails_at_once(side, server, name):
    raw = redis.Redis.from_url(server.url)
    KINDS["hash"](raw, name)
    before = _dump(raw, name)
    lock = side.client(server.url).lock(name)
    with pytest.raises(WrongTypeError):
        await side(lock.acquire(blocking=False))
    with pytest.raises(WrongTypeError):
        await side(lock.acquire(timeout=30))  # at once, not after the wait
    assert _dump(raw, name) == before
    raw.close()


@pytest.mark.parametrize("kind", ["list", "hash", "set"])
async def test_fenced_set_and_get_never_touch_a_key_of_another_type(side, server, name, kind):
    raw = redis.Redis.from_url(server.url)
    KINDS[kind](raw, name)
    before = _dump(raw, name)
    client = side.client(server.url)
    with pytest.raises(WrongTypeError) as info:
        await side(client.fenced_set(name, "v", 1))
    assert kind in str(info.value)
    with pytest.raises(WrongTypeError):
        await side(client.fenced_get(name, 2))
    assert _dump(raw, name) == before
    assert raw.get(f"redlease:fence-seen:{{{name}}}") is None
    raw.close()


async def test_force_release_still_deletes_a_held_lock(side, server, name):
    lock = side.client(server.url).lock(name)
    other = side.client(server.url).lock(name)
    assert await side(lock.acquire(blocking=False))
    assert await side(other.force_release()) is True
    assert not await side(other.locked())
