"""The reentrant lock's behaviour on a real server, each test on the sync and asyncio side."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from functools import partial
from typing import Any

import pytest
import redis

import redlease
from redlease import InvalidArgumentError, LeaseLostError, LockTimeoutError, NotOwnedError
from redlease._core.keys import LockKeys

from .helpers import eventually, renewed, reply_int, reply_str_hash


async def test_acquire_release_and_queries(side, server, name):
    client = side.client(server.url)
    lock = client.lock(name)
    assert not await side(lock.locked())
    assert await side(lock.ttl()) is None
    assert await side(lock.acquire(timeout=5, lease=60))
    assert await side(lock.locked())
    assert await side(lock.owned())
    assert await side(lock.hold_count()) == 1
    assert 50 < await side(lock.ttl()) <= 60  # this lease, not the watchdog's 30 s
    await side(lock.release())
    assert not await side(lock.locked())
    assert not await side(lock.owned())


@pytest.mark.parametrize(
    "redis_kwargs",
    [
        {"single_connection_client": True},
        {"decode_responses": True},
        {"protocol": 3},
        {"encoding": "latin-1"},
    ],
    ids=["single-connection", "decoded", "resp3", "latin-1"],
)
async def test_works_whatever_the_redis_client_options(side, server, name, redis_kwargs):
    """Scripts go out on redlease's own packed path or, for a single-connection client,
    through redis-py: both give the same answers, and names keep the client's encoding."""
    client = side.client(server.url, **redis_kwargs)
    lock = client.lock(name + ":é")
    assert await side(lock.acquire())
    assert await side(lock.acquire())
    assert await side(lock.hold_count()) == 2
    assert lock.fencing_token is not None and lock.fencing_token > 0
    await side(lock.release())
    assert await side(lock.owned())
    await side(lock.release())
    assert not await side(lock.locked())
    encoding = redis_kwargs.get("encoding", "utf-8")
    raw = redis.Redis.from_url(server.url)
    try:
        assert await side(lock.acquire(lease=10))
        assert raw.exists((name + ":é").encode(encoding)) == 1
        await side(lock.release())
    finally:
        raw.close()


@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "own-hash-tag"])
async def test_redisson_data_layout(side, server, name, tagged):
    # Redisson's channel is prefixName("redisson_lock__channel", name): braces are added only
    # when the name has none, so "{order}:42" publishes on "redisson_lock__channel:{order}:42"
    name = f"{{{name}}}:42" if tagged else name
    channel = f"redisson_lock__channel:{name}" if tagged else f"redisson_lock__channel:{{{name}}}"
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    pubsub = raw.pubsub()
    pubsub.subscribe(channel)
    pubsub.get_message(timeout=5)  # subscribe confirmation
    client = side.client(server.url, handoff_window=0)  # exactly Redisson's behaviour
    lock = client.lock(name)
    assert await side(lock.acquire(lease=20))
    fields = raw.hgetall(name)
    token = fields.pop("redlease:fence")  # the hold's fencing token; Redisson ignores it
    assert int(token) == lock.fencing_token
    assert fields.pop("redlease:wait")  # the acquire call it was made for (ignored too)
    assert fields.pop("redlease:lease") == "20000"  # the hold's lease: its waiters' wait bound
    assert len(fields) == 1
    ((field, count),) = fields.items()
    assert field.startswith(client.id + ":") and count == "1"
    assert 19_000 < raw.pttl(name) <= 20_000
    await side(lock.release())
    assert raw.exists(name) == 0
    message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == "0"
    pubsub.close()
    raw.close()


async def test_release_hands_the_lock_to_the_first_waiter_in_line(side, server, name):
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    # a waiter in line (its place: owner field, wait id, hand-over lease: the window, which
    # its watchdog lengthens to 30 s)
    raw.zadd(keys.line, {"slow-waiter:1 wait-1 w30000": 1})
    pubsub = raw.pubsub()
    own = keys.handover("slow-waiter:1")  # the channel of the waiter's client
    pubsub.subscribe(keys.channel, own)
    assert {pubsub.get_message(timeout=5)["type"] for _ in range(2)} == {"subscribe"}
    client = side.client(server.url, handoff_window=0.5)
    lock = client.lock(name)
    assert await side(lock.acquire())  # a free lock: the plain lock is anyone's
    token = lock.fencing_token
    await side(lock.release())
    raw.publish(keys.channel, "marker")  # arrives after whatever the release published
    published: list[tuple[Any, Any]] = []
    while not published or published[-1] != (keys.channel, "marker"):
        message = pubsub.get_message(timeout=5)
        assert message is not None
        published.append((message["channel"], message["data"]))
    pubsub.close()
    # only the waiter whose turn it is is woken, on its client's own channel, with the grant
    handed = reply_int(raw.get(keys.fence))  # a fresh token: above the releaser's and the counter
    assert handed > token
    assert published == [(own, f"slow-waiter:1 {handed} 500 wait-1"), (keys.channel, "marker")]
    held = raw.hgetall(name)
    assert (held["slow-waiter:1"], held["redlease:wait"]) == ("1", "wait-1")
    assert int(held["redlease:fence"]) == handed
    assert 0 < raw.pttl(name) <= 500
    assert raw.zcard(keys.line) == 0  # its place went with the hand-over
    assert await side(lock.locked())
    assert not await side(lock.acquire(blocking=False))  # the releaser cannot barge back
    other = side.client(server.url).lock(name)
    assert not await side(other.acquire(blocking=False))  # nor can anyone else
    # the waiter never uses it: its first lease (the window) runs out, the lock is anyone's
    assert await side(other.acquire(timeout=10))
    held_after = reply_str_hash(raw.hgetall(name))
    assert [v for k, v in held_after.items() if not k.startswith("redlease:")] == ["1"]
    await side(other.release())
    raw.close()


async def test_waiters_are_served_in_arrival_order(side, server, name):
    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    order: list[int] = []
    clients = [side.client(server.url) for _ in range(3)]

    async def queued(count: int) -> bool:
        return (await side(holder.statistics())).waiters == count

    if side.is_async:

        async def wait_turn(i: int) -> None:
            lock = clients[i].lock(name)
            assert await lock.acquire(timeout=30)
            order.append(i)
            await lock.release()

        tasks = []
        for i in range(3):
            tasks.append(asyncio.create_task(wait_turn(i)))
            await eventually(partial(queued, i + 1))
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    else:

        def wait_turn_in_thread(i: int) -> None:
            lock = clients[i].lock(name)
            assert lock.acquire(timeout=30)
            order.append(i)
            lock.release()

        threads = []
        for i in range(3):
            threads.append(threading.Thread(target=wait_turn_in_thread, args=(i,)))
            threads[-1].start()
            await eventually(partial(queued, i + 1))
        holder.release()
        for t in threads:
            t.join(60)
    assert order == [0, 1, 2]
    assert (await side(holder.statistics())).waiters == 0


async def test_a_waiter_that_gives_up_leaves_the_line(side, server, name):
    holder = side.client(server.url).lock(name)
    waiter = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    assert not await side(waiter.acquire(timeout=0.3))
    assert (await side(holder.statistics())).waiters == 0
    await side(holder.release())
    assert not await side(holder.locked())
    assert await side(waiter.acquire(blocking=False))  # nothing reserved for a gone waiter
    await side(waiter.release())


@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "own-hash-tag"])
async def test_excludes_a_redisson_holder_and_wakes_on_its_unlock(side, server, name, tagged):
    name = f"{{{name}}}:42" if tagged else name
    channel = f"redisson_lock__channel:{name}" if tagged else f"redisson_lock__channel:{{{name}}}"
    raw = redis.Redis.from_url(server.url)
    # what Redisson writes for a Java thread holding the lock
    raw.hset(name, "5d1a3c4e-0000-4000-8000-000000000000:1", 1)
    raw.pexpire(name, 30_000)
    client = side.client(server.url)
    lock = client.lock(name)
    assert not await side(lock.acquire(blocking=False))

    heard: list[int] = []

    async def redisson_unlock() -> None:
        for _ in range(400):  # until the waiter listens where Redisson publishes (<= 20 s)
            if raw.pubsub_numsub(channel)[0][1] > 0:
                break
            await asyncio.sleep(0.05)
        raw.delete(name)
        heard.append(raw.publish(channel, "0"))

    started = time.monotonic()
    if side.is_async:
        unlock = asyncio.create_task(redisson_unlock())
        assert await lock.acquire(timeout=20)
        await unlock
    else:
        thread = threading.Thread(target=asyncio.run, args=(redisson_unlock(),))
        thread.start()
        assert lock.acquire(timeout=20)
        thread.join()
    assert time.monotonic() - started < 10, "woken by the unlock message, not by the 30 s TTL"
    assert heard == [1]  # the waiter listened on Redisson's own channel for this name
    await side(lock.release())
    raw.close()


async def test_reentrant_counts_and_last_release_frees(side, server, name):
    client = side.client(server.url)
    other = side.client(server.url)
    lock = client.lock(name)
    for expected in (1, 2, 3):
        assert await side(lock.acquire())
        assert await side(lock.hold_count()) == expected
    for remaining in (2, 1):
        await side(lock.release())
        assert await side(lock.hold_count()) == remaining
        assert not await side(other.lock(name).acquire(blocking=False))
    await side(lock.release())
    assert await side(other.lock(name).acquire(blocking=False))


async def test_two_lock_objects_share_the_owner_holds(side, server, name):
    client = side.client(server.url)
    first, second = client.lock(name), client.lock(name)
    assert await side(first.acquire())
    assert await side(second.acquire(blocking=False))  # same thread/task: re-entry
    assert await side(first.hold_count()) == 2
    await side(second.release())
    await side(first.release())
    assert not await side(first.locked())


async def test_release_without_holding_raises_not_owned(side, server, name):
    client = side.client(server.url)
    lock = client.lock(name)
    with pytest.raises(NotOwnedError) as info:
        await side(lock.release())
    assert name in str(info.value) and client.id in str(info.value)
    assert isinstance(info.value, RuntimeError)


async def test_another_client_cannot_release_or_take(side, server, name):
    holder = side.client(server.url).lock(name)
    other = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    with pytest.raises(NotOwnedError):
        await side(other.release())
    assert not await side(other.acquire(timeout=0.2))
    assert await side(holder.owned())
    await side(holder.release())


async def test_bounded_wait_in_with_raises_timeout(side, server, name):
    holder = side.client(server.url).lock(name)
    other = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    with pytest.raises(LockTimeoutError) as info:
        async with side.hold(other, timeout=0.2):
            pass
    assert isinstance(info.value, TimeoutError) and info.value.name == name
    await side(holder.release())
    async with side.hold(other, timeout=5, lease=3) as lease:
        assert lease.name == name and lease.hold_count == 1 and lease.lease == 3
        assert await side(other.owned())
    assert not await side(other.locked())


async def test_with_statement_waits_and_releases(side, server, name):
    lock = side.client(server.url).lock(name)
    if side.is_async:
        async with lock:
            assert await lock.owned()
    else:
        with lock:
            assert lock.owned()
    assert not await side(lock.locked())


async def test_lease_expires_and_release_reports_it(side, server, name):
    client = side.client(server.url)
    lock = client.lock(name)
    assert await side(lock.acquire(lease=0.3))
    await eventually(lambda: _free(side, lock))
    # someone else can take it now
    assert await side(side.client(server.url).lock(name).acquire(blocking=False))
    with pytest.raises(LeaseLostError) as info:
        await side(lock.release())
    assert isinstance(info.value, NotOwnedError) and info.value.name == name


async def _free(side, lock) -> bool:
    return not await side(lock.locked())


@pytest.mark.two_servers
async def test_watchdog_renews_past_several_leases(side, server, name):
    # a 2 s lease, renewed every 2/3 s (each call bounded by that): a renewal late by up to
    # 1.3 s on a loaded 2-core machine still lands within the lease (1.2 s left 0.8 s)
    client = side.client(server.url, watchdog_timeout=2)
    lock = client.lock(name)
    assert await side(lock.acquire())
    # the hold must outlive several leases: 7 renewals, a third of a lease apart, span more
    # than two (waited for, not slept through)
    raw = redis.Redis.from_url(server.url)
    assert await renewed(raw, name, times=7, timeout=60), "the watchdog renews the lease"
    raw.close()
    assert await side(lock.owned())
    assert 0 < await side(lock.ttl()) <= 2
    await side(lock.release())
    assert not await side(lock.locked())


async def test_explicit_lease_is_not_renewed(side, server, name):
    client = side.client(server.url, watchdog_timeout=0.6)
    lock = client.lock(name)
    assert await side(lock.acquire(lease=0.5))
    await eventually(lambda: _free(side, lock))


async def test_lost_lease_is_signalled(side, server, name):
    lost: list[LeaseLostError] = []
    seen = threading.Event()

    def on_lost(error: LeaseLostError) -> None:
        lost.append(error)
        seen.set()

    client = side.client(server.url, watchdog_timeout=0.6)
    lock = client.lock(name, on_lease_lost=on_lost)
    assert await side(lock.acquire())
    raw = redis.Redis.from_url(server.url)
    raw.delete(name)  # the hold vanishes behind the holder's back
    raw.close()
    await eventually(seen.is_set, timeout=10)
    assert lost[0].name == name and lost[0].owner is not None
    assert lock.lease_lost
    with pytest.raises(LeaseLostError):
        await side(lock.release())
    assert not lock.lease_lost


async def test_force_release_wakes_a_waiter(side, server, name):
    holder = side.client(server.url).lock(name)
    waiter_client = side.client(server.url)
    assert await side(holder.acquire(lease=30))
    started = time.monotonic()
    if side.is_async:
        waiter = asyncio.create_task(waiter_client.lock(name).acquire(timeout=25))
        await eventually(lambda: _waiting(waiter_client, name))
        assert await side(waiter_client.lock(name).force_release())
        assert await waiter
    else:
        result: list[bool] = []
        thread = threading.Thread(
            target=lambda: result.append(waiter_client.lock(name).acquire(timeout=25))
        )
        thread.start()
        await eventually(lambda: _waiting(waiter_client, name))
        assert waiter_client.lock(name).force_release()
        thread.join(30)
        assert result == [True]
    assert time.monotonic() - started < 10, "woken by pub/sub, not by the 30 s lease"
    holders = (await side(holder.statistics())).holders
    assert [owner.split(":")[0] for owner in holders] == [waiter_client.id]


def _waiting(client, name) -> bool:
    sub = client._subscriber
    return sub is not None and sub.waiting(f"redisson_lock__channel:{{{name}}}") > 0


async def test_statistics(side, server, name):
    client = side.client(server.url)
    lock = client.lock(name)
    assert await side(lock.acquire(lease=60))
    stats = await side(lock.statistics())
    assert stats.name == name and stats.locked and stats.owned and stats.hold_count == 1
    assert 50 < stats.ttl <= 60 and len(stats.holders) == 1
    await side(lock.release())
    stats = await side(lock.statistics())
    assert not stats.locked and stats.ttl is None and stats.holders == {}


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"lease": 0}, "lease"),
        ({"lease": -1}, "lease"),
        ({"timeout": -1e-9}, "timeout"),
        ({"timeout": -2}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"blocking": False, "timeout": 1}, "timeout"),
        ({"lease": "10"}, "lease"),
    ],
)
async def test_bad_acquire_arguments(side, server, name, kwargs, what):
    lock = side.client(server.url).lock(name)
    with pytest.raises(InvalidArgumentError) as info:
        await side(lock.acquire(**kwargs))
    assert what in str(info.value) and isinstance(info.value, ValueError)
    assert not await side(lock.locked())


async def test_bad_names_and_options(side, server):
    client = side.client(server.url)
    with pytest.raises(InvalidArgumentError, match="empty"):
        client.lock("")
    with pytest.raises(InvalidArgumentError, match="str"):
        client.lock(42)
    with pytest.raises(InvalidArgumentError, match="lease"):
        client.lock("x", lease=0)
    with pytest.raises(InvalidArgumentError, match="watchdog_timeout"):
        side.client(server.url, watchdog_timeout=-1)


async def test_server_down_is_a_clear_connection_error(side):
    from redlease.testing import free_port

    url = f"redis://:hunter2secret@127.0.0.1:{free_port()}/0"
    client = side.client(url)
    with pytest.raises(redlease.ServerUnavailableError) as info:
        await side(client.lock("x").acquire())
    assert isinstance(info.value, ConnectionError)
    assert "127.0.0.1" in str(info.value) and "hunter2secret" not in str(info.value)
    assert "'x'" in str(info.value)


async def test_names_and_keys_that_are_not_locks(side, server, name):
    client = side.client(server.url)
    with pytest.raises(InvalidArgumentError, match="hash tag"):
        client.lock("a}b{")
    raw = redis.Redis.from_url(server.url)
    raw.set(name + ":string", "x")
    raw.hset(name + ":hash", mapping={"colour": "blue"})
    raw.close()
    for key in (name + ":string", name + ":hash"):
        with pytest.raises(InvalidArgumentError, match="not a lock"):
            await side(client.lock(key).statistics())
    with pytest.raises(InvalidArgumentError, match="not a lock"):
        await side(client.lock(name + ":string").acquire(blocking=False))


async def test_a_hung_server_does_not_hide_a_lost_lease(side, private_server, name):
    lost = threading.Event()
    client = side.client(private_server.url, watchdog_timeout=0.9)
    lock = client.lock(name, on_lease_lost=lambda _e: lost.set())
    assert await side(lock.acquire())
    private_server.pause()  # answers nothing: renewals hang rather than fail
    try:
        started = time.monotonic()
        await eventually(lost.is_set, timeout=20)
        assert time.monotonic() - started < 10
    finally:
        private_server.resume()
