"""Stand-ins for other clients on the same names: ``RedissonLock``, a Java thread using
Redisson's ``RLock``.

Kept as a re-export because ``redlease.peers.RedissonLock`` is documented
(docs/guarantees.md); it lives in ``redlease.testing.redisson`` with the other Redisson
stand-ins, which is where new code should import it from.
"""

from __future__ import annotations

from .testing.redisson.lock import UNLOCK_LATCH_MS, RedissonLock

__all__ = ["UNLOCK_LATCH_MS", "RedissonLock"]
