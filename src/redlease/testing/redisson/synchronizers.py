"""A Java service using Redisson's ``RSemaphore``, ``RPermitExpirableSemaphore`` and
``RCountDownLatch``, played in Python for the interop tests (issue #13 item 6).

Written from reading Redisson's public source (``RedissonSemaphore``,
``RedissonPermitExpirableSemaphore``, ``RedissonCountDownLatch``, ``pubsub/SemaphorePubSub``,
``pubsub/CountDownLatchPubSub``); none of its code is copied. What is reproduced is the
protocol a Java process speaks on the server:

- the keys: the semaphore's count is the name itself; the lease semaphore's leases are the
  zset ``suffixName(name, "timeout")`` (``{name}:timeout``, or ``name:timeout`` when the name
  has braces of its own), permit id (16 raw bytes, shown as 32 hex digits) -> lease end in ms
  of the *client's* clock (``922337203685477`` for a permit without a lease); the latch's
  count is the name;
- the arguments and the effects of each call (the scripts here are this module's own, with
  the same effects as Redisson's);
- the channels and messages: ``redisson_sc:{name}`` (``redisson_sc:name`` with braces) carries
  a number, and a Redisson waiter is woken by a message ``n`` only when ``n >= 1`` (its latch
  is released ``min(waiters, n)`` times; a message below zero makes its listener throw);
  ``redisson_countdownlatch__channel__{name}`` carries ``0`` (open: waiters re-check the count)
  and ``1`` (closed again); any other message wakes no Redisson waiter;
- the waits: a waiter tries, subscribes, and then waits for a message (or, on the lease
  semaphore, for the soonest lease to end) before it tries again; it never re-checks on a
  timer of its own, so a waiter here that returns within a few seconds was woken by a message.

Each object has its own connections, as a separate JVM would. ``odd`` collects the messages a
Redisson listener could not take (not a number, or below zero on a semaphore channel).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import redis

from ._scripts import load

NON_EXPIRABLE = 922_337_203_685_477
"""The lease end Redisson gives a permit acquired without a lease."""


class RedissonError(Exception):
    """What a Redisson call throws (``IllegalArgumentException`` and the like)."""


def semaphore_channel(name: str) -> str:
    """``RedissonSemaphore.getChannelName`` / ``prefixName("redisson_sc", name)``."""
    return f"redisson_sc:{name}" if "{" in name else f"redisson_sc:{{{name}}}"


def timeout_key(name: str) -> str:
    """``suffixName(name, "timeout")``: the lease semaphore's zset of leases."""
    return f"{name}:timeout" if "{" in name else f"{{{name}}}:timeout"


def latch_channel(name: str) -> str:
    return f"redisson_countdownlatch__channel__{{{name}}}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Listener:
    """One subscription, as Redisson's ``PublishSubscribe`` entry: messages read by the waiting
    thread itself (a message that came while it was not waiting is read at its next wait, as
    the entry's latch keeps it). ``waiting`` is set while a wait is blocked."""

    def __init__(self, client: Any, channel: str, odd: list[str]) -> None:
        self._pubsub = client.pubsub()
        self._channel = channel
        self._odd = odd
        self.waiting = threading.Event()
        self._pubsub.subscribe(channel)
        deadline = time.monotonic() + 10
        while True:  # the server's confirmation: from now on no message is missed
            message = self._pubsub.get_message(timeout=1)
            if message is not None and message["type"] == "subscribe":
                break
            assert time.monotonic() < deadline, f"no confirmation of SUBSCRIBE {channel}"

    def next_message(self, timeout: float) -> str | None:
        """The next message within ``timeout`` seconds (``None``: none came)."""
        deadline = time.monotonic() + max(0.0, timeout)
        self.waiting.set()
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                message = self._pubsub.get_message(timeout=remaining)
                if message is not None and message["type"] == "message":
                    data = message["data"]
                    return data.decode() if isinstance(data, bytes) else str(data)
        finally:
            self.waiting.clear()

    def semaphore_wake(self, timeout: float) -> bool:
        """Wait for a message that releases a Redisson semaphore waiter (a number >= 1)."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.next_message(deadline - time.monotonic())
            if data is None:
                return False
            try:
                value = int(data)
            except ValueError:
                self._odd.append(data)  # Long.valueOf would throw in the listener
                continue
            if value < 0:
                self._odd.append(data)  # Semaphore.release(negative) would throw
            if value >= 1:
                return True

    def close(self) -> None:
        self._pubsub.unsubscribe(self._channel)
        self._pubsub.close()


# --- RSemaphore -----------------------------------------------------------------------------

_SEM_TRY_SET = load("semaphore_try_set")
_SEM_TRY_ACQUIRE = load("semaphore_try_acquire")
_SEM_RELEASE = load("semaphore_release")
_SEM_ADD = load("semaphore_add")
_SEM_DRAIN = load("semaphore_drain")


class RedissonSemaphore:
    """``redisson.getSemaphore(name)`` in one Java thread."""

    def __init__(self, url: str, name: str) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self.name = name
        self.channel = semaphore_channel(name)
        self.odd: list[str] = []
        self._listener: _Listener | None = None

    @property
    def waiting(self) -> bool:
        return self._listener is not None and self._listener.waiting.is_set()

    def try_set_permits(self, permits: int) -> bool:
        return bool(self.redis.eval(_SEM_TRY_SET, 2, self.name, self.channel, permits))

    def add_permits(self, permits: int) -> None:
        self.redis.eval(_SEM_ADD, 2, self.name, self.channel, permits)

    def try_acquire(self, permits: int = 1) -> bool:
        if permits < 0:
            raise RedissonError("Permits amount can't be negative")
        if permits == 0:
            return True  # no round trip
        return bool(self.redis.eval(_SEM_TRY_ACQUIRE, 1, self.name, permits))

    def acquire(self, permits: int = 1, wait: float = 20.0) -> bool:
        """``tryAcquire(permits, wait, SECONDS)``: try, subscribe, then wait for a message
        before each new try; False when ``wait`` ran out."""
        deadline = time.monotonic() + wait
        if self.try_acquire(permits):
            return True
        self._listener = _Listener(self.redis, self.channel, self.odd)
        try:
            while True:
                if self.try_acquire(permits):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._listener.semaphore_wake(remaining)
                if time.monotonic() >= deadline:
                    return False  # Redisson gives up without another try
        finally:
            self._listener.close()
            self._listener = None

    def release(self, permits: int = 1) -> None:
        if permits < 0:
            raise RedissonError("Permits amount can't be negative")
        if permits:
            self.redis.eval(_SEM_RELEASE, 2, self.name, self.channel, permits)

    def drain_permits(self) -> int:
        return int(self.redis.eval(_SEM_DRAIN, 1, self.name))

    def available_permits(self) -> int:
        return int(self.redis.get(self.name) or 0)

    def delete(self) -> bool:
        return bool(self.redis.delete(self.name))

    def close(self) -> None:
        self.redis.close()


# --- RPermitExpirableSemaphore ------------------------------------------------------------

# KEYS: count, leases, channel
_GIVE_BACK_EXPIRED = load("expirable_semaphore_give_back_expired")
_LSEM_TRY_ACQUIRE = _GIVE_BACK_EXPIRED + load("expirable_semaphore_try_acquire")
_LSEM_RELEASE_ONE = load("expirable_semaphore_release_one")
_LSEM_RELEASE_MANY = _GIVE_BACK_EXPIRED + load("expirable_semaphore_release_many")
_LSEM_TRY_SET = load("expirable_semaphore_try_set")
_LSEM_SET = load("expirable_semaphore_set")
_LSEM_ADD = load("expirable_semaphore_add")
_LSEM_UPDATE = _GIVE_BACK_EXPIRED + load("expirable_semaphore_update")
_LSEM_AVAILABLE = _GIVE_BACK_EXPIRED + load("expirable_semaphore_available")
_EXPIRE = load("expirable_semaphore_expire")


class RedissonPermitExpirableSemaphore:
    """``redisson.getPermitExpirableSemaphore(name)`` in one Java thread."""

    def __init__(self, url: str, name: str) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self.name = name
        self.leases = timeout_key(name)
        self.channel = semaphore_channel(name)
        self.odd: list[str] = []
        self._listener: _Listener | None = None

    @property
    def waiting(self) -> bool:
        return self._listener is not None and self._listener.waiting.is_set()

    def _keys(self) -> tuple[str, str, str]:
        return (self.name, self.leases, self.channel)

    def _try(self, permits: int, lease: float | None) -> list[str] | int | None:
        """One try: the ids taken, or the soonest lease end (ms) to wait for, or None."""
        if permits < 0:
            raise RedissonError("Permits amount can't be negative")
        ids = [uuid.uuid4().hex for _ in range(permits)]
        ends = NON_EXPIRABLE if lease is None else _now_ms() + int(lease * 1000)
        reply = self.redis.eval(
            _LSEM_TRY_ACQUIRE,
            3,
            *self._keys(),
            permits,
            ends,
            _now_ms(),
            NON_EXPIRABLE,
            *(bytes.fromhex(i) for i in ids),
        )
        if int(reply[0]) == 1:
            return ids
        return int(reply[1]) if len(reply) > 1 else None

    def try_acquire(self, permits: int = 1, lease: float | None = None) -> list[str]:
        """``tryAcquire(permits)``: the ids, or ``[]``."""
        got = self._try(permits, lease)
        return got if isinstance(got, list) else []

    def acquire(
        self, permits: int = 1, wait: float = 20.0, lease: float | None = None
    ) -> list[str]:
        """``tryAcquire(permits, wait, lease, SECONDS)``: try, subscribe, then wait for a
        message or for the soonest lease to end before each new try; ``[]`` on timeout."""
        deadline = time.monotonic() + wait
        got = self._try(permits, lease)
        if isinstance(got, list):
            return got
        self._listener = _Listener(self.redis, self.channel, self.odd)
        try:
            while True:
                got = self._try(permits, lease)
                if isinstance(got, list):
                    return got
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                if got is not None:  # the soonest lease end
                    remaining = min(remaining, max(0.001, (got - _now_ms()) / 1000))
                self._listener.semaphore_wake(remaining)
                if time.monotonic() >= deadline:
                    return []  # Redisson gives up without another try
        finally:
            self._listener.close()
            self._listener = None

    def try_release(self, permit_id: str) -> bool:
        reply = self.redis.eval(
            _LSEM_RELEASE_ONE, 3, *self._keys(), bytes.fromhex(permit_id), _now_ms()
        )
        return bool(reply)

    def release(self, permit_id: str) -> None:
        if not self.try_release(permit_id):
            raise RedissonError(f"Permit with id {permit_id} has already been released")

    def try_release_many(self, permit_ids: list[str]) -> int:
        """``tryRelease(List)``: all or none; how many were given back."""
        if not permit_ids:
            raise RedissonError("permitIds can't be null or empty")
        ids = (bytes.fromhex(i) for i in permit_ids)
        return int(self.redis.eval(_LSEM_RELEASE_MANY, 3, *self._keys(), _now_ms(), *ids))

    def release_many(self, permit_ids: list[str]) -> None:
        """``release(List)``: throws unless every one was given back."""
        if self.try_release_many(permit_ids) != len(permit_ids):
            raise RedissonError(f"Permits with ids {permit_ids} have already been released")

    def try_set_permits(self, permits: int) -> bool:
        return bool(self.redis.eval(_LSEM_TRY_SET, 3, *self._keys(), permits))

    def set_permits(self, permits: int) -> None:
        self.redis.eval(_LSEM_SET, 3, *self._keys(), permits)

    def add_permits(self, permits: int) -> None:
        self.redis.eval(_LSEM_ADD, 3, *self._keys(), permits)

    def update_lease_time(self, permit_id: str, lease: float) -> bool:
        ends = _now_ms() + int(lease * 1000)
        reply = self.redis.eval(
            _LSEM_UPDATE, 3, *self._keys(), bytes.fromhex(permit_id), ends, _now_ms()
        )
        return bool(reply)

    def _counts(self) -> tuple[int, int, bool]:
        reply = self.redis.eval(_LSEM_AVAILABLE, 3, *self._keys(), _now_ms())
        return int(reply[0]), int(reply[1]), bool(reply[2])

    def available_permits(self) -> int:
        return self._counts()[0]

    def acquired_permits(self) -> int:
        return self._counts()[1]

    def get_permits(self) -> int:
        available, acquired, exists = self._counts()
        return available + acquired if exists else 0

    def lease_end(self, permit_id: str) -> int | None:
        """The permit's lease end (ms, client clock) as stored, or None."""
        score = self.redis.zscore(self.leases, bytes.fromhex(permit_id))
        return None if score is None else int(score)

    def expire(self, seconds: float) -> bool:
        return bool(self.redis.eval(_EXPIRE, 2, self.name, self.leases, int(seconds * 1000)))

    def close(self) -> None:
        self.redis.close()


# --- RCountDownLatch ----------------------------------------------------------------------

_LATCH_TRY_SET = load("latch_try_set")
_LATCH_COUNT_DOWN = load("latch_count_down")
_LATCH_DELETE = load("latch_delete")


class RedissonCountDownLatch:
    """``redisson.getCountDownLatch(name)`` in one Java thread."""

    def __init__(self, url: str, name: str) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self.name = name
        self.channel = latch_channel(name)
        self.odd: list[str] = []
        self._listener: _Listener | None = None

    @property
    def waiting(self) -> bool:
        return self._listener is not None and self._listener.waiting.is_set()

    def try_set_count(self, count: int) -> bool:
        return bool(self.redis.eval(_LATCH_TRY_SET, 2, self.name, self.channel, count))

    def count_down(self) -> None:
        self.redis.eval(_LATCH_COUNT_DOWN, 2, self.name, self.channel)

    def get_count(self) -> int:
        return int(self.redis.get(self.name) or 0)

    def delete(self) -> bool:
        return bool(self.redis.eval(_LATCH_DELETE, 2, self.name, self.channel))

    def await_(self, wait: float = 20.0) -> bool:
        """``await(wait, SECONDS)``: True once the count is 0. While it is not, the waiter
        sleeps on its entry's latch, which only ``0`` opens (and ``1`` closes again)."""
        deadline = time.monotonic() + wait
        if self.get_count() == 0:
            return True
        self._listener = _Listener(self.redis, self.channel, self.odd)
        opened = False
        try:
            while self.get_count() > 0:
                while not opened:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    data = self._listener.next_message(remaining)
                    if data is None:
                        return False
                    if not data.lstrip("-").isdigit():
                        self.odd.append(data)
                    opened = data == "0" or (opened and data != "1")
                if time.monotonic() >= deadline:
                    return False
                # opened, yet a count is left (re-armed): Redisson would re-check at once
                # until closed by a "1"; here it waits for the next message instead
                opened = False
            return True
        finally:
            self._listener.close()
            self._listener = None

    def close(self) -> None:
        self.redis.close()
