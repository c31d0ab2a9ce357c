"""A user without PUBLISH: one clear error naming it, and the lock still held as told; the
user operations.md's ACL line makes can do everything.

Redis >= 7 and Valkey check in the script before any change; Redis 6.2 cannot (no
``redis.acl_check_cmd``), so the test is skipped there.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from redlease import PermissionDeniedError

from .helpers import reply_int


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
    assert reply_int(raw.get(name)) == 1
    if private_server.binary.version_tuple < (7,):
        await side(sem.release(1))
        assert reply_int(raw.get(name)) == 2
    else:
        with pytest.raises(PermissionDeniedError) as info:
            await side(sem.release(1))
        assert info.value.command == "publish"
        assert reply_int(raw.get(name)) == 1
    raw.close()


def _documented_acl() -> list[str]:
    """The ``ACL SETUSER`` line docs/operations.md gives for a lock client's user."""
    page = Path(__file__).parents[2] / "docs" / "operations.md"
    (line,) = [x for x in page.read_text().splitlines() if x.startswith("ACL SETUSER ")]
    return line.split()


async def test_the_documented_acl_user_can_do_everything(side, private_server, name):
    """A user made with operations.md's ``ACL SETUSER`` line: locks, a wait and its wake-up,
    watchdog renewals, a forced release heard by its holder, the other kinds, ``statistics()``
    and ``redlease status``, with nothing denied (the scripts' own commands are checked
    against the user on Redis >= 7 and Valkey)."""
    raw = redis.Redis.from_url(private_server.url)
    words = _documented_acl()
    user = words[2]
    password = next(w[1:] for w in words if w.startswith(">"))
    raw.execute_command("ACL", "LOG", "RESET")
    raw.execute_command(*words)
    url = f"redis://{user}:{password}@127.0.0.1:{private_server.port}/0"
    holder, other = side.client(url, watchdog_timeout=1.5), side.client(url)
    lost: list[Any] = []
    lock, theirs = holder.lock(name, on_lease_lost=lost.append), other.lock(name)

    assert await side(lock.acquire(blocking=False))
    if side.is_async:

        async def wait_turn() -> bool:
            got = await theirs.acquire(timeout=20)
            await theirs.release()
            return bool(got)

        waiter = asyncio.ensure_future(wait_turn())
    else:

        def wait_turn_sync() -> bool:
            got = theirs.acquire(timeout=20)
            theirs.release()
            return bool(got)

        waiter = asyncio.ensure_future(asyncio.to_thread(wait_turn_sync))
    deadline = time.monotonic() + 20
    while not raw.pubsub_channels(f"*{name}*") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # until the waiter listens
    await side(lock.release())
    assert await asyncio.wait_for(waiter, 30)

    assert await side(lock.acquire(blocking=False))
    await asyncio.sleep(2.5)  # past the 1.5 s lease: renewed
    stats = await side(lock.statistics())
    (who,) = stats.holder_info.values()
    assert stats.locked and who.pid == os.getpid()
    if not side.is_async:
        shown = subprocess.run(
            [sys.executable, "-m", "redlease", "status", "--url", url, name],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert f"{name}: held by" in shown.stdout
    assert await side(theirs.force_release())
    deadline = time.monotonic() + 20
    while not lost and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert [error.cause for error in lost] == ["forced"]

    async with side.hold(holder.fair_lock(f"{name}:fair"), timeout=5):
        pass
    async with side.hold(holder.rw_lock(f"{name}:rw").read_lock(), timeout=5):
        pass
    semaphore = holder.semaphore(f"{name}:sem")
    await side(semaphore.try_set_permits(1))
    assert await side(semaphore.acquire(timeout=5))
    await side(semaphore.release())
    assert raw.execute_command("ACL", "LOG") == []
    raw.close()
