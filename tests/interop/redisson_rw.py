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

from redlease._core.keys import redisson_prefixed, redisson_suffixed

# Each script answers nil when the caller now holds, else the lock's TTL in ms.
_READ_TRY = """
local lock, my_lease_key, lease = KEYS[1], KEYS[2], tonumber(ARGV[1])
local me, my_write = ARGV[2], ARGV[3]
local mode = redis.call('hget', lock, 'mode')
local allowed = (not mode) or mode == 'read' or redis.call('hexists', lock, my_write) == 1
if not allowed then
  return redis.call('pttl', lock)
end
if not mode then
  redis.call('hset', lock, 'mode', 'read')
end
local n = redis.call('hincrby', lock, me, 1)
redis.call('set', my_lease_key .. ':' .. n, '1', 'px', lease)
redis.call('pexpire', lock, math.max(lease, redis.call('pttl', lock)))
return nil
"""

_WRITE_TRY = """
local lock, lease, me = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('hset', lock, 'mode', 'write', me, 1)
  redis.call('pexpire', lock, lease)
  return nil
end
if mode == 'write' and redis.call('hexists', lock, me) == 1 then
  redis.call('hincrby', lock, me, 1)
  redis.call('pexpire', lock, redis.call('pttl', lock) + lease)
  return nil
end
return redis.call('pttl', lock)
"""

# Answers 1 freed (message published), 0 still held by someone, nil not held by the caller.
_READ_UNLOCK = """
local lock, channel, my_lease_key, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me = ARGV[1]
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('publish', channel, '0')
  return 1
end
if redis.call('hexists', lock, me) == 0 then
  return nil
end
local left = redis.call('hincrby', lock, me, -1)
if left == 0 then
  redis.call('hdel', lock, me)
end
redis.call('del', my_lease_key .. ':' .. (left + 1))
if redis.call('hlen', lock) > 1 then
  local longest = -3
  for _, who in ipairs(redis.call('hkeys', lock)) do
    local holds = tonumber(redis.call('hget', lock, who))
    if type(holds) == 'number' then
      for k = 1, holds do
        local lease_key = prefix .. ':' .. who .. ':rwlock_timeout:' .. k
        longest = math.max(longest, redis.call('pttl', lease_key))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', lock, longest)
    return 0
  end
  if mode == 'write' then
    return 0
  end
end
redis.call('del', lock)
redis.call('publish', channel, '0')
return 1
"""

_WRITE_UNLOCK = """
local lock, channel, lease, me = KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2]
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('publish', channel, '1')
  return 1
end
if mode ~= 'write' or redis.call('hexists', lock, me) == 0 then
  return nil
end
if redis.call('hincrby', lock, me, -1) > 0 then
  redis.call('pexpire', lock, lease)
  return 0
end
redis.call('hdel', lock, me)
if redis.call('hlen', lock) > 1 then
  redis.call('hset', lock, 'mode', 'read') -- the writer's own read holds stay
else
  redis.call('del', lock)
  redis.call('publish', channel, '1')
end
return 1
"""


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
