"""A release hands the lock to the waiter whose turn it is: outright (with a short first lease
that the watchdog lengthens) for a waiter whose lease the watchdog renews, as a reservation
for one with a lease of its own or one not seen lately. Each test on a real server."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import redis

from redlease._core import scripts
from redlease._core.keys import LockKeys
from redlease.testing import RedisServer

from .helpers import eventually, reply_str_hash


class _Waiter:
    """A waiter that acquires in a task (asyncio) or a thread (sync), the owner of its hold,
    keeps it until told to release, and reports what it saw."""

    def __init__(self, side: Any, lock: Any, **acquire: Any) -> None:
        self.acquired: bool | None = None
        self.token: int | None = None
        if side.is_async:
            self._go = asyncio.Event()
            self._task = asyncio.ensure_future(self._async(lock, acquire))
        else:
            self._event = threading.Event()
            self._thread = threading.Thread(target=self._sync, args=(lock, acquire))
            self._thread.start()

    async def _async(self, lock: Any, acquire: dict[str, Any]) -> None:
        self.acquired = await lock.acquire(**acquire)
        self.token = lock.fencing_token
        await self._go.wait()
        await lock.release()

    def _sync(self, lock: Any, acquire: dict[str, Any]) -> None:
        self.acquired = lock.acquire(**acquire)
        self.token = lock.fencing_token
        self._event.wait(30)
        lock.release()

    async def holding(self) -> bool:
        await eventually(lambda: self.acquired is not None, timeout=30)
        return bool(self.acquired)

    async def release(self) -> None:
        if hasattr(self, "_task"):
            self._go.set()
            await asyncio.wait_for(self._task, 30)
        else:
            self._event.set()
            await eventually(lambda: not self._thread.is_alive(), timeout=30)


def _listen(raw: redis.Redis, channel: str) -> Any:
    pubsub = raw.pubsub()
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    return pubsub


def _published(raw: redis.Redis, pubsub: Any, channel: str) -> list[str]:
    """Everything published on ``channel`` so far (a marker closes the list)."""
    raw.publish(channel, "marker")
    out: list[str] = []
    while not out or out[-1] != "marker":
        message = pubsub.get_message(timeout=5)
        assert message is not None
        out.append(message["data"])
    return out[:-1]


def _holder(raw: redis.Redis, name: str) -> tuple[str, int]:
    fields = {
        k: v for k, v in reply_str_hash(raw.hgetall(name)).items() if not k.startswith("redlease:")
    }
    ((owner, count),) = fields.items()
    return owner, int(count)


async def test_a_release_hands_the_lock_to_a_watched_waiter(side, server, name):
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    holder = side.client(server.url).lock(name)
    waiter_client = side.client(server.url)
    waiter = waiter_client.lock(name)
    assert await side(holder.acquire())
    first_token = holder.fencing_token
    waiting = _Waiter(side, waiter, timeout=30)
    await eventually(lambda: raw.zcard(keys.line) == 1)
    unlock = _listen(raw, keys.channel)
    own = keys.handover_prefix + waiter_client.id  # the waiter's client's own channel
    await eventually(lambda: raw.pubsub_numsub(own) == [(own, 1)])
    mine = _listen(raw, own)
    await side(holder.release())
    assert await waiting.holding()
    owner, count = _holder(raw, name)
    assert count == 1 and waiting.token is not None and waiting.token > first_token
    # the waiter's owner field, its fencing token and its first lease, in one message, on
    # its client's own channel: no other waiting process hears of it
    # and the wait id of the acquire call it is for (the one in its place in line)
    (message,) = _published(raw, mine, own)
    assert message.startswith(f"{owner} {waiting.token} 1000 ")
    assert message.rsplit(" ", 1)[1] == raw.hget(name, "redlease:wait")
    assert _published(raw, unlock, keys.channel) == []
    mine.close()
    unlock.close()
    assert raw.zcard(keys.line) == 0  # it left the line with the lock
    # the short first lease is lengthened to the watchdog's lease long before it runs out
    await eventually(lambda: raw.pttl(name) > 1000, timeout=5)
    await waiting.release()
    assert not await side(waiter.locked())
    raw.close()


async def test_a_waiter_with_a_lease_of_its_own_is_handed_the_lock_with_it(side, server, name):
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    holder = side.client(server.url).lock(name)
    waiter_client = side.client(server.url)
    waiter = waiter_client.lock(name)
    assert await side(holder.acquire())
    waiting = _Waiter(side, waiter, timeout=30, lease=20)
    await eventually(lambda: raw.zcard(keys.line) == 1)
    own = keys.handover_prefix + waiter_client.id
    await eventually(lambda: raw.pubsub_numsub(own) == [(own, 1)])
    pubsub = _listen(raw, own)
    await side(holder.release())
    assert await waiting.holding()
    owner, _ = _holder(raw, name)
    # the grant in the message, with the lease the waiter asked for: no further request
    (message,) = _published(raw, pubsub, own)
    assert message.startswith(f"{owner} {waiting.token} 20000 ")
    pubsub.close()
    assert 19_000 < raw.pttl(name) <= 20_000
    await waiting.release()
    raw.close()


def _run(raw: redis.Redis, script: scripts.Script, keys: tuple[str, ...], *args: Any) -> Any:
    return raw.eval(script.source.decode(), len(keys), *keys, *args)


def _queue(raw: redis.Redis, keys: LockKeys, owner: str, lease: str = "w30000") -> None:
    """``owner`` tries, finds the lock held and takes a place in line (``lease``: "w<ms>" for a
    watched waiter, else the ms of its own lease)."""
    reply = _run(
        raw,
        scripts.LOCK_ACQUIRE,
        (keys.name, keys.line, keys.places, keys.fence),
        30_000,
        owner,
        0,
        1,
        0,
        lease,
        "wait-1",
        keys.handover_prefix,
        "publish",
    )
    assert reply[0] == 0


def _release(raw: redis.Redis, keys: LockKeys, owner: str) -> None:
    reply = _run(
        raw,
        scripts.LOCK_RELEASE,
        (keys.name, keys.channel, keys.receipts, keys.line, keys.places, keys.fence),
        owner,
        1,
        "request-1",
        1000,
        "publish",
        keys.handover_prefix,
        0,
    )
    assert reply == [1, 0]


def test_a_waiter_with_a_long_lease_is_handed_the_lock_only_while_its_client_listens(server, name):
    """A place whose lease is longer than the window is handed the lock only if its client
    still listens on its own channel: a dead client's place would hold the lock for its whole
    lease. A dead one is dropped, and the next place (or everyone, with "0") gets its turn."""
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    raw.hset(name, "holder:1", 1)
    raw.pexpire(name, 30_000)
    _queue(raw, keys, "gone:1", lease="20000")
    unlock = _listen(raw, keys.channel)
    _release(raw, keys, "holder:1")
    assert raw.exists(name) == 0 and raw.zcard(keys.line) == 0
    assert _published(raw, unlock, keys.channel) == ["0"]
    raw.hset(name, "holder:1", 1)
    raw.pexpire(name, 30_000)
    _queue(raw, keys, "live:1", lease="20000")
    own = _listen(raw, keys.handover("live:1"))
    _release(raw, keys, "holder:1")
    assert _holder(raw, name) == ("live:1", 1)
    assert 19_000 < raw.pttl(name) <= 20_000
    (message,) = _published(raw, own, keys.handover("live:1"))
    assert message.startswith("live:1 ") and message.endswith(" 20000 wait-1")
    own.close()
    unlock.close()
    raw.close()


def test_a_waiter_that_gives_up_gives_a_hand_over_back(server, name):
    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    raw.hset(name, "holder:1", 1)
    raw.pexpire(name, 30_000)
    _queue(raw, keys, "waiter:1")
    _release(raw, keys, "holder:1")
    assert _holder(raw, name) == ("waiter:1", 1)
    assert 0 < raw.pttl(name) <= 1000
    pubsub = _listen(raw, keys.channel)
    leave = (keys.name, keys.channel, keys.line, keys.receipts)
    # another acquire call of the same owner (a later one, or a re-entry) that gives up
    # never gives back a hold that was not made for it
    assert _run(raw, scripts.LOCK_LEAVE, leave, "waiter:1", "publish", "wait-2", "w30000") == 0
    assert _holder(raw, name) == ("waiter:1", 1)
    # the waiter handed the lock as it timed out gives it back, and the next one is woken
    assert _run(raw, scripts.LOCK_LEAVE, leave, "waiter:1", "publish", "wait-1", "w30000") == 1
    assert raw.exists(name) == 0
    assert _published(raw, pubsub, keys.channel) == ["0"]
    pubsub.close()
    raw.close()


async def test_a_hand_over_waits_for_no_further_request(side, binary, name):
    """The waiter holds the lock as soon as the message reaches it: its acquire sends
    nothing more (counted with the server's own command statistics, on a server of the
    test's own, so that no other test's watchdog adds to the count)."""
    keys = LockKeys.for_name(name)
    with RedisServer(binary) as server:
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        # a first lease as long as the watchdog's: no early renewal to count
        holder = side.client(server.url, handoff_window=30).lock(name)
        waiter = side.client(server.url).lock(name)
        assert await side(holder.acquire())
        await side(holder.release())  # loads the scripts: no NOSCRIPT retry to count
        assert await side(holder.acquire())

        def scripts_run() -> int:
            return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

        before = scripts_run()
        waiting = _Waiter(side, waiter, timeout=30)
        # in line, listening, and done trying (it tries again once it listens: two tries,
        # the second sent a moment after the subscription is confirmed): quiet
        await eventually(lambda: raw.zcard(keys.line) == 1)
        own = keys.handover_prefix + waiter.client.id
        await eventually(lambda: raw.pubsub_numsub(own) == [(own, 1)])
        await eventually(lambda: scripts_run() >= before + 2)
        seen: list[int] = []

        def settled() -> bool:
            seen.append(scripts_run())
            return seen[-3:] == [seen[-1]] * 3

        await eventually(settled)
        await side(holder.release())
        assert await waiting.holding()
        assert scripts_run() - seen[-1] == 1, "only the release ran a script"
        await waiting.release()
        raw.close()
