"""Stand-ins for other clients on the same names: a Java thread using Redisson's ``RLock``.

``RedissonLock`` speaks Redisson's lock protocol: the keys and arguments its Java code computes
(the hash field ``<client-id>:<thread-id>``, the lease as the key's TTL, an unlock latch key
per unlock request), the effects of its lock, unlock, renewal and force-unlock scripts, and
``0`` published on ``redisson_lock__channel:{name}`` (with ``SPUBLISH`` on a cluster of Redis
>= 7, as Redisson does by default); and it follows its ``tryLock(waitTime)`` loop: try,
subscribe, then wait for an unlock message or for the TTL the last try saw, whichever comes
first. Written from reading Redisson's public source; the scripts and code are our own.
Interop tests and ``benchmarks/interop.py`` use it to show what a Java service sees, with no
JVM. It is a test double: no watchdog thread (``renew()`` is one turn of it).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis
from redis.cluster import RedisCluster

from ..._core.keys import UNLOCK_MESSAGE, redisson_prefixed
from ._scripts import load

# Redisson's lock protocol, restated from reading its source (RedissonLock, RedissonBaseLock,
# renewal.LockTask, pubsub.LockPubSub, pubsub.PublishSubscribeService; 3.x and 4.x): the
# effects a Java thread has on the server, in scripts of our own.

_LOCK = load("lock_try")

_UNLOCK = load("lock_unlock")

_RENEW = load("lock_renew")

_FORCE_UNLOCK = load("lock_force_unlock")

UNLOCK_LATCH_MS = 20_000
"""How long an unlock's latch key lives: Redisson's ``(timeout + retry delay) x retryAttempts``
with its defaults (3 s, up to 2 s, 4 attempts)."""

_WAKING = (b"0", b"1")
"""Messages that end a wait (``LockPubSub``: ``0`` unlock, ``1`` read unlock); others do not."""


class RedissonLock:
    """One Java thread's ``RLock`` on ``name``, over its own connections (as a separate JVM).

    ``lease`` is Redisson's ``internalLockLeaseTime`` (``lockWatchdogTimeout``, 30 s): the TTL
    a hold, a re-entry, a partial unlock and ``renew()`` give the key. Threads of one JVM share
    its ``client_id`` (a UUID) and differ by ``thread_id``. ``cluster=True`` connects
    with redis-py's ``RedisCluster`` (Redisson's cluster mode). ``sharded`` is the pub/sub:
    ``None`` does what Redisson's default ``ShardedSubscriptionMode.AUTO`` does, sharded
    (``SPUBLISH``, ``SSUBSCRIBE`` on the master of the channel's slot) on a cluster whose node
    answers ``PUBSUB SHARDNUMSUB`` (Redis/Valkey >= 7), else classic (``PUBLISH``,
    ``SUBSCRIBE``); ``True`` or ``False`` forces it (``True`` needs ``cluster=True``).
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        lease: float = 30.0,
        thread_id: int = 1,
        client_id: str | None = None,
        cluster: bool = False,
        sharded: bool | None = None,
    ) -> None:
        if sharded and not cluster:
            raise ValueError("sharded pub/sub is Redisson's cluster mode: pass cluster=True")
        self.redis: Any = (
            RedisCluster.from_url(url, socket_timeout=10)
            if cluster
            else redis.Redis.from_url(url, socket_timeout=10)
        )
        self.cluster = cluster
        if sharded is None:  # checkShardingSupport: asked once, of the node it first reaches
            sharded = cluster and self._answers_shardnumsub()
        self.sharded = sharded
        self.publish_command = "spublish" if sharded else "publish"
        self.name = name
        self.channel = redisson_prefixed("redisson_lock__channel", name)
        self.client_id = client_id or str(uuid.uuid4())  # Redisson's ServiceManager id (a JVM's)
        self.field = f"{self.client_id}:{thread_id}"  # getLockName(threadId)
        self._lease_ms = int(lease * 1000)
        self._pubsub: Any = None
        self._spent_latches: list[str] = []

    def _eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:
        """Run ``script``. Redisson deletes an unlock's latch once the unlock's reply is in,
        without waiting for that DEL; here the DEL goes out with the thread's next script, in
        the same round trip (an unlock costs one round trip, as Redisson's does)."""
        if not self._spent_latches:
            return self.redis.eval(script, numkeys, *keys_and_args)
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(*self._spent_latches)
        pipe.execute_command("EVAL", script, numkeys, *keys_and_args)  # a cluster's too
        self._spent_latches.clear()
        return pipe.execute()[-1]

    def _answers_shardnumsub(self) -> bool:
        try:
            node = self.redis.get_default_node()
            self.redis.execute_command("PUBSUB", "SHARDNUMSUB", "0", target_nodes=node)
        except redis.ResponseError:
            return False
        return True

    # -- the server side --------------------------------------------------------------------

    def _try(self) -> int | None:
        ttl = self._eval(_LOCK, 1, self.name, self._lease_ms, self.field)
        return None if ttl is None else int(ttl)

    def unlock(self) -> bool:
        """Redisson's ``unlock()``: True when this freed the lock (``0`` published), False when
        the thread still holds it (re-entered). Raises ``RuntimeError`` (Java's
        ``IllegalMonitorStateException``) when the thread holds nothing."""
        latch = f"{redisson_prefixed('redisson_unlock_latch', self.name)}:{uuid.uuid4().hex}"
        reply = self._eval(
            _UNLOCK,
            3,
            self.name,
            self.channel,
            latch,
            UNLOCK_MESSAGE,
            self._lease_ms,
            self.field,
            self.publish_command,
            UNLOCK_LATCH_MS,
        )
        self._spent_latches.append(latch)  # the answer is in: Redisson drops the latch
        if reply is None:
            raise RuntimeError(f"Redisson thread {self.field} does not hold {self.name!r}")
        return int(reply) == 1

    def renew(self) -> bool:
        """One turn of Redisson's watchdog (``renewExpiration``): the lease again while the
        thread holds the lock. False when the hold is gone (the watchdog then stops)."""
        return int(self._eval(_RENEW, 1, self.name, self._lease_ms, self.field)) == 1

    def force_unlock(self) -> bool:
        """Redisson's ``forceUnlock()``: True when a lock was deleted (``0`` published)."""
        reply = self._eval(
            _FORCE_UNLOCK, 2, self.name, self.channel, UNLOCK_MESSAGE, self.publish_command
        )
        return int(reply) == 1

    def hold_count(self) -> int:
        """Redisson's ``getHoldCount()``: this thread's count, 0 when it holds nothing."""
        count = self.redis.hget(self.name, self.field)
        return 0 if count is None else int(count)

    # -- waiting: tryLock(waitTime) ---------------------------------------------------------

    def try_lock(self, wait: float) -> bool:
        """Redisson's ``tryLock(wait, TimeUnit.SECONDS)``: True once held, False when ``wait``
        ran out. Try; subscribe (the unlock channel, confirmed); then try again, and wait for
        an unlock message or for the TTL that try saw, whichever comes first, until held or
        out of time; unsubscribe on the way out."""
        deadline = time.monotonic() + wait
        if self._try() is None:
            return True
        if time.monotonic() >= deadline or not self._subscribe(deadline):
            return False
        try:
            while True:
                ttl = self._try()
                if ttl is None:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._await_unlock(ttl / 1000 if 0 <= ttl < left * 1000 else left)
                if time.monotonic() >= deadline:
                    return False
        finally:
            self._unsubscribe()

    def _next_message(self, timeout: float) -> Any:
        if self.sharded:
            return self._pubsub.get_sharded_message(timeout=timeout)
        return self._pubsub.get_message(timeout=timeout)

    def _subscribe(self, deadline: float) -> bool:
        """Listen on the unlock channel; True once the server confirmed it by ``deadline``."""
        if self._pubsub is None:
            if not self.cluster or self.sharded:
                self._pubsub = self.redis.pubsub()
            else:  # classic pub/sub on a cluster: on the master of the channel's slot
                self._pubsub = self.redis.pubsub(node=self.redis.get_node_from_key(self.channel))
        if self.sharded:
            self._pubsub.ssubscribe(self.channel)
        else:
            self._pubsub.subscribe(self.channel)
        # Messages of an earlier subscription may come first: only the confirmation counts.
        while (left := deadline - time.monotonic()) > 0:
            message = self._next_message(min(left, 1.0))
            if message is not None and message["type"] in ("subscribe", "ssubscribe"):
                return True
        self._unsubscribe()
        return False

    def _await_unlock(self, pause: float) -> bool:
        """The thread's latch wait: True when an unlock message came within ``pause``."""
        end = time.monotonic() + pause
        while (left := end - time.monotonic()) > 0:
            message = self._next_message(left)
            kind = None if message is None else message["type"]
            if kind in ("message", "smessage") and message["data"] in _WAKING:
                return True
        return False

    def _unsubscribe(self) -> None:
        """Stop listening; the confirmation is not awaited (the next subscribe skips it)."""
        if self.sharded:
            self._pubsub.sunsubscribe(self.channel)
        else:
            self._pubsub.unsubscribe(self.channel)

    def close(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
        if self._spent_latches:
            self.redis.delete(*self._spent_latches)
        self.redis.close()
