"""Stand-ins for other clients on the same names: a Java thread using Redisson's ``RLock``.

``RedissonLock`` runs Redisson's lock and unlock scripts (the ones ``RedissonLock`` sends, with
the KEYS and ARGV its Java code computes: the hash field ``<client-id>:<thread-id>``, the lease
as the key's TTL, ``0`` published on ``redisson_lock__channel:{name}``) and follows its
``tryLock(waitTime)`` loop: try, subscribe, then wait for an unlock message or for the TTL the
last try saw, whichever comes first. Interop tests and ``benchmarks/interop.py`` use it to show
what a Java service sees, with no JVM. It is a test double: no watchdog (the lease is fixed).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

from ._core.keys import redisson_prefixed

_TRY_LOCK = """
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
"""
"""Redisson's ``tryLockInnerAsync``: nil when held now, else the holder's remaining TTL."""

_UNLOCK = """
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
"""
"""Redisson's ``unlockInnerAsync``: 1 freed (``0`` published), 0 still held, nil not held."""


class RedissonLock:
    """One Java thread's ``RLock`` on ``name``, over its own connection (as a separate JVM)."""

    def __init__(self, url: str, name: str, *, lease: float = 30.0, thread_id: int = 1) -> None:
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=10)
        self.name = name
        self.channel = redisson_prefixed("redisson_lock__channel", name)
        self.field = f"{uuid.uuid4()}:{thread_id}"
        self._lease_ms = int(lease * 1000)
        self._pubsub: Any = None

    def _try(self) -> int | None:
        ttl = self.redis.eval(_TRY_LOCK, 1, self.name, self._lease_ms, self.field)
        return None if ttl is None else int(ttl)

    def try_lock(self, wait: float) -> bool:
        """Redisson's ``tryLock(wait, TimeUnit.SECONDS)``: True once held, False when ``wait``
        ran out."""
        deadline = time.monotonic() + wait
        if self._try() is None:
            return True
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub()
            self._pubsub.subscribe(self.channel)
            self._pubsub.get_message(timeout=5)  # the subscription's confirmation
        while True:
            ttl = self._try()
            if ttl is None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            pause = min(remaining, ttl / 1000) if ttl >= 0 else remaining
            self._pubsub.get_message(timeout=max(0.001, pause))  # "0" ends the wait at once

    def unlock(self) -> bool:
        """Redisson's ``unlock()``: True when this freed the lock (``0`` published)."""
        reply = self.redis.eval(
            _UNLOCK, 2, self.name, self.channel, "0", self._lease_ms, self.field
        )
        if reply is None:
            raise RuntimeError(f"Redisson thread {self.field} does not hold {self.name!r}")
        return int(reply) == 1

    def close(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
        self.redis.close()
