"""Receipts and undos of the semaphores and the latch against the client's windows (issue #23,
defect 6 and classes (a) and (c)), on real servers, sync and asyncio.

A receipt lives from when its request RAN; the client sends retries and undos of a request
within ``WINDOWS.unsure_for`` of its FIRST send. Every undo the client sends must therefore
still find the receipt of an acquire or a drain that ran, and an undo that cannot tell whether
its request ran (it could not be sent in time, or found nothing too late) is reported as "may
stay taken" (WARNING naming the semaphore, and a ``permits_may_stay_taken`` event), never
counted as done. The windows are lowered here (``receipts.WINDOWS``) so that nothing waits 45 s;
the production values are checked on the server as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redlease import ServerUnavailableError
from redlease._core import latch as latch_core
from redlease._core import lease_semaphore as lease_core
from redlease._core import receipts, waiting
from redlease._core import semaphore as core
from redlease._core.keys import LeaseSemaphoreKeys, SemaphoreKeys
from redlease.testing import TcpProxy

from .helpers import eventually

ACQUIRE_SHA = core.SEMAPHORE_ACQUIRE.sha.encode()
DRAIN_SHA = core.SEMAPHORE_DRAIN.sha.encode()
SMALL = receipts.Windows(unsure_for=2.0, margin=1.0)
"""The client sends retries and undos within 2 s of a request's first send; receipts live 3 s."""
MAY_STAY_TAKEN = "permits_may_stay_taken"


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> receipts.Windows:
    monkeypatch.setattr(receipts, "WINDOWS", SMALL)
    return SMALL


@pytest.fixture
def raw(server: Any) -> Iterator[redis.Redis]:
    """A plain client of the server, with the scripts loaded (so that a dropped reply is the
    script's own, not a NOSCRIPT answer)."""
    client = redis.Redis.from_url(server.url)
    for script in (
        *core.SCRIPTS,
        *lease_core.SCRIPTS,
        waiting.SEMAPHORE_LEAVE,
        *latch_core.SCRIPTS,
    ):
        client.script_load(script.source)
    yield client
    client.close()


def _keeper(side: Any, client: Any) -> Any:
    return client._permit_keeper.get()


def _client(side: Any, proxy: TcpProxy) -> tuple[Any, list[Any]]:
    """A client through ``proxy`` whose calls give up after 0.5 s and whose watchdog retries
    kept undos every 0.2 s; and the list its events go to."""
    client = side.client(
        proxy.url, socket_timeout=0.5, socket_connect_timeout=0.5, watchdog_timeout=0.6
    )
    events: list[Any] = []
    client.add_listener(events.append)
    return client, events


def _reported(events: list[Any], name: str) -> bool:
    return any(e.kind == MAY_STAY_TAKEN and e.name == name for e in events)


def _may_stay_taken(registry: Any, name: str) -> float | None:
    return registry.get_sample_value("redlease_permits_may_stay_taken_total", {"lock": name})


def _drop_then_silence(proxy: TcpProxy, sha: bytes) -> threading.Event:
    """Once the server ran the next command with ``sha``, its reply is dropped and the network
    goes silent in the same instant (so the client's one resend hangs too, however soon it
    comes, and the call fails with its outcome unknown)."""
    return proxy.drop_next_reply(sha, then_freeze=True)


async def _lose_a_grant(side: Any, sem: Any, what: str, proxy: TcpProxy) -> tuple[float, float]:
    """Run an acquire (or a drain) of 2 permits that the server grants while its replies are
    lost; returns when it was called (before its first send) and when it gave up."""
    _drop_then_silence(proxy, ACQUIRE_SHA if what == "acquire" else DRAIN_SHA)
    started = time.monotonic()
    with pytest.raises(ServerUnavailableError):
        if what == "acquire":
            await side(sem.acquire(2, timeout=0))
        else:
            await side(sem.drain_permits())
    return started, time.monotonic()


WIDE = receipts.Windows(unsure_for=4.0, margin=2.0)
"""Room for the end of a window on a loaded machine: the last second of a 4 s window holds
five of the watchdog's retries (every 0.2 s) however late each comes."""


@pytest.mark.parametrize("what", ["acquire", "drain"])
async def test_an_undo_sent_at_the_end_of_its_window_still_finds_the_receipt(
    side, server, raw, name, monkeypatch, what
):
    """Defect 6: the grant's receipt was written when the acquire ran, and the client's undo
    of it is kept and retried while the server cannot be reached. The network comes back just
    before the client's last retry of the undo: that undo still finds the receipt and gives
    the permits back (before the fix the undo was retried for the whole window counted from
    when the client gave up, past the receipt, and the permits were lost for good, without a
    word)."""
    monkeypatch.setattr(receipts, "WINDOWS", WIDE)
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        client, events = _client(side, proxy)
        sem = client.semaphore(name)
        assert await side(sem.try_set_permits(2))
        started, gave_up = await _lose_a_grant(side, sem, what, proxy)
        assert int(raw.get(name)) == 0  # the server took them
        kept = _keeper(side, client)
        (pending,) = kept.table._undos  # the undo could not be sent: kept for the watchdog
        # the window counts from the send, not from when the client gave up: that came at least
        # a socket timeout (0.5 s) after the send (started + 0.2 s relied on a quick machine)
        assert started <= pending.since <= gave_up - 0.5
        # the link stays silent until the last second of the undo's window (its last retries)
        await asyncio.sleep(max(0.0, pending.until - 1.0 - time.monotonic()))
        proxy.cut()
        proxy.thaw()
        await eventually(lambda: kept.table.undos_pending == 0, timeout=5)
        assert int(raw.get(name)) == 2  # the permits came back
        assert not _reported(events, name)
        assert await side(sem.acquire(2, timeout=0))
        await side(sem.release(2))


async def test_an_undo_that_never_reaches_the_server_is_reported(
    side, server, raw, name, windows, caplog
):
    """The server is unreachable for the whole window: the undo is given up, and said so
    (WARNING naming the semaphore, an event, a metric): the permits may stay taken, and they
    do."""
    prometheus_client = pytest.importorskip("prometheus_client")
    from redlease.metrics import PrometheusMetrics

    registry = prometheus_client.CollectorRegistry()
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        client, events = _client(side, proxy)
        client.add_listener(PrometheusMetrics(registry, per_lock=True))
        sem = client.semaphore(name)
        assert await side(sem.try_set_permits(2))
        with caplog.at_level(logging.WARNING, logger="redlease"):
            await _lose_a_grant(side, sem, "acquire", proxy)
            kept = _keeper(side, client)
            await eventually(lambda: kept.table.undos_pending == 0, timeout=windows.unsure_for + 3)
            await eventually(lambda: _reported(events, name), timeout=10)
            # the listeners run one after the other on the watchdog's thread (sync side): the
            # metrics listener, added after the events list, counts a moment later
            await eventually(lambda: (_may_stay_taken(registry, name) or 0) >= 1, timeout=10)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any(name in r.getMessage() and "may stay taken" in r.getMessage() for r in warnings)
        assert _may_stay_taken(registry, name) == 1
        proxy.cut()
        proxy.thaw()
        assert int(raw.get(name)) == 0  # they did stay taken: the report was due


async def test_an_undo_that_lands_too_late_to_tell_is_reported_not_counted_done(
    side, server, raw, name, windows
):
    """An undo that finds no receipt proves its request never ran only while that receipt
    would still be there. Landing later it cannot tell (the permits may have been taken and
    the receipt gone): reported, never counted as done. Landing in time, or finding the
    grant, it is done without a word."""
    client = side.client(server.url)
    events: list[Any] = []
    client.add_listener(events.append)
    assert await side(client.semaphore(name).try_set_permits(3))
    keys = SemaphoreKeys.for_name(name)
    kept = _keeper(side, client)
    now = time.monotonic()
    await side(kept.undo(core.undo_call(keys, 1, "never-ran"), name, now))
    assert not _reported(events, name)  # in time: it never ran, and now never will
    await side(kept.undo(core.undo_call(keys, 1, "ran-long-ago"), name, now - 10))
    assert _reported(events, name)  # too late to tell
    events.clear()
    take = core.acquire_call(keys, "some-client:1", 2, "granted", register=False)
    assert int((await side(client._call(take, name)))[0]) == core.GRANTED
    await side(kept.undo(core.undo_call(keys, 2, "granted"), name, now - 10))
    assert not _reported(events, name) and int(raw.get(name)) == 3  # found it: given back
    assert kept.table.undos_pending == 0


async def test_a_waiting_acquire_whose_grant_was_lost_never_loses_a_permit_silently(
    side, server, raw, name, windows
):
    """A waiting acquire's try is granted but its reply is lost, and the server stays
    unreachable for longer than the try's receipt lives (but less than the waiter rides
    out). The waiter sends no try past the first half of the window (a later one would find
    no receipt and take or wait anew, the first grant lost for good without a word): it gives
    up, and its undo, which cannot land in time either, is reported."""
    holder = side.client(server.url)
    other = holder.semaphore(name)
    assert await side(other.try_set_permits(1))
    assert await side(other.acquire(1, timeout=0))  # the one permit is taken
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        client, events = _client(side, proxy)
        sem = client.semaphore(name)
        outcome: list[Any] = []

        async def wait() -> None:
            try:
                result: Any = await side(sem.acquire(1, timeout=8))
            except ServerUnavailableError as exc:
                result = exc
            outcome.extend((result, time.monotonic()))

        def in_thread() -> None:
            asyncio.run(wait())

        waiter: Any
        if side.is_async:
            waiter = asyncio.get_running_loop().create_task(wait())
        else:
            waiter = threading.Thread(target=in_thread, daemon=True)
            waiter.start()
        keys = SemaphoreKeys.for_name(name)
        await eventually(lambda: raw.zcard(keys.waiters) == 1)
        # in line, and listening (not a pause that a loaded machine may outlast): the release
        # below wakes it, rather than its next try finding the permit on its own
        await eventually(lambda: raw.pubsub_numsub(keys.channel)[0][1] >= 1, timeout=10)
        # the try runs: nothing reaches the server from then on
        dropped = _drop_then_silence(proxy, ACQUIRE_SHA)
        await side(other.release(1))  # wakes the waiter: its try is granted, the reply lost
        await eventually(dropped.is_set, timeout=5)
        lost_at = time.monotonic()
        # the network comes back after the receipt is gone, within the waiter's tolerance
        await asyncio.sleep(lost_at + windows.receipt_ms / 1000 + 0.3 - time.monotonic())
        proxy.cut()
        proxy.thaw()
        await eventually(lambda: outcome, timeout=10)
        if side.is_async:
            await waiter
        else:
            waiter.join(5)
        kept = _keeper(side, client)
        await eventually(lambda: kept.table.undos_pending == 0, timeout=10)
        # an undo dropped past its window leaves the table first, and its report goes out a
        # moment later (sync side: on the watchdog's thread): give the report that time too
        with contextlib.suppress(AssertionError):
            await eventually(lambda: _reported(events, name), timeout=10)
        held = 1 if outcome[0] is True else 0
        # no permit lost without a word: the one permit is free or held by the waiter, or the
        # loss of the one taken by the lost grant was said
        assert int(raw.get(name)) + held == 1 or _reported(events, name), outcome
        # here: the waiter gave up within the window (no try sent after it), and nothing
        # could reach the server in time to undo the grant: said so
        assert isinstance(outcome[0], ServerUnavailableError)
        assert outcome[1] - lost_at < windows.unsure_for
        assert _reported(events, name)


@pytest.mark.parametrize("kind", ["semaphore", "lease_semaphore", "latch"])
async def test_a_retried_try_set_is_recognised_as_the_call_that_set(side, server, raw, name, kind):
    """Class (a): "set if never set" sent again after a lost reply (same request) answers
    True, as the first did: it was that call that set it. Another call answers False. A
    retried arming of a latch that was counted down to zero meanwhile does not arm it again."""
    client = side.client(server.url)
    if kind == "semaphore":
        keys: Any = SemaphoreKeys.for_name(name)

        def op(rid: str) -> Any:
            return core.try_set_permits(keys, 1, rid)
    elif kind == "lease_semaphore":
        keys = LeaseSemaphoreKeys.for_name(name)

        def op(rid: str) -> Any:
            return lease_core.lease_try_set_permits(keys, 1, rid)
    else:
        keys = latch_core.LatchKeys.for_name(name)

        def op(rid: str) -> Any:
            return latch_core.try_set_count(keys, 1, request_id=rid)

    assert await side(client._run(op("first"), name)) is True
    assert await side(client._run(op("first"), name)) is True  # the retry of that call
    assert await side(client._run(op("second"), name)) is False  # another call
    if kind == "latch":
        await side(client.latch(name).count_down())  # open now
        assert await side(client._run(op("first"), name)) is True
        assert await side(client.latch(name).count()) == 0  # not armed again
        assert await side(client._run(op("third"), name)) is True  # a new call arms it


async def test_every_receipt_lives_past_the_clients_window(side, server, raw, name):
    """Class (c), with the production windows: every receipt (and an undo's tombstone) is
    kept on the server longer than the client's window for retries and undos, counted from
    the request's first send (which comes before the request runs)."""
    client = side.client(server.url)
    floor = receipts.WINDOWS.unsure_for * 1000
    sem = SemaphoreKeys.for_name(name)
    lsem = LeaseSemaphoreKeys.for_name(name + ":lease")
    gate = latch_core.LatchKeys.for_name(name + ":latch")
    ops = [
        (core.try_set_permits(sem, 5, "set"), sem.receipt("set")),
        (core.add_permits(sem, 1, "add"), sem.receipt("add")),
        (core.acquire(sem, "o:1", permits=1, timeout=0, request_id="acq"), sem.receipt("acq")),
        (core.release(sem, permits=1, request_id="rel"), sem.receipt("rel")),
        (core.drain_permits(sem, "drain"), sem.receipt("drain")),
        (lease_core.lease_try_set_permits(lsem, 2, "lset"), lsem.receipt("lset")),
        (lease_core.lease_add_permits(lsem, 1, "ladd"), lsem.receipt("ladd")),
        (latch_core.try_set_count(gate, 2, request_id="arm"), gate.receipt("arm")),
        (latch_core.count_down(gate, request_id="down"), gate.receipt("down")),
        (latch_core.delete(gate, request_id="del"), gate.receipt("del")),
    ]
    for op, receipt in ops:
        await side(client._run(op, name))
        assert floor < raw.pttl(receipt) <= receipts.WINDOWS.receipt_ms, receipt
    await side(client._call(core.undo_call(sem, 1, "acq"), name))
    assert floor < raw.pttl(sem.receipt("acq")) <= receipts.WINDOWS.receipt_ms  # the tombstone
    permit = await side(client.lease_semaphore(name + ":lease").acquire(timeout=0))
    assert (
        await side(client._run(lease_core.lease_release(lsem, permit, request_id="lrel"), name))
        == 1
    )
    assert floor < raw.pttl(lsem.receipt("lrel")) <= receipts.WINDOWS.receipt_ms
