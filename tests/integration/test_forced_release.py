"""A forced release the holder hears at once (issue #26 item 2), on real servers, each test on
the sync and asyncio side.

The watchdog's lease is set very long (600 s: its first round would come after 200 s), so
what tells the holder within the tests' bounds can only be the force release's message on its
client's own channel of the lock.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from redlease import LeaseLostError
from redlease._core.keys import LockKeys
from redlease._core.rwlock import rw_holder_prefix
from redlease.events import LockEvent

from .helpers import eventually

LONG = 600.0
"""A watchdog lease whose first renewal round (a third of it) comes long after any bound here."""

LAYOUTS = ["lock", "fair", "fair-redisson"]


def _lock(client: Any, kind: str, name: str, **kwargs: Any) -> Any:
    if kind == "lock":
        return client.lock(name, **kwargs)
    return client.fair_lock(
        name, layout="redisson" if kind == "fair-redisson" else "redlease", **kwargs
    )


class Seen:
    """What a holder was told: its ``on_lease_lost`` errors and its client's events."""

    def __init__(self) -> None:
        self.errors: list[LeaseLostError] = []
        self.events: list[LockEvent] = []
        self.told = threading.Event()

    def on_lost(self, error: LeaseLostError) -> None:
        self.errors.append(error)
        self.told.set()

    def on_event(self, event: LockEvent) -> None:
        if event.kind == "lease_lost":
            self.events.append(event)


def _channel(name: str, client: Any) -> str:
    """The holder's client's own channel of the lock (where a force release tells it)."""
    return LockKeys.for_name(name).holder(f"{client.id}:1")


async def _listening(url: str, channel: str) -> None:
    """Wait until a client listens on ``channel`` (the holder's subscription is made in the
    background after its acquire: a force release before it is confirmed is found by the
    watchdog's next round, 200 s away here)."""
    raw = redis.Redis.from_url(url)
    try:

        def numsub() -> int:
            return int(raw.pubsub_numsub(channel)[0][1])

        await eventually(lambda: numsub() > 0, timeout=10)
    finally:
        raw.close()


@pytest.mark.parametrize("kind", LAYOUTS)
async def test_a_force_release_is_heard_at_once(side, server, name, kind):
    seen = Seen()
    client = side.client(server.url, watchdog_timeout=LONG)
    client.add_listener(seen.on_event)
    lock = _lock(client, kind, name, on_lease_lost=seen.on_lost)
    assert await side(lock.acquire())
    token = lock.fencing_token
    await _listening(server.url, _channel(name, client))

    operator = side.client(server.url)
    # the CLI's way (a plain lock of the name) for every layout: a fair lock's holders too
    assert await side(operator.lock(name).force_release())

    await eventually(seen.told.is_set, timeout=20)
    [error] = seen.errors
    assert error.cause == "forced" and error.name == name
    assert lock.lease_lost
    [event] = seen.events
    assert event.cause == "forced" and event.fencing_token == token
    with pytest.raises(LeaseLostError) as raised:
        await side(lock.release())
    assert raised.value.cause == "forced"
    assert not lock.lease_lost


async def test_the_fair_lock_in_redissons_layout_tells_its_own_holder(side, server, name):
    """``fair_lock(layout="redisson").force_release()`` (Redisson's forceUnlock) tells too."""
    seen = Seen()
    client = side.client(server.url, watchdog_timeout=LONG)
    lock = _lock(client, "fair-redisson", name, on_lease_lost=seen.on_lost)
    assert await side(lock.acquire())
    await _listening(server.url, _channel(name, client))
    operator = side.client(server.url)
    assert await side(_lock(operator, "fair-redisson", name).force_release())
    await eventually(seen.told.is_set, timeout=20)
    assert [e.cause for e in seen.errors] == ["forced"]


async def test_a_late_or_repeated_message_never_touches_a_newer_hold(side, server, name):
    """A message about an earlier hold of the same owner (same owner field, its own token),
    one about another owner, a malformed one and a repeat are all ignored; only the message
    about the hold there now with its token is acted on. Messages on one channel arrive in
    the order they were sent, so once the real one was heard the others were too."""
    seen = Seen()
    client = side.client(server.url, watchdog_timeout=LONG)
    lock = client.lock(name, on_lease_lost=seen.on_lost)
    channel = _channel(name, client)
    raw = redis.Redis.from_url(server.url)
    operator = side.client(server.url)
    try:
        assert await side(lock.acquire())
        first = lock.fencing_token
        [owner] = (await side(lock.statistics())).holders
        await side(lock.release())
        assert await side(lock.acquire())
        second = lock.fencing_token
        assert second != first
        await _listening(server.url, channel)

        raw.publish(channel, f"lost {owner} {first}")  # late: about the earlier hold
        raw.publish(channel, f"lost {owner.rsplit(':', 1)[0]}:999 {second}")  # another owner
        raw.publish(channel, f"lost {owner}")  # malformed: no token
        raw.publish(channel, f"lost {owner} 0")  # malformed: no hold has token 0
        assert await side(operator.lock(name).force_release())  # the real one, sent last
        await eventually(seen.told.is_set, timeout=20)
        assert [e.cause for e in seen.errors] == ["forced"]
        with pytest.raises(LeaseLostError):
            await side(lock.release())

        # a newer hold, then the same message again (a duplicate arriving late)
        seen.told.clear()
        assert await side(lock.acquire())
        third = lock.fencing_token
        await _listening(server.url, channel)
        raw.publish(channel, f"lost {owner} {second}")
        raw.publish(channel, f"lost {owner} {second}")
        assert await side(operator.lock(name).force_release())  # about the third: heard
        await eventually(seen.told.is_set, timeout=20)
        assert len(seen.errors) == 2
        assert not await side(lock.locked())
        assert third not in (first, second)
    finally:
        raw.close()


async def test_a_hold_that_is_not_forced_is_not_told(side, server, name):
    """A message never marks a hold lost that is still there (one with its token): the
    hold stays, and its release succeeds."""
    seen = Seen()
    client = side.client(server.url, watchdog_timeout=LONG)
    lock = client.lock(name, on_lease_lost=seen.on_lost)
    other = client.lock(f"{name}-other", on_lease_lost=seen.on_lost)
    operator = side.client(server.url)
    assert await side(lock.acquire())
    assert await side(other.acquire())
    await _listening(server.url, _channel(name, client))
    await _listening(server.url, _channel(f"{name}-other", client))
    assert await side(operator.lock(f"{name}-other").force_release())
    await eventually(seen.told.is_set, timeout=20)
    assert [e.name for e in seen.errors] == [f"{name}-other"]
    assert not lock.lease_lost
    await side(lock.release())  # still ours


async def test_a_server_restart_is_found_when_the_subscriber_reconnects(side, private_server, name):
    """The server restarts empty: the holder's subscriber reconnects and subscribes again,
    and that has the watchdog check the holds at once (not 200 s later): the hold is found
    gone."""
    seen = Seen()
    client = side.client(private_server.url, watchdog_timeout=LONG)
    lock = client.lock(name, on_lease_lost=seen.on_lost)
    assert await side(lock.acquire())
    await _listening(private_server.url, _channel(name, client))
    private_server.restart()
    await eventually(seen.told.is_set, timeout=30)
    [error] = seen.errors
    assert error.cause != "forced"  # the watchdog found it gone: nobody force-released it
    assert lock.lease_lost
    with pytest.raises(LeaseLostError):
        await side(lock.release())


@pytest.mark.parametrize("layout", ["redlease", "redisson"])
@pytest.mark.parametrize("side_name", ["read", "write"])
async def test_a_read_write_lock_tells_its_holders(side, server, name, layout, side_name):
    """A read-write lock's force release (either side, either layout) tells each holder of
    that side at once; a reader of another client is told too, with its own token."""
    seen, other_seen = Seen(), Seen()
    client = side.client(server.url, watchdog_timeout=LONG)
    other = side.client(server.url, watchdog_timeout=LONG)

    def lock_of(c: Any, on_lost: Any = None) -> Any:
        rw = c.rw_lock(name, layout=layout, on_lease_lost=on_lost)
        return rw.read_lock() if side_name == "read" else rw.write_lock()

    holder = lock_of(client, seen.on_lost)
    assert await side(holder.acquire())
    channels = [rw_holder_prefix(name) + client.id]
    if side_name == "read":  # a second reader, of another client
        reader = lock_of(other, other_seen.on_lost)
        assert await side(reader.acquire())
        channels.append(rw_holder_prefix(name) + other.id)
    for channel in channels:
        await _listening(server.url, channel)

    operator = side.client(server.url)
    assert await side(lock_of(operator).force_release())
    await eventually(seen.told.is_set, timeout=20)
    assert [e.cause for e in seen.errors] == ["forced"]
    assert holder.lease_lost
    with pytest.raises(LeaseLostError):
        await side(holder.release())
    if side_name == "read":
        await eventually(other_seen.told.is_set, timeout=20)
        assert [e.cause for e in other_seen.errors] == ["forced"]
