"""Issue #23, defect 1 (second half) in the read-write lock (both layouts, both sides) and the
fair lock in Redisson's layout, on real servers, sync and asyncio: a re-entry, a release and a
renewal act only on the hold with the fencing token its owner holds, never on another hold of
the same owner field.

Such a hold is a stale copy after a failover: the owner holds (token T1), the replica falls
behind (``TcpProxy`` freezes its link), the owner releases and takes the lock again (T2) on the
master, and the replica, promoted, still has the owner's first hold (T1). The owner's release
must raise ``LeaseLostError`` and leave that hold alone (to its lease); its re-entry must not
join it (it takes the lock afresh, with a fresh token, and hears its hold was lost); its
watchdog must not renew it (the stored token overwritten on the server: the owner hears
``on_lease_lost``). Each test fails on the scripts before the token match.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from redlease._core import rwlock
from redlease._core.rwlock_redisson import RedissonRwKeys
from redlease.errors import LeaseLostError
from redlease.testing import ServerBinary

from .helpers import eventually, reply_int, reply_scores
from .test_lock_guarantees import Failover

pytestmark = pytest.mark.timeout(180)

READ, WRITE = rwlock.READ, rwlock.WRITE


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _now_ms(raw: redis.Redis) -> int:
    seconds, micros = raw.time()
    return int(seconds) * 1000 + int(micros) // 1000


@dataclass(frozen=True)
class Found:
    """The one hold of the lock on a server: its owner field (as the scripts name it), its
    count, its fencing token, the lease left on it (ms), and where its token is stored."""

    field: str
    count: int
    token: int
    left: int
    token_key: str
    token_field: str


def _rw_write(raw: redis.Redis, name: str) -> Found | None:
    keys = rwlock.RwKeys.for_name(name)
    writer, count, deadline, token = raw.hmget(keys.writer, "writer", "count", "deadline", "token")
    if writer is None:
        return None
    left = reply_int(deadline) - _now_ms(raw)
    return Found(_text(writer), reply_int(count), reply_int(token), left, keys.writer, "token")


def _rw_read(raw: redis.Redis, name: str) -> Found | None:
    keys = rwlock.RwKeys.for_name(name)
    now = _now_ms(raw)
    readers = reply_scores(raw.zrangebyscore(keys.leases, f"({now}", "+inf", withscores=True))
    if not readers:
        return None
    ((owner, ends),) = readers
    field = _text(owner)
    count, token = raw.hget(keys.readers, field), raw.hget(keys.tokens, field)
    return Found(
        field, reply_int(count), reply_int(token), reply_int(ends) - now, keys.tokens, field
    )


def _redisson_rw(raw: redis.Redis, name: str) -> Found | None:
    keys = RedissonRwKeys.for_name(name)
    fields = {_text(k): int(v) for k, v in raw.hgetall(name).items() if k != b"mode"}
    if not fields:
        return None
    ((field, count),) = fields.items()
    token = raw.hget(keys.tokens, field)
    return Found(field, count, int(token or 0), raw.pttl(name), keys.tokens, field)


def _fair(raw: redis.Redis, name: str) -> Found | None:
    fields = {_text(k): _text(v) for k, v in raw.hgetall(name).items()}
    owners = [f for f in fields if not f.startswith("redlease:")]
    if not owners:
        return None
    (owner,) = owners
    token = int(fields.get("redlease:fence", 0))
    return Found(owner, int(fields[owner]), token, raw.pttl(name), name, "redlease:fence")


@dataclass(frozen=True)
class Variant:
    """One primitive (and side): how its lock is made, and where its one hold is read."""

    make: Callable[[Any, str, Callable[[LeaseLostError], None]], Any]
    found: Callable[[redis.Redis, str], Found | None]


def _rw(layout: str, side: str) -> Callable[[Any, str, Callable[[LeaseLostError], None]], Any]:
    def make(client: Any, name: str, lost: Callable[[LeaseLostError], None]) -> Any:
        rw = client.rw_lock(name, layout=layout, on_lease_lost=lost)
        return rw.read_lock() if side == READ else rw.write_lock()

    return make


def _fair_lock(client: Any, name: str, lost: Callable[[LeaseLostError], None]) -> Any:
    return client.fair_lock(name, layout="redisson", on_lease_lost=lost)


VARIANTS = {
    "rw-write-redlease": Variant(_rw("redlease", WRITE), _rw_write),
    "rw-read-redlease": Variant(_rw("redlease", READ), _rw_read),
    "rw-write-redisson": Variant(_rw("redisson", WRITE), _redisson_rw),
    "rw-read-redisson": Variant(_rw("redisson", READ), _redisson_rw),
    "fair-redisson": Variant(_fair_lock, _fair),
}


@pytest.fixture
def failover(binary: ServerBinary) -> Iterator[Failover]:
    setup = Failover(binary)
    try:
        yield setup
    finally:
        setup.close()


async def _stale_copy_after_failover(
    side: Any, failover: Failover, v: Variant, name: str, lost: list[LeaseLostError]
) -> tuple[Any, int, int, redis.Redis]:
    """The owner holds (T1); the replica falls behind; the owner releases and takes the lock
    again (T2) on the master; the replica is promoted with the owner's first hold (T1) on it.
    Returns the owner's lock, T1, T2 and a connection to the promoted replica."""
    a = side.client(failover.link.url, socket_timeout=1, socket_connect_timeout=1)
    lock = v.make(a, name, lost.append)
    assert await side(lock.acquire())
    first = lock.fencing_token
    failover.replica_falls_behind()
    await side(lock.release())
    assert await side(lock.acquire())
    second = lock.fencing_token
    assert second > first
    failover.fail_over()
    replica = redis.Redis.from_url(failover.replica.url)
    stale = v.found(replica, name)
    assert stale is not None and (stale.count, stale.token) == (1, first)
    return lock, first, second, replica


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_a_release_leaves_a_stale_copy_of_the_owners_hold(side, failover, name, variant):
    """The owner's release (token T2) finds its owner field held with T1 on the promoted
    replica: ``LeaseLostError``, and the stale hold stays as it was, to its own lease."""
    v = VARIANTS[variant]
    lost: list[LeaseLostError] = []
    lock, first, _, replica = await _stale_copy_after_failover(side, failover, v, name, lost)
    try:
        before = v.found(replica, name)
        assert before is not None
        with pytest.raises(LeaseLostError):
            await side(lock.release())
        after = v.found(replica, name)
        assert after is not None, "the owner's release freed a stale hold with another token"
        assert (after.field, after.count, after.token) == (before.field, 1, first)
        assert after.left <= before.left  # not lengthened either
    finally:
        replica.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_a_reentry_does_not_join_a_stale_copy_of_the_owners_hold(
    side, failover, name, variant
):
    """The owner re-enters (it holds T2) where the promoted replica has its field with T1:
    the re-entry is not counted on that hold (count 2 with token T1); the owner takes the lock
    afresh (count 1, a fresh token above T2, on the server too) and hears its hold was lost."""
    v = VARIANTS[variant]
    lost: list[LeaseLostError] = []
    lock, first, second, replica = await _stale_copy_after_failover(side, failover, v, name, lost)
    try:
        assert await side(lock.acquire(timeout=5))
        now = v.found(replica, name)
        assert now is not None
        assert now.count == 1, (
            f"the re-entry joined a hold with token {now.token} (owner's: {second})"
        )
        assert now.token == lock.fencing_token and now.token not in (first, second)
        assert now.token > second
        await eventually(lambda: lost, timeout=10)  # the hold it believed it had is gone
        await side(lock.release())
        assert v.found(replica, name) is None
    finally:
        replica.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_the_watchdog_does_not_renew_a_hold_with_another_token(side, server, name, variant):
    """The hold under the owner's field gets another token (as a stale copy has): the
    watchdog does not renew it, and the owner hears its lease lost."""
    v = VARIANTS[variant]
    raw = redis.Redis.from_url(server.url)
    lost: list[LeaseLostError] = []
    try:
        client = side.client(server.url, watchdog_timeout=1.5)
        lock = v.make(client, name, lost.append)
        assert await side(lock.acquire())
        held = v.found(raw, name)
        assert held is not None and held.token == lock.fencing_token
        raw.hset(held.token_key, held.token_field, held.token - 1)  # another hold's token
        started = time.monotonic()
        await eventually(lambda: lost, timeout=30)
        assert lock.lease_lost
        # the first renewal after the change tells (every 0.5 s; room for a loaded machine)
        assert time.monotonic() - started < 10
        left = v.found(raw, name)
        assert left is None or left.left <= 1500  # never lengthened
    finally:
        raw.close()
