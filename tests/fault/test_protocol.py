"""The lock protocol when a message arrives late or a reply is lost (issue #11): a hand-over
message is taken only by the acquire call it was made for, an unknown outcome is settled by
the owner's next call, a lease that ran out never locks its owner out, and a fair lock's line
moves on when a lease runs out. Each on a real server, sync and asyncio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from integration.helpers import reply_str_hash

from redlease import LeaseLostError, ServerUnavailableError
from redlease._asyncio.subscriber import Subscriber as AsyncSubscriber
from redlease._core import scripts
from redlease._core.keys import LockKeys
from redlease._threads.subscriber import Subscriber
from redlease.testing import TcpProxy

from .actor import Actor
from .helpers import ACQUIRE_SHA, RELEASE_SHA, eventually

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


def _raw(server: Any) -> redis.Redis:
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    for script in scripts.ALL:  # so that a dropped reply is the script's own, not a load's
        raw.script_load(script.source)
    return raw


def _holders(raw: redis.Redis, name: str) -> dict[str, int]:
    fields = reply_str_hash(raw.hgetall(name))
    return {k: int(v) for k, v in fields.items() if not k.startswith("redlease:")}


def _subscriber_through(side: Any, client: Any, proxy: TcpProxy) -> None:
    """Make ``client`` listen for wake-ups through ``proxy`` (its commands go direct)."""
    if side.is_async:
        client._subscriber = AsyncSubscriber(redis.asyncio.Redis.from_url(proxy.url))
    else:
        client._subscriber = Subscriber(redis.Redis.from_url(proxy.url))


async def test_a_late_hand_over_message_is_no_grant_for_a_later_acquire(side, lock_server, name):
    """Defect 1: a release hands the lock to waiter O, whose wake-up is held up on the way;
    O gets the lock by its own re-check, releases, and X takes it. O's next acquire finds it
    held; the old message then arrives: O must keep waiting (X holds the lock) and leave the
    line when it gives up, so that X's release does not hand the lock to O again."""
    raw = _raw(lock_server)
    keys = LockKeys.for_name(name)
    with TcpProxy(lock_server) as proxy:
        waiter_client = side.client(lock_server.url)
        _subscriber_through(side, waiter_client, proxy)
        other = side.client(lock_server.url, handoff_window=5.0)
        o, x = Actor(side), Actor(side)
        lock_o, lock_x = waiter_client.lock(name), other.lock(name)
        try:
            assert await x.do(lambda: lock_x.acquire())
            first = o.start(lambda: lock_o.acquire(timeout=1.5))
            own = keys.handover_prefix + waiter_client.id
            await eventually(lambda: raw.zcard(keys.line) == 1)
            await eventually(lambda: raw.pubsub_numsub(own) == [(own, 1)])
            proxy.freeze()  # O's wake-ups stop on the way
            await x.do(lambda: lock_x.release())  # handed to O outright
            ((o_owner, count),) = _holders(raw, name).items()
            assert count == 1 and o_owner.startswith(waiter_client.id + ":")
            assert await first  # by its own re-check at its deadline
            await o.do(lambda: lock_o.release())
            assert await x.do(lambda: lock_x.acquire(blocking=False))
            x_holders = _holders(raw, name)
            second = o.start(lambda: lock_o.acquire(timeout=3))
            await eventually(lambda: raw.zcard(keys.line) == 1)  # O waits behind X
            proxy.thaw()  # the old hand-over message arrives now
            assert await second is False, "a late hand-over message was taken for a grant"
            assert _holders(raw, name) == x_holders
            assert await o.do(lambda: lock_o.fencing_token) is None
            assert raw.zcard(keys.line) == 0, "the waiter's place outlived its wait"
            await x.do(lambda: lock_x.release())
            assert raw.exists(name) == 0  # nobody left in line to hand it to
        finally:
            proxy.thaw()
            await o.close()
            await x.close()
    raw.close()


async def test_a_first_acquire_with_lost_replies_strands_nothing(side, lock_server, name):
    """The server granted it, every reply was lost, the caller was told it failed: the hold
    made for that call is given back at once, not left to its 30 s lease."""
    raw = _raw(lock_server)
    with TcpProxy(lock_server) as proxy:
        client = side.client(proxy.url)
        owner = Actor(side)
        lock = client.lock(name)
        try:
            drops = [proxy.drop_next_reply(ACQUIRE_SHA) for _ in range(2)]
            with pytest.raises(ServerUnavailableError):
                await owner.do(lambda: lock.acquire(blocking=False))
            assert all(d.is_set() for d in drops)
            assert raw.exists(name) == 0, "a grant nobody knows of holds the lock"
            assert await owner.do(lambda: lock.hold_count()) == 0
            other = side.client(lock_server.url).lock(name)
            assert await side(other.acquire(blocking=False))
            await side(other.release())
        finally:
            await owner.close()
    raw.close()


async def test_a_re_entry_with_lost_replies_then_release_frees_the_lock(side, lock_server, name):
    """Defect 2: a re-entry that the server ran but whose replies were all lost raises; the
    owner's release then gives back its hold and the unseen one: the lock is free."""
    raw = _raw(lock_server)
    with TcpProxy(lock_server) as proxy:
        client = side.client(proxy.url)
        owner = Actor(side)
        lock = client.lock(name)
        try:
            assert await owner.do(lambda: lock.acquire())
            drops = [proxy.drop_next_reply(ACQUIRE_SHA) for _ in range(2)]
            with pytest.raises(ServerUnavailableError):
                await owner.do(lambda: lock.acquire(blocking=False))
            assert all(d.is_set() for d in drops)
            assert list(_holders(raw, name).values()) == [2]  # it ran, unseen
            await owner.do(lambda: lock.release())  # no LeaseLostError
            assert raw.exists(name) == 0
            assert not lock.lease_lost
            other = side.client(lock_server.url).lock(name)
            assert await side(other.acquire(blocking=False))
            await side(other.release())
        finally:
            await owner.close()
    raw.close()


async def test_a_re_entry_retried_after_lost_replies_counts_once(side, lock_server, name):
    """A re-entry that raised with its replies lost, then the same re-entry again: one hold
    more, not two, and two releases free the lock."""
    raw = _raw(lock_server)
    with TcpProxy(lock_server) as proxy:
        client = side.client(proxy.url)
        owner = Actor(side)
        lock = client.lock(name)
        try:
            assert await owner.do(lambda: lock.acquire())
            drops = [proxy.drop_next_reply(ACQUIRE_SHA) for _ in range(2)]
            with pytest.raises(ServerUnavailableError):
                await owner.do(lambda: lock.acquire(blocking=False))
            assert all(d.is_set() for d in drops)
            assert await owner.do(lambda: lock.acquire(blocking=False))
            assert await owner.do(lambda: lock.hold_count()) == 2
            await owner.do(lambda: lock.release())
            assert list(_holders(raw, name).values()) == [1]
            await owner.do(lambda: lock.release())
            assert raw.exists(name) == 0
        finally:
            await owner.close()
    raw.close()


@pytest.mark.parametrize("holds", [1, 2])
async def test_a_release_with_lost_replies_then_acquire(side, lock_server, name, holds):
    """Defect 3: a release that the server ran but whose replies were all lost raises; the
    owner's next acquire first settles it (same request id), then acquires: one hold more
    than the server had after that release, never a ``LeaseLostError``."""
    raw = _raw(lock_server)
    with TcpProxy(lock_server) as proxy:
        client = side.client(proxy.url)
        owner = Actor(side)
        lock = client.lock(name)
        try:
            for _ in range(holds):
                assert await owner.do(lambda: lock.acquire())
            drops = [proxy.drop_next_reply(RELEASE_SHA) for _ in range(2)]
            with pytest.raises(ServerUnavailableError):
                await owner.do(lambda: lock.release())
            assert all(d.is_set() for d in drops)
            assert sum(_holders(raw, name).values()) == holds - 1  # it ran, unseen
            for expected in (holds, holds + 1):
                assert await owner.do(lambda: lock.acquire(timeout=5))
                assert list(_holders(raw, name).values()) == [expected]
                assert await owner.do(lambda: lock.hold_count()) == expected
            for _ in range(holds + 1):
                await owner.do(lambda: lock.release())
            assert raw.exists(name) == 0
            with pytest.raises(RuntimeError):  # NotOwnedError: nothing left to release
                await owner.do(lambda: lock.release())
        finally:
            await owner.close()
    raw.close()


@pytest.mark.parametrize("form", ["with", "hold"])
async def test_an_inner_block_whose_release_lost_replies_then_the_outer_exit(
    side, lock_server, name, form
):
    """``with lock: with lock: ...`` where the inner block's release ran but all its replies
    were lost: the inner exit raises, the outer exit settles that release (same request id)
    and then releases its own hold; the lock is free, not left to the outer hold's lease."""
    raw = _raw(lock_server)
    with TcpProxy(lock_server) as proxy:
        client = side.client(proxy.url)
        owner = Actor(side)
        lock = client.lock(name)

        def block() -> Any:
            return lock if form == "with" else lock.hold(timeout=5)

        def drop_inner_release() -> None:
            assert list(_holders(raw, name).values()) == [2]
            drops.extend(proxy.drop_next_reply(RELEASE_SHA) for _ in range(2))

        drops: list[Any] = []
        nested: Callable[[], Any]  # a coroutine function on the asyncio side
        if side.is_async:

            async def nested() -> None:
                async with block(), block():
                    drop_inner_release()

        else:

            def nested() -> None:
                with block(), block():
                    drop_inner_release()

        try:
            with pytest.raises(ServerUnavailableError):
                await owner.do(nested)
            assert len(drops) == 2 and all(d.is_set() for d in drops)
            assert raw.exists(name) == 0, "the outer hold was left on the server"
            assert await owner.do(lambda: lock.fencing_token) is None
            with pytest.raises(RuntimeError):  # NotOwnedError: nothing left to release
                await owner.do(lambda: lock.release())
        finally:
            await owner.close()
    raw.close()


async def test_a_lease_that_ran_out_does_not_lock_its_owner_out(side, lock_server, name):
    """Defect 4: Redisson's ``lock(leaseTime)`` without ``unlock()``: once the lease ran out
    the same owner simply takes the lock again, a fresh hold with a new token."""
    raw = _raw(lock_server)
    client = side.client(lock_server.url)
    owner = Actor(side)
    lock = client.lock(name)
    lost: list[LeaseLostError] = []
    client.add_listener(lambda event: lost.append(event) if event.kind == "lease_lost" else None)
    try:
        assert await owner.do(lambda: lock.acquire(lease=0.3))
        first = await owner.do(lambda: lock.fencing_token)
        await eventually(lambda: raw.exists(name) == 0)
        for _ in range(3):
            assert await owner.do(lambda: lock.acquire(timeout=5, lease=0.3))
            assert await owner.do(lambda: lock.hold_count()) == 1
            assert await owner.do(lambda: lock.fencing_token) > first
            await eventually(lambda: raw.exists(name) == 0)
        assert await owner.do(lambda: lock.acquire(blocking=False))  # watched from now on
        await owner.do(lambda: lock.release())
        assert raw.exists(name) == 0
        assert lost == []  # a lease that ran out as asked is not a lost lease
    finally:
        await owner.close()
    raw.close()


async def test_a_watched_hold_found_gone_at_re_entry_is_reported(side, lock_server, name):
    """A watched hold force-released behind its owner's back: the re-entry takes the lock
    afresh (count 1), the owner is told its lease was lost, and the outer release raises."""
    raw = _raw(lock_server)
    client = side.client(lock_server.url)
    owner = Actor(side)
    lock = client.lock(name)
    told: list[LeaseLostError] = []
    lock_with_listener = client.lock(name, on_lease_lost=told.append)
    try:
        assert await owner.do(lambda: lock_with_listener.acquire())
        assert raw.delete(name) == 1  # force-released by an operator
        assert await owner.do(lambda: lock.acquire(blocking=False))
        assert await owner.do(lambda: lock.hold_count()) == 1
        assert len(told) == 1 and isinstance(told[0], LeaseLostError)
        await owner.do(lambda: lock.release())  # the new hold
        assert raw.exists(name) == 0
        with pytest.raises(LeaseLostError):  # the outer one, lost meanwhile
            await owner.do(lambda: lock.release())
    finally:
        await owner.close()
    raw.close()


async def test_a_fair_lock_line_moves_on_when_leases_run_out(side, lock_server, name):
    """Defect 9: waiters in line, each taking the lock with a short lease and never releasing
    it: each gets its turn when the lease before it runs out, in arrival order, and none
    waits out a full re-check interval (which made most of them time out)."""
    raw = _raw(lock_server)
    keys = LockKeys.for_name(name)
    client = side.client(lock_server.url)
    actors = [Actor(side) for _ in range(5)]
    lock = client.fair_lock(name)
    order: list[int] = []

    def taken(i: int) -> Any:
        lease = 3.0 if i == 0 else 0.4  # the first lease outlasts the line's set-up

        async def wait_async() -> bool:
            got = await lock.acquire(timeout=8, lease=lease)
            order.append(i)
            return bool(got)

        def wait_sync() -> bool:
            got = lock.acquire(timeout=8, lease=lease)
            order.append(i)
            return bool(got)

        return wait_async if side.is_async else wait_sync

    try:
        assert await actors[0].do(taken(0))
        pending = []
        for i in range(1, len(actors)):
            pending.append(actors[i].start(taken(i)))

            # in the client's local line; its head alone has a place in the server's
            def in_line(i: int = i) -> bool:
                return client._lines.waiting(lock._line) == i

            await eventually(in_line)
            await eventually(lambda: raw.zcard(keys.line) == 1)
        for future in pending:
            assert await future, "a waiter in line timed out"
        assert order == list(range(len(actors)))
    finally:
        for actor in actors:
            await actor.close()
    raw.close()
