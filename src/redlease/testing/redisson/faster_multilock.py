"""A Java thread's ``RFasterMultiLock`` (Redisson 4's ``getFasterMultiLock(group, values)``)
on a group, with Redisson's ``StringCodec``: the group's hash (its key the group's name), each
value's field its ``Hash.hash128toBase64`` (HighwayHash-128 of its UTF-8 bytes), the
holder's ``<value>:<field>:expire_time`` (the Java client's clock, ms) and
``<value>:<field>:lock_count``, the key's TTL the longest lease; an unlock's latch key per
request; ``0`` published on ``redisson_lock__channel:{group}`` when a value is freed; and its
``tryLock(waitTime)`` loop (try, subscribe, wait for a message or the TTL the try saw).
Written from reading Redisson's public source (``RedissonFasterMultiLock``,
``renewal.FastMultilockTask``, ``misc.Hash``); the scripts are our own. A test double: no
watchdog thread (``renew()`` is one turn of it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from ..._core.highwayhash import redisson_field
from ..._core.keys import UNLOCK_MESSAGE, redisson_prefixed
from ._scripts import load
from .lock import UNLOCK_LATCH_MS, RedissonLock

_TRY = load("faster_multilock_try")
_UNLOCK = load("faster_multilock_unlock")
_RENEW = load("faster_multilock_renew")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000  # System.currentTimeMillis()


class RedissonFasterMultiLock(RedissonLock):
    """One Java thread's ``RFasterMultiLock`` on ``values`` of ``group`` (strings), over its
    own connections. ``lease``: Redisson's ``internalLockLeaseTime`` (30 s)."""

    def __init__(
        self,
        url: str,
        group: str,
        values: Iterable[str],
        *,
        lease: float = 30.0,
        thread_id: int = 1,
        client_id: str | None = None,
    ) -> None:
        super().__init__(url, group, lease=lease, thread_id=thread_id, client_id=client_id)
        self.fields = sorted({redisson_field(v.encode()) for v in values})

    def _try(self) -> int | None:
        ttl = self._eval(_TRY, 1, self.name, self._lease_ms, _now_ms(), self.field, *self.fields)
        return None if ttl is None else int(ttl)

    def unlock(self) -> bool:
        """True when every value was freed, False when some are still held (re-entered);
        ``RuntimeError`` (``IllegalMonitorStateException``) when not the thread's."""
        latch = f"{redisson_prefixed('redisson_unlock_latch', self.name)}:{uuid.uuid4().hex}"
        reply = self._eval(
            _UNLOCK, 3, self.name, self.channel, latch,
            self.field, UNLOCK_MESSAGE, self._lease_ms, self.publish_command,
            UNLOCK_LATCH_MS, _now_ms(), *self.fields,
        )  # fmt: skip
        self._spent_latches.append(latch)
        if reply is None:
            raise RuntimeError(f"Redisson thread {self.field} does not hold {self.name!r}")
        return int(reply) == 1

    def renew(self) -> bool:
        reply: Any = self._eval(
            _RENEW, 1, self.name, self._lease_ms, _now_ms(), self.field, *self.fields
        )
        return int(reply) == 1

    def force_unlock(self) -> bool:
        raise NotImplementedError("not played: redlease's force_release() frees the values")

    def hold_count(self) -> int:
        raise NotImplementedError("RFasterMultiLock has no getHoldCount()")
