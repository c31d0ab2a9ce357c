"""Redisson's clients on the same names, played in Python with no JVM (test doubles).

Each is written from reading Redisson's public source (the keys and arguments its Java code
computes, the effects of its scripts, its channels and messages), in scripts of our own
(``redlease/testing/lua``): what a Java service using ``RLock``, ``RFencedLock``, ``RFairLock``,
``RFasterMultiLock``, ``RReadWriteLock``, ``RSemaphore``, ``RPermitExpirableSemaphore`` or
``RCountDownLatch`` does on the server, to test that redlease and Redisson exclude each other.
No watchdog thread: ``renew()`` is one turn of it.
"""

from __future__ import annotations

from .fair_lock import RedissonFairLock
from .faster_multilock import RedissonFasterMultiLock
from .fenced_lock import RedissonFencedLock
from .lock import RedissonLock
from .rwlock import RedissonReadWriteLock
from .synchronizers import (
    RedissonCountDownLatch,
    RedissonPermitExpirableSemaphore,
    RedissonSemaphore,
)

__all__ = [
    "RedissonCountDownLatch",
    "RedissonFairLock",
    "RedissonFasterMultiLock",
    "RedissonFencedLock",
    "RedissonLock",
    "RedissonPermitExpirableSemaphore",
    "RedissonReadWriteLock",
    "RedissonSemaphore",
]
