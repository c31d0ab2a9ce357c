"""A Java thread using Redisson's ``RReadWriteLock``, without a JVM: a test double written from
reading Redisson's ``RedissonReadLock``/``RedissonWriteLock`` (keys, arguments, effects and
messages), in our own scripts.

The lock ``N`` is a hash: ``mode`` (``read``/``write``), ``<id>:<thread>`` -> read holds,
``<id>:<thread>:write`` -> write holds; each read hold has a lease key
``{N}:<id>:<thread>:rwlock_timeout:<n>``; the hash's TTL is the longest lease. A freed read
side publishes ``0``, a freed write side ``1``, on ``redisson_rwlock:{N}``. Redisson's
``tryLock(wait)``: try, subscribe, then wait for a message or the TTL the last try saw.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

from ..._core.keys import redisson_prefixed, redisson_suffixed
from ._scripts import load

# Each script answers nil when the caller now holds, else the lock's TTL in ms.
_READ_TRY = load("rwlock_read_try")

_WRITE_TRY = load("rwlock_write_try")

# Answers 1 freed (message published), 0 still held by someone, nil not held by the caller.
_READ_UNLOCK = load("rwlock_read_unlock")

_WRITE_UNLOCK = load("rwlock_write_unlock")


class _Side:
    def __init__(self, rw: RedissonReadWriteLock, write: bool) -> None:
        self._rw = rw
        self._write = write

    def _try(self) -> int | None:
        rw = self._rw
        if self._write:
            ttl = rw.redis.eval(_WRITE_TRY, 1, rw.name, rw.lease_ms, rw.write_field)
        else:
            ttl = rw.redis.eval(
                _READ_TRY, 2, rw.name, rw.timeout_prefix, rw.lease_ms, rw.field, rw.write_field
            )
        return None if ttl is None else int(ttl)

    def try_lock(self, wait: float) -> bool:
        """Redisson's ``tryLock(wait, SECONDS)``: True once held, False when ``wait`` ran out."""
        deadline = time.monotonic() + wait
        if self._try() is None:
            return True
        pubsub = self._rw.listen()
        while True:
            ttl = self._try()
            if ttl is None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            pause = min(remaining, ttl / 1000) if ttl >= 0 else remaining
            pubsub.get_message(timeout=max(0.001, pause))  # a message ends the wait at once

    def unlock(self) -> bool:
        """Redisson's ``unlock()``: True when this freed the side (a message published)."""
        rw = self._rw
        if self._write:
            reply = rw.redis.eval(
                _WRITE_UNLOCK, 2, rw.name, rw.channel, rw.lease_ms, rw.write_field
            )
        else:
            reply = rw.redis.eval(
                _READ_UNLOCK, 4, rw.name, rw.channel, rw.timeout_prefix, rw.key_prefix, rw.field
            )
        if reply is None:
            raise RuntimeError(f"Redisson thread {rw.field} holds no such lock on {rw.name!r}")
        return int(reply) == 1


class RedissonReadWriteLock:
    """One Java thread's ``RReadWriteLock`` on ``name``, over its own connection."""

    def __init__(self, url: str, name: str, *, lease: float = 30.0, thread_id: int = 1) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self.name = name
        self.channel = redisson_prefixed("redisson_rwlock", name)
        self.field = f"{uuid.uuid4()}:{thread_id}"
        self.write_field = self.field + ":write"
        self.timeout_prefix = redisson_suffixed(name, self.field) + ":rwlock_timeout"
        self.key_prefix = redisson_suffixed(name, "")[:-1]
        self.lease_ms = int(lease * 1000)
        self._pubsub: Any = None
        self.read = _Side(self, write=False)
        self.write = _Side(self, write=True)

    def listen(self) -> Any:
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub()
            self._pubsub.subscribe(self.channel)
            self._pubsub.get_message(timeout=5)  # the subscription's confirmation
        return self._pubsub

    def close(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
        self.redis.close()
