"""A Java thread using Redisson's ``RFencedLock``: ``RLock`` plus a fencing token per hold.

Redisson's ``RedissonFencedLock`` is its ``RedissonLock`` (the same hash, lease, unlock,
renewal and channel: ``RedissonLock`` here) whose lock script also ``INCR``s the token key
``redisson_lock_token:{name}`` (``prefixName``, in the lock name's hash slot) at every
acquisition, a re-entry too, and answers the new value: ``lockAndGetToken()``,
``tryLockAndGetToken(waitTime)``. ``getToken()`` reads the key. Written from reading
Redisson's public source; the script is our own (``redlease/testing/lua/fenced_lock_try.lua``).
"""

from __future__ import annotations

from ..._core.keys import lock_token_key
from ._scripts import load
from .lock import RedissonLock

_FENCED_TRY = load("fenced_lock_try")


class RedissonFencedLock(RedissonLock):
    """One Java thread's ``RFencedLock`` on ``name`` (see ``RedissonLock`` for the arguments).
    ``token`` is the token of this thread's last acquisition (``None`` before the first)."""

    def __init__(self, url: str, name: str, **kwargs: object) -> None:
        super().__init__(url, name, **kwargs)  # type: ignore[arg-type]
        self.token_name = lock_token_key(name)  # prefixName("redisson_lock_token", name)
        self.token: int | None = None

    def _try(self) -> int | None:
        ttl, token = self._eval(
            _FENCED_TRY, 2, self.name, self.token_name, self._lease_ms, self.field
        )
        if int(ttl) != -1:
            return int(ttl)
        self.token = int(token)
        return None

    def try_lock_and_get_token(self, wait: float) -> int | None:
        """``tryLockAndGetToken(wait, TimeUnit.SECONDS)``: the new token once held, ``None``
        when ``wait`` ran out."""
        return self.token if self.try_lock(wait) else None

    def get_token(self) -> int | None:
        """``getToken()``: the token key's value (the last token anyone took)."""
        value = self.redis.get(self.token_name)
        return None if value is None else int(value)
