"""Semaphores whose replies are lost on the way back (the server ran the request, the client
never heard): nothing may be counted twice, no permit may be lost for good, and a permit may be
reported lost only when it really is. Each test on the sync and asyncio side, over a
``TcpProxy`` that swallows the replies of one script (issue #11, defects 5 and 6)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from redlease import LeaseLostError, ServerUnavailableError
from redlease._core import lease_semaphore as lease_core
from redlease._core import semaphore as core
from redlease._core.keys import LeaseSemaphoreKeys, SemaphoreKeys
from redlease.testing import TcpProxy, free_port

from .helpers import eventually, reply_int

ACQUIRE_SHA = core.SEMAPHORE_ACQUIRE.sha.encode()
UNDO_SHA = core.SEMAPHORE_UNDO.sha.encode()
DRAIN_SHA = core.SEMAPHORE_DRAIN.sha.encode()
LEASE_ACQUIRE_SHA = lease_core.LEASE_SEMAPHORE_ACQUIRE.sha.encode()
LEASE_RELEASE_SHA = lease_core.LEASE_SEMAPHORE_RELEASE.sha.encode()


@pytest.fixture
async def proxy(server: Any) -> AsyncIterator[TcpProxy]:
    """A proxy to the shared server, whose scripts are loaded first: a dropped reply is then
    always the script's own (not a NOSCRIPT answer)."""
    raw = redis.Redis.from_url(server.url)
    for script in (*core.SCRIPTS, *lease_core.SCRIPTS):
        raw.script_load(script.source)
    raw.close()
    with TcpProxy(("127.0.0.1", server.port)) as p:
        yield p


def lose_replies(proxy: TcpProxy, sha: bytes, times: int = 2) -> None:
    """Swallow the next ``times`` replies to ``sha`` (a call is sent at most twice)."""
    for _ in range(times):
        proxy.drop_next_reply(sha)


# --- the counting semaphore (defect 6) ------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, 5])
async def test_acquire_whose_replies_were_lost_gives_its_permits_back(side, proxy, name, timeout):
    """The server took the permits but the caller got ``ServerUnavailableError``: the permits
    come back before the error reaches the caller, so the semaphore keeps its capacity."""
    sem = side.client(proxy.url).semaphore(name)
    assert await side(sem.try_set_permits(2))
    for _ in range(3):  # every network blip used to cost the semaphore its permits for good
        lose_replies(proxy, ACQUIRE_SHA)
        with pytest.raises(ServerUnavailableError):
            await side(sem.acquire(2, timeout=timeout))
        assert await side(sem.available()) == 2
    assert await side(sem.acquire(2, timeout=1))
    await side(sem.release(2))
    assert await side(sem.available()) == 2


async def test_drain_whose_replies_were_lost_gives_its_permits_back(side, proxy, name):
    """``drain_permits()`` took every permit but the caller never heard how many: they come
    back before the error reaches the caller (the count is in the drain's receipt)."""
    sem = side.client(proxy.url).semaphore(name)
    assert await side(sem.try_set_permits(3))
    lose_replies(proxy, DRAIN_SHA)
    with pytest.raises(ServerUnavailableError):
        await side(sem.drain_permits())
    assert await side(sem.available()) == 3
    assert await side(sem.drain_permits()) == 3
    assert await side(sem.available()) == 0
    assert await side(sem.drain_permits()) == 0
    await side(sem.release(3))


async def test_undo_that_cannot_reach_the_server_is_retried_by_the_watchdog(side, proxy, name):
    """The undo's replies are lost too: it is kept and retried until it is known to have run
    (here it ran at once; the retries find it done and change nothing)."""
    client = side.client(proxy.url, watchdog_timeout=0.6)
    sem = client.semaphore(name)
    assert await side(sem.try_set_permits(3))
    lose_replies(proxy, ACQUIRE_SHA)
    lose_replies(proxy, UNDO_SHA)
    undos = [proxy.drop_next_reply(UNDO_SHA)]  # and the watchdog's first retry's
    with pytest.raises(ServerUnavailableError):
        await side(sem.acquire(2, timeout=0))
    await eventually(lambda: undos[0].is_set())  # the watchdog sent it again
    await eventually(lambda: not _pending_undos(client))  # and then heard that it ran
    assert await side(sem.available()) == 3


async def test_undo_that_cannot_reach_the_server_gives_the_permits_back_later(side, server, name):
    """An acquire ran (its permits are taken) and the server is unreachable when its undo is
    sent: the undo is kept, and the watchdog sends it once the server is back."""
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        client = side.client(proxy.url, watchdog_timeout=0.6)
        sem = client.semaphore(name)
        keys = SemaphoreKeys.for_name(name)
        assert await side(sem.try_set_permits(2))
        take = core.acquire_call(keys, "some-client:1", 2, "request", register=False)
        assert int((await side(client._call(take, name)))[0]) == core.GRANTED  # reply "lost"
        proxy.retarget(("127.0.0.1", free_port()))  # nothing listens there: the server is down
        proxy.cut()
        await side(_keeper(side, client).undo(core.undo_call(keys, 2, "request"), name))
        raw = redis.Redis.from_url(server.url)
        assert reply_int(raw.get(name)) == 0 and _pending_undos(client) == 1
        proxy.retarget(("127.0.0.1", server.port))  # back
        await eventually(lambda: reply_int(raw.get(name)) == 2)
        await eventually(lambda: _pending_undos(client) == 0)
        raw.close()


async def test_undo_reaching_the_server_first_makes_the_late_acquire_take_nothing(
    side, server, name
):
    """An undo may overtake the acquire it undoes: the late acquire then takes nothing; an
    undo of a granted acquire gives its permits back once, however often it is sent."""
    client = side.client(server.url)
    sem = client.semaphore(name)
    keys = SemaphoreKeys.for_name(name)
    assert await side(sem.try_set_permits(3))
    undo = core.undo_call(keys, 2, "late-request")
    assert [int(v) for v in await side(client._call(undo, name))] == [0, 3]
    late = core.acquire_call(keys, "some-client:1", 2, "late-request", register=False)
    assert int((await side(client._call(late, name)))[0]) == core.UNDONE
    assert await side(sem.available()) == 3
    take = core.acquire_call(keys, "some-client:1", 2, "request", register=False)
    assert int((await side(client._call(take, name)))[0]) == core.GRANTED
    assert await side(sem.available()) == 1
    back = core.undo_call(keys, 2, "request")
    assert [int(v) for v in await side(client._call(back, name))] == [1, 3]
    for _ in range(2):  # sent again: nothing more comes back, and a late copy takes nothing
        assert int((await side(client._call(back, name)))[0]) == 0
        assert int((await side(client._call(take, name)))[0]) == core.UNDONE
    assert await side(sem.available()) == 3


def _pending_undos(client: Any) -> int:
    return int(client._permit_keeper.get().table.undos_pending)


# --- the lease semaphore (defect 5) ---------------------------------------------------------


async def test_retried_release_after_a_lost_reply_is_the_same_release(side, proxy, name):
    """``release(permit)`` ran but its replies were lost: the permit is not renewed nor
    reported lost meanwhile, and the retried release succeeds (the server recognises it)."""
    lost: list[Exception] = []
    # 1.2 s: the other permit must never be reported lost, and with 0.6 s its renewal calls
    # were bounded by 0.2 s, tight on a loaded machine
    client = side.client(proxy.url, watchdog_timeout=1.2)
    sem = client.lease_semaphore(name, on_lease_lost=lost.append)
    assert await side(sem.try_set_permits(2))
    permit = await side(sem.acquire(timeout=1))
    other = await side(sem.acquire(timeout=1))  # held all along: shows the watchdog's rounds
    lose_replies(proxy, LEASE_RELEASE_SHA)
    with pytest.raises(ServerUnavailableError):
        await side(sem.release(permit))
    raw = redis.Redis.from_url(proxy.url)
    leases = f"{{{name}}}:timeout"
    assert raw.zscore(leases, bytes.fromhex(permit)) is None  # it did run
    for _ in range(3):  # three watchdog rounds renew the other permit
        renewed = raw.zscore(leases, bytes.fromhex(other))

        def renewed_again(r: Any = renewed) -> bool:
            score = raw.zscore(leases, bytes.fromhex(other))
            assert score is not None
            return score > r

        await eventually(renewed_again)
    assert lost == []  # never reported lost: it was released, not lost
    await side(sem.release(permit))  # the retry: no LeaseLostError
    await side(sem.release(other))
    assert await side(sem.available()) == 2
    assert lost == []
    raw.close()


async def test_retried_release_that_never_ran_releases(side, server, name):
    """A release whose outcome is unknown may not have run: the retry then gives the permit
    back (same request id, no receipt yet)."""
    client = side.client(server.url)
    sem = client.lease_semaphore(name)
    assert await side(sem.try_set_permits(1))
    permit = await side(sem.acquire(timeout=1))
    kept = _keeper(side, client)
    first = kept.table.begin_release(permit, 0.0)  # sent, and nothing came back
    assert kept.table.begin_release(permit, 0.0) == first  # a retry is the same request
    await side(sem.release(permit))
    assert await side(sem.available()) == 1
    assert kept.table.get(permit) is None


async def test_lease_acquire_whose_replies_were_lost_gives_its_permit_back(side, proxy, name):
    """The permit was taken but the caller got ``ServerUnavailableError``: it comes back at
    once, not only when its lease runs out."""
    sem = side.client(proxy.url).lease_semaphore(name, lease=60)
    assert await side(sem.try_set_permits(1))
    lose_replies(proxy, LEASE_ACQUIRE_SHA)
    with pytest.raises(ServerUnavailableError):
        await side(sem.acquire(timeout=0))
    stats = await side(sem.statistics())
    assert (stats.available, stats.holders) == (1, 0)
    permit = await side(sem.acquire(timeout=0))
    assert permit is not None
    await side(sem.release(permit))


def _keeper(side: Any, client: Any) -> Any:
    return client._permit_keeper.get()


def _in_background(side: Any, call: Any) -> asyncio.Future[Any]:
    """``call()`` running meanwhile: a task (asyncio) or a thread (sync)."""
    if side.is_async:
        return asyncio.ensure_future(call())
    return asyncio.ensure_future(asyncio.to_thread(call))


@pytest.mark.parametrize("many", [False, True], ids=["behind_101_expired", "150_at_once"])
async def test_a_retry_landing_after_its_own_lease_ran_out_loses_no_permit(
    side, server, name, many
):
    """Issue #36, 1: an acquire (lease 1 s) ran, its reply was lost and the link froze; its
    resend lands once every lease taken so far ran out: behind 101 abandoned leases (one
    permit), or with 150 of its own (more than the 100 expired leases a call gives back). It
    is a fresh acquire: once every lease ran out, all 200 permits can be taken at once (it
    used to leave 199, or 150, for good)."""
    raw = redis.Redis.from_url(server.url)
    for script in (*core.SCRIPTS, *lease_core.SCRIPTS):  # a dropped reply is then the acquire's own
        raw.script_load(script.source)
    leases = LeaseSemaphoreKeys.for_name(name).leases

    def all_ran_out() -> bool:
        seconds, micros = raw.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return bool(raw.zcount(leases, "-inf", now_ms) == raw.zcard(leases))

    sem = side.client(server.url).lease_semaphore(name)
    assert await side(sem.try_set_permits(200))
    if not many:  # holders that crashed: their leases end just before the retried one's
        for permit in await side(sem.acquire_many(101, timeout=1, lease=0.5)):
            sem.disown(permit)
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        late = side.client(proxy.url).lease_semaphore(name)
        dropped = proxy.drop_next_reply(LEASE_ACQUIRE_SHA, then_freeze=True)
        if many:
            taking = _in_background(side, lambda: late.acquire_many(150, timeout=20, lease=1))
        else:
            taking = _in_background(side, lambda: late.acquire(timeout=20, lease=1))
        assert await asyncio.to_thread(dropped.wait, 10), "the acquire never reached the server"
        await eventually(all_ran_out)  # the link stays frozen until every lease ran out
        proxy.thaw()
        try:
            got = await asyncio.wait_for(taking, 30)
        except ServerUnavailableError:
            got = None
        try:  # give the retried acquire's permits back, unless their 1 s lease ran out
            if isinstance(got, list):
                await side(late.release_many(got))
            elif got is not None:
                await side(late.release(got))
        except LeaseLostError:
            pass  # (a loaded machine: more than a second since it came back; they are free)
        await eventually(all_ran_out)
    ids = await side(sem.acquire_many(200, timeout=5, lease=5))
    assert ids is not None and len(ids) == 200, "permits lost for good"
    assert (await side(sem.statistics())).permits == 200
    await side(sem.release_many(ids))
    raw.close()
