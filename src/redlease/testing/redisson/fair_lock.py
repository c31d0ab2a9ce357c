"""A Java thread using Redisson's ``RFairLock`` (``redisson.getFairLock(name)``), without a JVM:
a test double written from reading Redisson's ``RedissonFairLock``, ``RedissonLock`` and
``RedissonBaseLock`` (the keys and arguments its Java code computes, the effects of its
scripts, its channels and messages), in scripts of our own.

The lock ``N`` is the ``RLock`` hash (field ``<client-id>:<thread-id>`` -> hold count, the
lease as the key's TTL). ``redisson_lock_queue:{N}`` is a list of the waiters' fields by
arrival; ``redisson_lock_timeout:{N}`` a sorted set of when each waiter's place lapses, in
the Java client's wall-clock ms. A place is the place before it (or the holder's TTL) plus
the waiter's wait (``fairLockWaitTimeout``, 5 min, or the ``tryLock`` wait); a grant takes
the grantee's wait off every place, a waiter giving up (``acquireFailed``) its own wait off
every place behind it. Each script first drops lapsed places from the head of the line. A
waiter listens on ``redisson_lock__channel:{N}:<its field>``; an unlock publishes ``0`` on
the first waiter's channel only. Classic pub/sub only (a single server), no watchdog thread.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

from ..._core.keys import redisson_prefixed
from ._scripts import load

THREAD_WAIT = 300.0
"""Redisson's default ``fairLockWaitTimeout``, seconds."""

UNLOCK_LATCH_MS = 20_000
"""How long an unlock's latch key (its answer, for a command sent again) lives."""

_DROP_LAPSED = load("fair_lock_drop_lapsed")

_TRY = _DROP_LAPSED + load("fair_lock_try")

_TRY_ONCE = _DROP_LAPSED + load("fair_lock_try_once")

_UNLOCK = _DROP_LAPSED + load("fair_lock_unlock")

_ACQUIRE_FAILED = load("fair_lock_acquire_failed")

_FORCE_UNLOCK = _DROP_LAPSED + load("fair_lock_force_unlock")

_RENEW = load("fair_lock_renew")


_WAKE = (b"0", b"1")
"""``LockPubSub``: ``0`` (unlock) releases one waiter's latch, ``1`` all of them."""


def _now_ms() -> int:
    return int(time.time() * 1000)  # System.currentTimeMillis()


class RedissonFairLock:
    """One Java thread's ``RFairLock`` on ``name``, over its own connections (as a JVM).

    ``lease`` is the hold's TTL (Redisson's ``internalLockLeaseTime``: 30 s, the watchdog's
    timeout); threads of one JVM share ``client_id`` and differ by ``thread_id``;
    ``thread_wait`` is the JVM's ``fairLockWaitTimeout`` (seconds).
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        lease: float = 30.0,
        thread_id: int = 1,
        client_id: str | None = None,
        thread_wait: float = THREAD_WAIT,
    ) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self.name = name
        self.queue = redisson_prefixed("redisson_lock_queue", name)
        self.timeouts = redisson_prefixed("redisson_lock_timeout", name)
        self.channel = redisson_prefixed("redisson_lock__channel", name)
        self.field = f"{client_id or uuid.uuid4()}:{thread_id}"  # getLockName(threadId)
        self.own_channel = f"{self.channel}:{self.field}"  # its waiter channel
        self._lease_ms = int(lease * 1000)
        self._thread_wait_ms = int(thread_wait * 1000)
        self._pubsub: Any = None

    def _wait_ms(self, wait: float | None) -> int:
        """Redisson's ``wait``: the ``tryLock`` wait when positive, else ``threadWaitTime``."""
        return int(wait * 1000) if wait is not None and wait > 0 else self._thread_wait_ms

    # -- the server side --------------------------------------------------------------------

    def _try(self, wait: float | None) -> int | None:
        keys = (self.name, self.queue, self.timeouts)
        args = (self._lease_ms, self.field, self._wait_ms(wait), _now_ms())
        ttl = self.redis.eval(_TRY, 3, *keys, *args)
        return None if ttl is None else int(ttl)

    def try_lock_once(self) -> bool:
        """``tryLock()``: take it now if free and nobody is in line before us."""
        keys = (self.name, self.queue, self.timeouts)
        args = (self._lease_ms, self.field, _now_ms(), self._thread_wait_ms)
        return self.redis.eval(_TRY_ONCE, 3, *keys, *args) is None

    def _acquire_failed(self, wait: float | None) -> None:
        self.redis.eval(
            _ACQUIRE_FAILED, 2, self.queue, self.timeouts, self.field, self._wait_ms(wait)
        )

    def unlock(self) -> bool:
        """``unlock()``: True when this freed the lock (``0`` to the first waiter), False when
        still held (re-entered); ``RuntimeError`` (``IllegalMonitorStateException``) when
        the thread holds nothing."""
        latch = f"{redisson_prefixed('redisson_unlock_latch', self.name)}:{uuid.uuid4().hex}"
        keys = (self.name, self.queue, self.timeouts, self.channel, latch)
        args = ("0", self._lease_ms, self.field, _now_ms(), "publish", UNLOCK_LATCH_MS)
        reply = self.redis.eval(_UNLOCK, 5, *keys, *args)
        self.redis.delete(latch)
        if reply is None:
            raise RuntimeError(f"Redisson thread {self.field} does not hold {self.name!r}")
        return int(reply) == 1

    def force_unlock(self) -> bool:
        keys = (self.name, self.queue, self.timeouts, self.channel)
        return int(self.redis.eval(_FORCE_UNLOCK, 4, *keys, "0", _now_ms(), "publish")) == 1

    def renew(self) -> bool:
        """One turn of the watchdog: the lease again while the thread holds the lock."""
        return int(self.redis.eval(_RENEW, 1, self.name, self._lease_ms, self.field)) == 1

    def hold_count(self) -> int:
        count = self.redis.hget(self.name, self.field)
        return 0 if count is None else int(count)

    # -- waiting ----------------------------------------------------------------------------

    def try_lock(self, wait: float) -> bool:
        """``tryLock(wait, SECONDS)``: try (joining the line); subscribe to our own channel;
        then try again and wait for ``0`` or the time the try answered, until held or out of
        time. Giving up leaves the line (``acquireFailed``)."""
        deadline = time.monotonic() + wait
        if self._try(wait) is None:
            return True
        if time.monotonic() >= deadline or not self._subscribe(deadline):
            self._acquire_failed(wait)
            return False
        try:
            while True:
                ttl = self._try(wait)
                if ttl is None:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    self._acquire_failed(wait)
                    return False
                self._await_unlock(ttl / 1000 if 0 <= ttl < left * 1000 else left)
                if time.monotonic() >= deadline:
                    self._acquire_failed(wait)
                    return False
        finally:
            self._unsubscribe()

    def lock(self, bound: float = 60.0) -> None:
        """``lock()``: wait as long as it takes (``threadWaitTime`` places); ``bound`` only
        keeps a test from hanging (``TimeoutError``, still in line: as a stuck JVM thread)."""
        end = time.monotonic() + bound
        if self._try(None) is None:
            return
        if not self._subscribe(end):
            raise TimeoutError("no subscription")
        try:
            while time.monotonic() < end:
                ttl = self._try(None)
                if ttl is None:
                    return
                self._await_unlock(ttl / 1000 if ttl >= 0 else end - time.monotonic())
            raise TimeoutError(f"lock() bound of {bound} s reached")
        finally:
            self._unsubscribe()

    def _subscribe(self, deadline: float) -> bool:
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub()
        self._pubsub.subscribe(self.own_channel)
        while (left := deadline - time.monotonic()) > 0:
            message = self._pubsub.get_message(timeout=min(left, 1.0))
            if message is not None and message["type"] == "subscribe":
                return True
        return False

    def _await_unlock(self, pause: float) -> bool:
        """The latch: True when ``0`` came within ``pause`` (``1`` would wake all, too)."""
        end = time.monotonic() + pause
        while (left := end - time.monotonic()) > 0:
            message = self._pubsub.get_message(timeout=left)
            if message is not None and message["type"] == "message" and message["data"] in _WAKE:
                return True
        return False

    def _unsubscribe(self) -> None:
        self._pubsub.unsubscribe(self.own_channel)

    def close(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
        self.redis.close()
