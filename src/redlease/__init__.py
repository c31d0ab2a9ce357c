"""redlease: Redisson's distributed locks for Python, on Redis and Valkey, sync and asyncio."""

from __future__ import annotations

from typing import Any

from ._async.client import AsyncClient
from ._async.election import AsyncElection, AsyncTerm
from ._async.grouplock import AsyncGroupLock
from ._async.latch import AsyncCountDownLatch
from ._async.lock import AsyncFairLock, AsyncLock
from ._async.multilock import AsyncMultiLock, SupportsAsyncLock
from ._async.redlock import AsyncRedlockClient
from ._async.redlock_lock import AsyncRedlockLock
from ._async.rwlock import AsyncReadLock, AsyncReadWriteLock, AsyncWriteLock
from ._async.scheduled import AsyncScheduledLock
from ._async.semaphore import AsyncLeaseSemaphore, AsyncSemaphore
from ._async.spinlock import AsyncSpinLock
from ._core.arguments import LayoutName, Seconds
from ._core.backoff import ExponentialBackoff
from ._redis.servers import Eviction
from ._shared.exclusive import OnBusy, exclusive
from ._shared.scheduledbase import ScheduledRun
from ._sync.client import Client
from ._sync.election import Election, Term
from ._sync.grouplock import GroupLock
from ._sync.latch import CountDownLatch
from ._sync.lock import FairLock, Lock
from ._sync.multilock import MultiLock, SupportsLock
from ._sync.redlock import RedlockClient
from ._sync.redlock_lock import RedlockLock
from ._sync.rwlock import ReadLock, ReadWriteLock, WriteLock
from ._sync.scheduled import ScheduledLock
from ._sync.semaphore import LeaseSemaphore, Semaphore
from ._sync.spinlock import SpinLock
from .errors import (
    ArgumentTypeError,
    ClientClosedError,
    EventLoopError,
    EvictionPolicyError,
    InvalidArgumentError,
    LeaseLostError,
    LockTimeoutError,
    LockUpgradeError,
    LossCause,
    NotOwnedError,
    PermissionDeniedError,
    QuorumError,
    RedleaseError,
    RedleaseWarning,
    ReplicaError,
    ServerError,
    ServerUnavailableError,
    StaleTokenError,
    WrongTypeError,
)
from .events import EventKind, Listener, LockEvent
from .stats import (
    EvictionPolicy,
    HolderInfo,
    LatchStatistics,
    Lease,
    LockStatistics,
    SemaphoreStatistics,
)

__all__ = [
    "ArgumentTypeError",
    "AsyncClient",
    "AsyncCountDownLatch",
    "AsyncElection",
    "AsyncFairLock",
    "AsyncGroupLock",
    "AsyncLeaseSemaphore",
    "AsyncLock",
    "AsyncMultiLock",
    "AsyncReadLock",
    "AsyncReadWriteLock",
    "AsyncRedlockClient",
    "AsyncRedlockLock",
    "AsyncScheduledLock",
    "AsyncSemaphore",
    "AsyncSpinLock",
    "AsyncTerm",
    "AsyncWriteLock",
    "Client",
    "ClientClosedError",
    "CountDownLatch",
    "Election",
    "EventKind",
    "EventLoopError",
    "Eviction",
    "EvictionPolicy",
    "EvictionPolicyError",
    "ExponentialBackoff",
    "FairLock",
    "GroupLock",
    "HolderInfo",
    "InvalidArgumentError",
    "LatchStatistics",
    "LayoutName",
    "Lease",
    "LeaseLostError",
    "LeaseSemaphore",
    "Listener",
    "Lock",
    "LockEvent",
    "LockStatistics",
    "LockTimeoutError",
    "LockUpgradeError",
    "LossCause",
    "MultiLock",
    "NotOwnedError",
    "OnBusy",
    "PermissionDeniedError",
    "QuorumError",
    "ReadLock",
    "ReadWriteLock",
    "RedleaseError",
    "RedleaseWarning",
    "RedlockClient",
    "RedlockLock",
    "ReplicaError",
    "ScheduledLock",
    "ScheduledRun",
    "Seconds",
    "Semaphore",
    "SemaphoreStatistics",
    "ServerError",
    "ServerUnavailableError",
    "SpinLock",
    "StaleTokenError",
    "SupportsAsyncLock",
    "SupportsLock",
    "Term",
    "WriteLock",
    "WrongTypeError",
    "__version__",
    "exclusive",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("redlease")
    if name == "locked":  # the decorator's former name (``Lock.locked()`` is the query)
        raise AttributeError("redlease.locked was renamed redlease.exclusive")
    raise AttributeError(f"module 'redlease' has no attribute {name!r}")
