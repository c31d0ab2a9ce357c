"""Redlock on 3 and 5 real private masters, each test on the sync and the asyncio side."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
import redis

from redlease.errors import (
    ClientClosedError,
    InvalidArgumentError,
    LeaseLostError,
    NotOwnedError,
    QuorumError,
    ServerUnavailableError,
)

from . import redlock_fixtures as fixtures
from .helpers import eventually, renewed
from .redlock_fixtures import held_on, holders, listening, redlock

redlock_binary, five, three, private3 = (
    fixtures.redlock_binary,
    fixtures.five,
    fixtures.three,
    fixtures.private3,
)


SLACK = 10.0
"""Allowance on top of a per-master timeout for a loaded machine (a stalled call would take
the 60 s socket timeout of ``STALLS``, or for ever)."""

STALLS = 60.0
"""The socket timeout of a client that meets a stopped master: what a call that ignored the
master timeout would wait, far past ``SLACK``."""


async def pause(side, seconds: float) -> None:
    await asyncio.sleep(seconds) if side.is_async else time.sleep(seconds)


@pytest.mark.parametrize("count", [3, 5])
async def test_quorum_acquire_release_and_queries(side, five, name, count):
    masters = five[:count]
    client = redlock(side, masters)
    assert client.quorum == count // 2 + 1
    lock = client.lock(name)
    assert not await side(lock.locked())
    assert await side(lock.ttl()) is None
    assert await side(lock.acquire(timeout=5, lease=60))
    for master in masters:  # the single-master layout, on every master
        ((field, count_text),) = holders(master, name).items()
        assert field.startswith(client.id + ":") and count_text == "1"
    assert await side(lock.locked()) and await side(lock.owned())
    assert await side(lock.hold_count()) == 1
    assert 50 < await side(lock.ttl()) <= 60  # this lease, not the watchdog's 30 s
    assert not hasattr(lock, "fencing_token")  # no token that could go backwards
    await side(lock.release())
    assert held_on(masters, name) == []
    assert not await side(lock.locked()) and not await side(lock.owned())


async def test_reentrant_and_exclusive(side, three, name):
    holder = redlock(side, three).lock(name)
    other = redlock(side, three).lock(name)
    assert await side(holder.acquire())
    assert await side(holder.acquire(blocking=False))
    assert await side(holder.hold_count()) == 2
    assert not await side(other.acquire(blocking=False))
    assert not await side(other.acquire(timeout=0.2))
    with pytest.raises(NotOwnedError):
        await side(other.release())
    await side(holder.release())
    assert not await side(other.acquire(blocking=False))
    await side(holder.release())
    assert await side(other.acquire(blocking=False))
    await side(other.release())


async def test_a_hold_made_for_another_call_is_re_leased_not_taken_as_a_retry(side, three, name):
    """Issue #23 (class a, as defect 2 for the plain lock): every master takes an owner's
    existing hold as an acquire's retry only if it was made for that very call (its wait id).
    The owner's hold from an earlier call that the client no longer counts (a wait that gave
    up and could not give it back) is re-leased to the new call, with the new call's lease:
    never "granted" with the few seconds the old hold has left while the owner believes it
    holds the lease it asked for. Before the fix Redlock sent no wait id (""), so every call
    of an owner looked like the retry of any other."""
    client = redlock(side, three)
    lock = client.lock(name)
    assert await side(lock.acquire(blocking=False, lease=3))
    owner = client._owner()
    client._state.forget(client._state.holds.get(name, owner))  # left on the masters
    assert await side(lock.acquire(blocking=False, lease=60))
    waits = set()
    for server in three:
        raw = redis.Redis.from_url(server.url)
        try:
            assert raw.pttl(name) > 55_000  # this call's lease, not the 3 s left of the old
            waits.add(raw.hget(name, "redlease:wait"))
        finally:
            raw.close()
    (wait,) = waits  # one id per call, the same on every master, unique across processes
    assert wait and len(wait) > 16
    assert await side(lock.hold_count()) == 1
    await side(lock.release())
    assert held_on(three, name) == []


async def test_with_statement(side, three, name):
    lock = redlock(side, three).lock(name)
    if side.is_async:
        async with lock:
            assert await lock.owned()
    else:
        with lock:
            assert lock.owned()
    assert held_on(three, name) == []


async def test_a_waiter_is_woken_by_pubsub_from_the_masters(side, three, name, long_recheck):
    holder = redlock(side, three).lock(name)
    waiter_client = redlock(side, three)
    waiter = waiter_client.lock(name)
    assert await side(holder.acquire(lease=30))
    if side.is_async:
        task = asyncio.create_task(waiter.acquire(timeout=20))
        await eventually(lambda: listening(waiter_client, name) >= 2)
        released = time.monotonic()
        await holder.release()
        assert await asyncio.wait_for(task, 25)
    else:
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(waiter.acquire(timeout=20)))
        thread.start()
        await eventually(lambda: listening(waiter_client, name) >= 2)
        released = time.monotonic()
        holder.release()
        thread.join(25)
        assert result == [True]
    # (no re-check within its 20 s wait: long_recheck)
    assert time.monotonic() - released < long_recheck, "woken by pub/sub, not by a re-check"
    owners = {field.split(":")[0] for s in three for field in holders(s, name)}
    assert owners == {waiter_client.id}


async def test_close_stops_a_waiter(side, three, name, long_recheck):
    """``close()`` while a call waits for the lock: it stops at once with
    ``ClientClosedError`` and nothing of it is left on the masters."""
    holder = redlock(side, three).lock(name)
    waiter_client = redlock(side, three)
    waiter = waiter_client.lock(name)
    assert await side(holder.acquire(lease=30))
    outcome: list[BaseException | bool] = []

    async def wait_async() -> None:
        try:
            outcome.append(await waiter.acquire(timeout=20))
        except Exception as exc:
            outcome.append(exc)

    def wait_sync() -> None:
        try:
            outcome.append(waiter.acquire(timeout=20))
        except Exception as exc:
            outcome.append(exc)

    if side.is_async:
        task = asyncio.create_task(wait_async())
    else:
        threading.Thread(target=wait_sync, daemon=True).start()
    await eventually(lambda: listening(waiter_client, name) >= 2)
    started = time.monotonic()
    await side(waiter_client.close())
    await eventually(lambda: bool(outcome), timeout=30)
    # not its 20 s timeout, nor a re-check (none within it: long_recheck)
    assert time.monotonic() - started < long_recheck
    assert isinstance(outcome[0], ClientClosedError), outcome
    if side.is_async:
        await task
    owners = {field.split(":")[0] for s in three for field in holders(s, name)}
    assert waiter_client.id not in owners
    await side(holder.release())


async def test_one_master_down(side, private3, name, caplog):
    client = redlock(side, private3)
    lock = client.lock(name)
    private3[0].kill()
    assert await side(lock.acquire(timeout=5, lease=10))
    assert held_on(private3[1:], name) == [0, 1]
    assert await side(lock.owned())
    with caplog.at_level(logging.WARNING, logger="redlease"):
        await side(lock.release())
    assert any(private3[0].url.split("//")[1][:-2] in r.getMessage() for r in caplog.records)
    assert held_on(private3[1:], name) == []


async def test_two_masters_down_fails_cleanly(side, private3, name):
    client = redlock(side, private3)
    lock = client.lock(name)
    private3[0].kill()
    private3[1].kill()
    with pytest.raises(QuorumError) as info:
        await side(lock.acquire(blocking=False))
    error = info.value
    assert isinstance(error, ConnectionError) and error.quorum == 2 and error.name == name
    assert list(error.outcomes) == list(client.addresses)
    assert error.outcomes[client.addresses[2]] == "granted"
    assert all(isinstance(error.errors[a], ServerUnavailableError) for a in client.addresses[:2])
    started = time.monotonic()
    assert not await side(lock.acquire(timeout=0.5))  # a bounded acquire returns False
    assert time.monotonic() - started < 3
    with pytest.raises(QuorumError):
        if side.is_async:
            async with lock:
                pass
        else:
            with lock:
                pass
    assert holders(private3[2], name) == {}  # nothing left held on the master that answered
    with pytest.raises(NotOwnedError):
        await side(lock.release())


async def test_a_stopped_master_does_not_stall_acquisition(side, private3, name):
    client = redlock(side, private3, master_timeout=0.2, socket_timeout=STALLS)
    lock = client.lock(name)
    assert await side(lock.acquire(lease=10))  # connections to every master are open
    await side(lock.release())
    private3[2].pause()
    try:
        started = time.monotonic()
        assert await side(lock.acquire(lease=2))
        took = time.monotonic() - started
        assert took < 0.2 + SLACK, f"acquire took {took:.3f} s with one master stopped"
        assert held_on(private3[:2], name) == [0, 1]
        started = time.monotonic()
        await side(lock.release())
        assert time.monotonic() - started < 0.2 + SLACK
        assert held_on(private3[:2], name) == []
        # a new connection to the stopped master must not stall either
        started = time.monotonic()
        assert await side(lock.acquire(lease=2))
        assert time.monotonic() - started < 0.2 + SLACK
        await side(lock.release())
    finally:
        private3[2].resume()
    # a late grant the stopped master makes once resumed expires with its 2 s lease
    await eventually(lambda: held_on(private3, name) == [], timeout=15)


async def test_two_stopped_masters_of_five_do_not_stall(side, redlock_binary, name):
    servers = fixtures._start(redlock_binary, 5)
    try:
        client = redlock(side, servers, master_timeout=0.2, socket_timeout=STALLS)
        lock = client.lock(name)
        servers[0].pause()
        servers[3].pause()
        try:
            started = time.monotonic()
            assert await side(lock.acquire(lease=2))
            assert time.monotonic() - started < 0.2 + SLACK
            assert held_on([servers[i] for i in (1, 2, 4)], name) == [0, 1, 2]
            await side(lock.release())
        finally:
            servers[0].resume()
            servers[3].resume()
        await side(client.close())
    finally:
        fixtures._stop(servers)


async def test_a_master_restarted_empty_while_held(side, private3, name):
    lost: list[LeaseLostError] = []
    seen = threading.Event()

    def on_lost(error: LeaseLostError) -> None:
        lost.append(error)
        seen.set()

    # a lease whose renewal calls (bounded by a third of it) land on a loaded 2-core machine,
    # and whose renewals may come 1.3 s late (1.2 s left them 0.8 s)
    client = redlock(side, private3, watchdog_timeout=2)
    lock = client.lock(name, on_lease_lost=on_lost)
    assert await side(lock.acquire())
    private3[0].restart()  # comes back empty
    # more than two leases: only renewals keep it (7 on a master of the majority, a third of
    # a lease apart; waited for, not slept through)
    raw = redis.Redis.from_url(private3[1].url)
    try:
        assert await renewed(raw, name, times=7, timeout=60), "the watchdog renews the hold"
    finally:
        raw.close()
    assert not lost and not lock.lease_lost
    assert await side(lock.owned())  # still held on the remaining majority
    assert held_on(private3, name) == [1, 2]
    private3[1].restart()  # now only one master of three has it: the majority is lost
    await eventually(seen.is_set, timeout=10)
    assert lost[0].name == name and lock.lease_lost
    with pytest.raises(LeaseLostError):
        await side(lock.release())


async def test_lost_majority_is_signalled(side, three, name):
    import redis

    seen = threading.Event()
    client = redlock(side, three, watchdog_timeout=0.6)
    lock = client.lock(name, on_lease_lost=lambda error: seen.set())
    assert await side(lock.acquire())
    for server in three[:2]:  # the hold vanishes from two masters behind the holder's back
        raw = redis.Redis.from_url(server.url)
        raw.delete(name)
        raw.close()
    await eventually(seen.is_set, timeout=10)
    assert lock.lease_lost
    with pytest.raises(LeaseLostError):
        await side(lock.release())
    await eventually(lambda: held_on(three, name) == [], timeout=5)


async def test_validity_spent_means_failure_and_nothing_held(side, private3, name):
    client = redlock(side, private3, master_timeout=0.1)
    lock = client.lock(name)
    assert await side(lock.acquire(lease=10))
    await side(lock.release())
    private3[2].pause()
    try:
        # every attempt waits 0.1 s for the stopped master: more than the whole lease
        assert not await side(lock.acquire(timeout=0.6, lease=0.05))
        assert held_on(private3[:2], name) == []
        with pytest.raises(QuorumError, match="validity was spent"):
            await side(lock.acquire(blocking=False, lease=0.05))
        assert held_on(private3[:2], name) == []
        assert not await side(lock.locked())
    finally:
        private3[2].resume()
    # what the stopped master does once resumed expires with the 50 ms lease
    await eventually(lambda: held_on(private3, name) == [], timeout=10)


async def test_release_that_cannot_reach_a_majority(side, private3, name):
    client = redlock(side, private3)
    lock = client.lock(name)
    assert await side(lock.acquire(lease=5))
    private3[0].kill()
    private3[1].kill()
    with pytest.raises(QuorumError) as info:
        await side(lock.release())
    assert info.value.outcomes[client.addresses[2]] == "released"
    assert len(info.value.errors) == 2
    with pytest.raises(NotOwnedError):  # given up locally: the rest expires with the lease
        await side(lock.release())


async def test_force_release_wakes_a_waiter(side, three, name, long_recheck):
    holder = redlock(side, three).lock(name)
    waiter_client = redlock(side, three)
    assert await side(holder.acquire(lease=30))
    if side.is_async:
        task = asyncio.create_task(waiter_client.lock(name).acquire(timeout=20))
        await eventually(lambda: listening(waiter_client, name) >= 2)
        started = time.monotonic()
        assert await waiter_client.lock(name).force_release()
        assert await asyncio.wait_for(task, 25)
    else:
        result: list[bool] = []
        thread = threading.Thread(
            target=lambda: result.append(waiter_client.lock(name).acquire(timeout=20))
        )
        thread.start()
        await eventually(lambda: listening(waiter_client, name) >= 2)
        started = time.monotonic()
        assert waiter_client.lock(name).force_release()
        thread.join(25)
        assert result == [True]
    # woken by the force release's message (no re-check within its 20 s: long_recheck)
    assert time.monotonic() - started < long_recheck
    assert not await side(holder.owned())


async def test_parallel_contenders_never_both_hold(side, five, name):
    contenders, rounds = 4, 8
    shared = [redlock(side, five) for _ in range(2)]  # two threads or tasks per client
    clients = [shared[i % 2] for i in range(contenders)]
    inside, most, done = [0], [0], [0]
    guard = threading.Lock()

    def enter() -> None:
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])

    def leave() -> None:
        with guard:
            inside[0] -= 1
            done[0] += 1

    if side.is_async:

        async def work(client) -> None:
            lock = client.lock(name)
            for _ in range(rounds):
                assert await lock.acquire(timeout=20, lease=5)
                enter()
                await asyncio.sleep(0.002)
                leave()
                await lock.release()

        await asyncio.wait_for(asyncio.gather(*(work(c) for c in clients)), 60)
    else:

        def work_in_thread(client) -> None:
            lock = client.lock(name)
            for _ in range(rounds):
                assert lock.acquire(timeout=20, lease=5)
                enter()
                time.sleep(0.002)
                leave()
                lock.release()

        threads = [threading.Thread(target=work_in_thread, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert done[0] == contenders * rounds
    assert most[0] == 1
    assert held_on(five, name) == []


async def test_cancelled_acquire_leaves_nothing_held(side, private3, name):
    if not side.is_async:
        pytest.skip("cancellation is an asyncio matter")
    holder = redlock(side, private3).lock(name)
    waiter = redlock(side, private3).lock(name)
    assert await holder.acquire(lease=30)
    task = asyncio.create_task(waiter.acquire())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await waiter.owned()
    await holder.release()
    assert held_on(private3, name) == []
    # cancelled while the calls are out: two masters granted, the third is stopped
    slow = redlock(side, private3, master_timeout=1.0).lock(name)
    private3[2].pause()
    try:
        task = asyncio.create_task(slow.acquire(lease=1))
        await eventually(lambda: held_on(private3[:2], name) == [0, 1], timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert held_on(private3[:2], name) == []
    finally:
        private3[2].resume()
    await eventually(lambda: held_on(private3, name) == [], timeout=10)


async def test_bad_arguments(side, three):
    from redlease._async.redlock import AsyncRedlockClient
    from redlease._sync.redlock import RedlockClient

    factory = AsyncRedlockClient if side.is_async else RedlockClient
    with pytest.raises(InvalidArgumentError, match="at least one"):
        factory([])
    with pytest.raises(InvalidArgumentError, match="twice"):
        redlock(side, [three[0], three[1], three[0]])
    with pytest.raises(InvalidArgumentError, match="list of URLs"):
        factory.from_urls(three[0].url)
    with pytest.raises(InvalidArgumentError, match="master_timeout"):
        redlock(side, three, master_timeout=0)
    with pytest.raises(TypeError):
        factory([object()])  # type: ignore[list-item]  # wrong on purpose
    lock = redlock(side, three).lock("x")
    with pytest.raises(InvalidArgumentError, match="lease"):
        await side(lock.acquire(lease=-1))
    with pytest.raises(InvalidArgumentError, match="timeout"):
        await side(lock.acquire(blocking=False, timeout=1))


def test_sync_and_async_apis_match():
    import inspect

    from redlease import Lock
    from redlease._async.multilock import AsyncMultiLock
    from redlease._async.redlock import AsyncRedlockClient
    from redlease._async.redlock_lock import AsyncRedlockLock
    from redlease._sync.multilock import MultiLock
    from redlease._sync.redlock import RedlockClient
    from redlease._sync.redlock_lock import RedlockLock

    pairs = [
        (RedlockClient, AsyncRedlockClient),
        (RedlockLock, AsyncRedlockLock),
        (MultiLock, AsyncMultiLock),
    ]
    for sync_cls, async_cls in pairs:
        sync_api = {n for n in dir(sync_cls) if not n.startswith("_")}
        # aclose(): redis-py's asyncio spelling of close(), which the sync client has not
        async_api = {n for n in dir(async_cls) if not n.startswith("_")} - {"aclose"}
        assert sync_api == async_api, (sync_cls, sync_api ^ async_api)
        for attr in sync_api:
            s, a = getattr(sync_cls, attr), getattr(async_cls, attr)
            if callable(s) and not isinstance(s, type):
                sp = list(inspect.signature(s).parameters)
                ap = list(inspect.signature(a).parameters)
                assert sp == ap, (sync_cls.__name__, attr, sp, ap)
    # the single-master lock's calls, with the same parameters (release's keep_for included)
    for attr in ("acquire", "release", "locked", "owned", "ttl", "hold_count", "force_release"):
        single = set(inspect.signature(getattr(Lock, attr)).parameters)
        assert set(inspect.signature(getattr(RedlockLock, attr)).parameters) == single, attr


# --- release(keep_for=): each master keeps the slot, judged on a majority -------------------


def kept_fields(servers, name: str) -> list[dict[str, str]]:
    """Each master's owner fields of ``name``."""
    return [holders(server, name) for server in servers]


async def test_release_keep_for_keeps_the_lock_taken_on_every_master(side, five, name):
    masters = five[:3]
    client, other = redlock(side, masters), redlock(side, masters)
    lock, theirs = client.lock(name), other.lock(name)
    assert await side(lock.acquire(timeout=5, lease=30))
    (owner,) = holders(masters[0], name)
    await side(lock.release(keep_for=30))
    # each master keeps the slot, by no one: "<owner>:kept", as Lock.release(keep_for=)
    assert kept_fields(masters, name) == [{f"{owner}:kept": "1"}] * 3
    for master in masters:  # what a single-master status of each shows
        stats = await side(side.client(master.url).lock(name).statistics())
        assert stats.locked and stats.kept_by == owner and stats.holders == {}
    assert await side(lock.locked()) and not await side(lock.owned())
    assert 0 < await side(lock.ttl()) <= 30
    assert await side(lock.hold_count()) == 0
    # nobody takes it, the caller included
    assert not await side(theirs.acquire(blocking=False))
    assert not await side(lock.acquire(blocking=False))
    with pytest.raises(NotOwnedError):
        await side(lock.release())  # the kept slot is no one's hold
    # a force release clears it on every master; then anyone takes it at once
    assert await side(lock.force_release())
    assert held_on(masters, name) == []
    assert not await side(lock.locked())
    assert await side(theirs.acquire(blocking=False, lease=30))
    await side(theirs.release())


async def test_a_kept_lock_is_free_again_when_keep_for_ran_out(side, five, name):
    masters = five[:3]
    client, other = redlock(side, masters), redlock(side, masters)
    lock, theirs = client.lock(name), other.lock(name)
    assert await side(lock.acquire(timeout=5))  # watchdog-renewed: not renewed once released
    await side(lock.release(keep_for=1.5))
    assert not await side(theirs.acquire(blocking=False))
    assert await side(theirs.acquire(timeout=20, lease=30))  # after the keep, not before
    assert await side(theirs.owned())  # on a majority (a master may still have the kept slot
    # for a moment: the slots run out on each master's own clock)
    await side(theirs.release())


async def test_release_keep_for_is_judged_on_a_majority(side, private3, name):
    client, other = redlock(side, private3), redlock(side, private3)
    lock, theirs = client.lock(name), other.lock(name)
    assert await side(lock.acquire(timeout=5, lease=60))
    private3[2].pause()  # SIGSTOP: its call is not answered in time
    try:
        await side(lock.release(keep_for=60))  # kept on 2 of 3: a success
        assert [":kept" in next(iter(f)) for f in kept_fields(private3[:2], name)] == [True] * 2
        # kept on a majority: no other owner can have a majority
        assert not await side(theirs.acquire(blocking=False))
    finally:
        private3[2].resume()
    # the third master has the kept slot (if the late call ran) or the owner's hold, which
    # lasts until its lease runs out: taken either way
    (field,) = holders(private3[2], name)
    assert field.split(":kept")[0] == next(iter(holders(private3[0], name))).split(":kept")[0]
    assert not await side(theirs.acquire(blocking=False))
    assert await side(lock.force_release())
    assert await side(theirs.acquire(blocking=False, lease=30))
    await side(theirs.release())


async def test_release_keep_for_without_a_majority_is_a_quorum_error(side, private3, name):
    client = redlock(side, private3)
    lock = client.lock(name)
    assert await side(lock.acquire(timeout=5, lease=60))
    private3[1].pause()
    private3[2].pause()
    try:
        with pytest.raises(QuorumError) as caught:
            await side(lock.release(keep_for=60))
    finally:
        private3[1].resume()
        private3[2].resume()
    assert caught.value.quorum == 2
    assert ":kept" in next(iter(holders(private3[0], name)))


async def test_release_keep_for_refuses_what_it_cannot_keep(side, five, name):
    lock = redlock(side, five[:3]).lock(name)
    assert await side(lock.acquire(lease=30))
    with pytest.raises(InvalidArgumentError, match="keep_for"):
        await side(lock.release(keep_for=-1))
    assert await side(lock.acquire(lease=30))
    with pytest.raises(InvalidArgumentError, match="only its last release"):
        await side(lock.release(keep_for=5))  # a re-entered hold: nothing sent
    assert await side(lock.hold_count()) == 2
    await side(lock.release())
    await side(lock.release(keep_for=0))  # a plain release
    assert held_on(five[:3], name) == []
