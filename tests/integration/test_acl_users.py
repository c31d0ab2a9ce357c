"""A user without PUBLISH: one clear error naming it, and the lock still held as told.

Redis >= 7 and Valkey check in the script before any change; Redis 6.2 cannot (no
``redis.acl_check_cmd``), so the test is skipped there.
"""

from __future__ import annotations

import pytest
import redis

from redlease import PermissionDeniedError


async def test_release_without_publish_keeps_the_lock_and_says_so(side, private_server, name):
    if private_server.binary.version_tuple < (7,):
        pytest.skip("Redis 6.2 cannot check a permission inside a script")
    raw = redis.Redis.from_url(private_server.url)
    raw.execute_command("ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish")
    url = f"redis://nopub:pw@127.0.0.1:{private_server.port}"
    lock = side.client(url).lock(name)
    assert await side(lock.acquire(blocking=False))
    with pytest.raises(PermissionDeniedError) as info:
        await side(lock.release())
    assert info.value.command == "publish"
    assert raw.exists(name) == 1  # still held, as the error says
    with pytest.raises(PermissionDeniedError):  # a retry does not claim the lease expired
        await side(lock.release())
    assert raw.exists(name) == 1
    raw.close()


@pytest.mark.parametrize("denied", ["-subscribe", "resetchannels"])
async def test_a_waiter_without_subscribe_is_told_at_once_and_leaves_the_line(
    side, private_server, name, denied
):
    """A user who may not SUBSCRIBE (or may use no channel) waits for a held lock: one
    ``PermissionDeniedError`` naming ``subscribe``, never "unavailable" after the
    subscription timeout, and no place left in the lock's line."""
    raw = redis.Redis.from_url(private_server.url)
    raw.execute_command(
        "ACL", "SETUSER", "nosub", "reset", "on", ">pw", "~*", "&*", "+@all", denied
    )  # fmt: skip
    holder = side.client(private_server.url).lock(name)
    assert await side(holder.acquire(blocking=False))
    lock = side.client(f"redis://nosub:pw@127.0.0.1:{private_server.port}").lock(name)
    with pytest.raises(PermissionDeniedError) as info:
        await side(lock.acquire(timeout=60))
    assert info.value.command == "subscribe"
    assert info.value.name == name
    assert "nosub" in str(info.value)
    assert raw.zcard(f"redlease:line:{{{name}}}") == 0  # it left the line
    await side(holder.release())
    assert await side(lock.acquire(blocking=False))  # a lock it need not wait for works
    if denied == "-subscribe" or private_server.binary.version_tuple < (7,):
        await side(lock.release())  # (Redis 6.2 cannot check PUBLISH in a script: released)
        assert raw.exists(name) == 0
    else:  # it may publish on no channel: its final release is refused, and changes nothing
        with pytest.raises(PermissionDeniedError) as info:
            await side(lock.release())
        assert info.value.command == "publish"
        assert raw.exists(name) == 1
    raw.close()


async def test_a_semaphore_release_without_publish_is_all_or_nothing(side, private_server, name):
    """A user without PUBLISH releases a permit: on Redis >= 7 and Valkey it is refused,
    naming PUBLISH, and the permit stays taken; on Redis 6.2 (no check in a script) it is
    given back and only the wake-up is skipped. Never a permit given back and an error told."""
    raw = redis.Redis.from_url(private_server.url)
    raw.execute_command("ACL", "SETUSER", "nopub2", "on", ">pw", "~*", "&*", "+@all", "-publish")
    owner = side.client(private_server.url).semaphore(name)
    assert await side(owner.try_set_permits(2))
    sem = side.client(f"redis://nopub2:pw@127.0.0.1:{private_server.port}").semaphore(name)
    assert await side(sem.acquire(1))
    assert int(raw.get(name)) == 1
    if private_server.binary.version_tuple < (7,):
        await side(sem.release(1))
        assert int(raw.get(name)) == 2
    else:
        with pytest.raises(PermissionDeniedError) as info:
            await side(sem.release(1))
        assert info.value.command == "publish"
        assert int(raw.get(name)) == 1
    raw.close()
