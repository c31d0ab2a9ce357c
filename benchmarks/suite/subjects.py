"""The locks under test: each a factory of a subject to drive, sync and asyncio."""

import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis

import redlease

from .common import COMPARE_AND_DELETE, LEASE_S

# --- locks under test (sync) ----------------------------------------------------------------


@dataclass
class Subject:
    """One lock to drive: ``acquire(timeout)`` (``None``: wait as long as it takes)."""

    acquire: Callable[[float | None], bool]
    release: Callable[[], None]
    redis: redis.Redis
    """A connection of the subject's own, for the counter in the critical section."""
    close: Callable[[], None]


def make_redlease(url: str, name: str, **kw: Any) -> Subject:
    client = redlease.Client.from_url(url, **kw)
    lock = client.lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redlease_fixed_lease(url: str, name: str, **kw: Any) -> Subject:
    """Redisson's ``tryLock(wait, lease)``: a lease of its own (no watchdog), as
    python-redis-lock's ``expire``; a waiter is handed the lock with that lease (goal 5)."""
    client = redlease.Client.from_url(url, **kw)
    lock = client.lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout, lease=LEASE_S)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redlease_fair(url: str, name: str, **kw: Any) -> Subject:
    client = redlease.Client.from_url(url, **kw)
    lock = client.fair_lock(name)

    def acquire(timeout: float | None) -> bool:
        return lock.acquire(timeout=timeout)

    return Subject(acquire, lock.release, client.redis, client.close)


def make_redis_py(url: str, name: str, **kw: Any) -> Subject:
    conn = redis.Redis.from_url(url, **kw)
    lock = conn.lock(name, timeout=LEASE_S)  # default sleep=0.1 s between polls

    def acquire(timeout: float | None) -> bool:
        return bool(lock.acquire(blocking=True, blocking_timeout=timeout))

    return Subject(acquire, lock.release, conn, conn.close)


def make_python_redis_lock(url: str, name: str, **kw: Any) -> Subject:
    import redis_lock  # type: ignore[import-untyped]  # optional: skipped when missing

    conn = redis.Redis.from_url(url, **kw)
    lock = redis_lock.Lock(conn, name, expire=LEASE_S)

    def acquire(timeout: float | None) -> bool:
        if timeout is None:
            return bool(lock.acquire(blocking=True))
        # whole seconds, and never above expire (else it raises TimeoutTooLarge)
        return bool(lock.acquire(blocking=True, timeout=min(LEASE_S, math.ceil(timeout))))

    return Subject(acquire, lock.release, conn, conn.close)


def make_raw_floor(url: str, name: str, **kw: Any) -> Subject:
    """The least a correct lease lock can do: SET NX PX, then compare-and-delete."""
    conn = redis.Redis.from_url(url, **kw)
    delete = conn.register_script(COMPARE_AND_DELETE)
    token = uuid.uuid4().hex

    def acquire(timeout: float | None) -> bool:
        return bool(conn.set(name, token, nx=True, px=LEASE_S * 1000))

    def release() -> None:
        if not delete(keys=[name], args=[token]):
            raise RuntimeError("raw floor: lock was not held at release")

    return Subject(acquire, release, conn, conn.close)


@dataclass(frozen=True)
class LockKind:
    label: str
    factory: Callable[..., Subject]
    """``(url, name, **redis_kwargs) -> Subject``"""
    needs: str | None = None
    """A module that must be importable, else the lock is skipped with a note."""

    def available(self) -> bool:
        return self.needs is None or importlib.util.find_spec(self.needs) is not None


SYNC_LOCKS: dict[str, LockKind] = {
    "redlease": LockKind("redlease", make_redlease),
    "redlease-lease": LockKind("redlease lease=30s", make_redlease_fixed_lease),
    "redlease-fair": LockKind("redlease fair_lock", make_redlease_fair),
    "redis-py": LockKind("redis-py Lock", make_redis_py),
    "python-redis-lock": LockKind("python-redis-lock", make_python_redis_lock, "redis_lock"),
    "raw": LockKind("raw floor (SET NX + EVALSHA)", make_raw_floor),
}
UNCONTENDED = ["redlease", "redis-py", "python-redis-lock", "raw"]
CONTENDED = ["redlease", "redlease-lease", "redlease-fair", "redis-py", "python-redis-lock"]

# --- locks under test (asyncio, only when redlease.AsyncClient exists) ----------------------


@dataclass
class AsyncSubject:
    acquire: Callable[[], Awaitable[bool]]
    release: Callable[[], Awaitable[Any]]
    close: Callable[[], Awaitable[None]]
    redis: Any
    """The ``redis.asyncio.Redis`` the subject talks through."""


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


async def make_async_redlease(url: str, name: str, **kw: Any) -> AsyncSubject:
    cls: Any = redlease.AsyncClient
    if hasattr(cls, "from_url"):
        client = cls.from_url(url, **kw)
    else:
        import redis.asyncio

        client = cls(redis.asyncio.Redis.from_url(url, **kw))
    await _maybe_await(client)  # in case from_url is a coroutine
    lock = client.lock(name)

    async def acquire() -> bool:
        return bool(await lock.acquire())

    async def close() -> None:
        closer = getattr(client, "aclose", None) or client.close
        await _maybe_await(closer())

    return AsyncSubject(acquire, lock.release, close, client.redis)


async def make_async_raw_floor(url: str, name: str, **kw: Any) -> AsyncSubject:
    import redis.asyncio

    conn = redis.asyncio.Redis.from_url(url, **kw)
    delete = conn.register_script(COMPARE_AND_DELETE)
    token = uuid.uuid4().hex

    async def acquire() -> bool:
        return bool(await conn.set(name, token, nx=True, px=LEASE_S * 1000))

    async def release() -> None:
        if not await delete(keys=[name], args=[token]):
            raise RuntimeError("raw floor: lock was not held at release")

    async def close() -> None:
        await conn.aclose()

    return AsyncSubject(acquire, release, close, conn)


async def make_async_redis_py(url: str, name: str, **kw: Any) -> AsyncSubject:
    """redis-py's asyncio ``Lock`` (``redis.asyncio.lock.Lock``): the peer of redlease's
    ``AsyncClient`` a user would pick instead."""
    import redis.asyncio

    conn = redis.asyncio.Redis.from_url(url, **kw)
    lock = conn.lock(name, timeout=LEASE_S)

    async def acquire() -> bool:
        return bool(await lock.acquire(blocking=True))

    async def close() -> None:
        await conn.aclose()

    return AsyncSubject(acquire, lock.release, close, conn)


ASYNC_LOCKS: dict[str, Callable[..., Awaitable[AsyncSubject]]] = {
    "raw": make_async_raw_floor,
    "redlease": make_async_redlease,
    "redis-py": make_async_redis_py,
}
"""``(url, name, **redis_kwargs) -> AsyncSubject`` by ``SYNC_LOCKS`` key (for its label)."""


def async_available() -> bool:
    return hasattr(redlease, "AsyncClient")
