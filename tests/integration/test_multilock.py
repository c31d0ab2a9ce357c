"""MultiLock / AsyncMultiLock: several locks (any names, any servers, single-master or Redlock)
taken all-or-nothing and released together, each test on the sync and the asyncio side."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from redlease.errors import InvalidArgumentError, LeaseLostError, ServerUnavailableError
from redlease.testing import free_port

from . import redlock_fixtures as fixtures
from .helpers import eventually
from .redlock_fixtures import held_on, holders, redlock

redlock_binary, five, three = fixtures.redlock_binary, fixtures.five, fixtures.three


def multi(side, *locks):
    from redlease._async.multilock import AsyncMultiLock
    from redlease._sync.multilock import MultiLock

    return AsyncMultiLock(*locks) if side.is_async else MultiLock(*locks)


def single(side, server, **kwargs):
    return side.client(server.url, **kwargs)


async def test_all_or_nothing_with_a_member_held_elsewhere(side, five, name):
    a_client = single(side, five[3])
    r_client = redlock(side, five[:3])
    other = single(side, five[4])
    members = [
        a_client.lock(f"{name}:a"),
        r_client.lock(f"{name}:b"),
        single(side, five[4]).lock(f"{name}:c"),
    ]
    blocker = other.lock(f"{name}:c")
    assert await side(blocker.acquire(lease=30))
    lock = multi(side, *members)
    started = time.monotonic()
    assert not await side(lock.acquire(timeout=0.3))
    assert time.monotonic() - started < 5
    assert holders(five[3], f"{name}:a") == {}  # the members it took were given back
    assert held_on(five[:3], f"{name}:b") == []
    assert not await side(lock.acquire(blocking=False))
    assert holders(five[3], f"{name}:a") == {} and held_on(five[:3], f"{name}:b") == []
    await side(blocker.release())
    assert await side(lock.acquire(timeout=5))
    assert holders(five[3], f"{name}:a") and held_on(five[:3], f"{name}:b") == [0, 1, 2]
    assert await side(members[2].owned())
    await side(lock.release())
    assert holders(five[3], f"{name}:a") == {} and held_on(five[:3], f"{name}:b") == []
    assert not await side(members[2].locked())


async def test_with_statement_lease_and_reentry(side, three, name):
    client = single(side, three[0])
    first, second = client.lock(f"{name}:1"), client.lock(f"{name}:2")
    lock = multi(side, first, second)
    if side.is_async:
        async with lock:
            assert await first.owned() and await second.owned()
            assert await lock.acquire(lease=10)  # reentrant as its members are
            assert await first.hold_count() == 2 and 9 < await second.ttl() <= 30
            await lock.release()
    else:
        with lock:
            assert first.owned() and second.owned()
            assert lock.acquire(lease=10)
            assert first.hold_count() == 2 and 9 < second.ttl() <= 30
            lock.release()
    assert not await side(first.locked()) and not await side(second.locked())


async def test_release_tries_every_member_even_when_one_fails(side, three, name):
    client = single(side, three[0])
    members = [client.lock(f"{name}:{i}") for i in range(3)]
    lock = multi(side, *members)
    assert await side(lock.acquire(lease=30))
    raw = redis.Redis.from_url(three[0].url)
    raw.delete(f"{name}:1")  # the middle member's hold vanishes
    raw.close()
    with pytest.raises(LeaseLostError) as info:
        await side(lock.release())
    assert info.value.name == f"{name}:1"
    for member in members:
        assert not await side(member.locked())


async def test_a_member_that_raises_leaves_nothing_held(side, three, name):
    good = single(side, three[0]).lock(f"{name}:a")
    bad = side.client(f"redis://127.0.0.1:{free_port()}/0").lock(f"{name}:b")  # nothing there
    lock = multi(side, good, bad)
    with pytest.raises(ServerUnavailableError):
        await side(lock.acquire(timeout=1))
    assert not await side(good.locked())


async def test_opposite_orders_do_not_deadlock(side, three, name):
    rounds = 10
    client_a, client_b = redlock(side, three), single(side, three[0])
    client_c, client_d = redlock(side, three), single(side, three[0])
    one = multi(side, client_a.lock(f"{name}:x"), client_b.lock(f"{name}:y"))
    two = multi(side, client_d.lock(f"{name}:y"), client_c.lock(f"{name}:x"))
    done: list[int] = []
    if side.is_async:

        async def work(lock, tag: int) -> None:
            for _ in range(rounds):
                assert await lock.acquire(timeout=20, lease=5)
                await asyncio.sleep(0.001)
                await lock.release()
                done.append(tag)

        await asyncio.wait_for(asyncio.gather(work(one, 1), work(two, 2)), 60)
    else:

        def work_in_thread(lock, tag: int) -> None:
            for _ in range(rounds):
                assert lock.acquire(timeout=20, lease=5)
                time.sleep(0.001)
                lock.release()
                done.append(tag)

        threads = [
            threading.Thread(target=work_in_thread, args=(lk, i)) for lk, i in ((one, 1), (two, 2))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert sorted(done) == [1] * rounds + [2] * rounds
    assert held_on(three, f"{name}:x") == [] and holders(three[0], f"{name}:y") == {}


async def test_cancelled_acquire_leaves_nothing_held(side, three, name):
    if not side.is_async:
        pytest.skip("cancellation is an asyncio matter")
    free = redlock(side, three).lock(f"{name}:a")
    taken = single(side, three[1]).lock(f"{name}:b")
    blocker = single(side, three[1]).lock(f"{name}:b")
    assert await blocker.acquire(lease=30)
    lock = multi(side, free, taken)
    task = asyncio.create_task(lock.acquire())
    # it holds the first member (waited for: a fixed sleep could cancel it before, under load)
    await eventually(lambda: held_on(three, f"{name}:a") == [0, 1, 2], timeout=10)
    await asyncio.sleep(0.2)  # and waits for the second
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert held_on(three, f"{name}:a") == []
    assert (await blocker.statistics()).hold_count == 1
    await blocker.release()


async def test_bad_arguments(side, three):
    with pytest.raises(InvalidArgumentError, match="at least one"):
        multi(side)
    with pytest.raises(InvalidArgumentError, match="not a lock"):
        multi(side, object())
    lock = multi(side, single(side, three[0]).lock("x"))
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await side(lock.acquire(blocking=False, timeout=1))
    with pytest.raises(InvalidArgumentError, match="lease"):
        await side(lock.acquire(lease=0))


async def test_hold_of_a_multilock_and_a_redlock_lock(side, five, name):
    # the lock's ``hold()`` on both (issue 32): a bounded wait, then released on exit
    from redlease import LockTimeoutError

    r_client = redlock(side, five[:3])
    member = single(side, five[3]).lock(f"{name}:a")
    red = r_client.lock(f"{name}:b")
    lock = multi(side, member, red)
    async with side.hold(red, timeout=5):
        assert held_on(five[:3], f"{name}:b") == [0, 1, 2]
    assert held_on(five[:3], f"{name}:b") == []
    async with side.hold(lock, timeout=5):
        assert holders(five[3], f"{name}:a") and held_on(five[:3], f"{name}:b") == [0, 1, 2]
    assert holders(five[3], f"{name}:a") == {} and held_on(five[:3], f"{name}:b") == []
    blocker = single(side, five[3]).lock(f"{name}:a")
    assert await side(blocker.acquire(lease=30))
    with pytest.raises(LockTimeoutError, match="single try"):
        async with side.hold(lock, blocking=False):
            pass
    with pytest.raises(LockTimeoutError):
        async with side.hold(lock, timeout=0.2, lease=10):
            pass
    assert held_on(five[:3], f"{name}:b") == []  # nothing left half-held
    await side(blocker.release())


async def test_release_keep_for_keeps_every_member_taken(side, five, name):
    a_client, r_client = single(side, five[3]), redlock(side, five[:3])
    members = [a_client.lock(f"{name}:a"), r_client.lock(f"{name}:b")]
    lock = multi(side, *members)
    rival = multi(
        side, single(side, five[3]).lock(f"{name}:a"), redlock(side, five[:3]).lock(f"{name}:b")
    )
    assert await side(lock.acquire(timeout=5, lease=30))
    await side(lock.release(keep_for=30))
    stats = await side(members[0].statistics())
    assert stats.locked and stats.kept_by is not None and stats.holders == {}
    assert await side(members[1].locked()) and not await side(members[1].owned())
    for fields in (holders(s, f"{name}:b") for s in five[:3]):  # kept on every master
        assert [field.endswith(":kept") for field in fields] == [True]
    # nobody takes any member meanwhile, the caller included
    assert not await side(rival.acquire(blocking=False))
    assert not await side(lock.acquire(blocking=False))
    for member in members:  # a force release clears the kept slots
        assert await side(member.force_release())
    assert await side(rival.acquire(blocking=False, lease=30))
    await side(rival.release())


async def test_release_keep_for_releases_a_member_it_cannot_keep(side, three, name):
    client = single(side, three[0])
    kept, read = client.lock(f"{name}:a"), client.rw_lock(f"{name}:b").read_lock()
    lock = multi(side, kept, read)
    assert await side(lock.acquire(timeout=5, lease=30))
    with pytest.raises(InvalidArgumentError, match="keep_for"):
        await side(lock.release(keep_for=-1))  # refused before any member is released
    assert await side(kept.owned()) and await side(read.owned())
    with pytest.raises(InvalidArgumentError, match="cannot be kept"):
        await side(lock.release(keep_for=30))
    assert not await side(read.owned()) and not await side(read.locked())  # released plainly
    assert (await side(kept.statistics())).kept_by is not None  # the other one kept
