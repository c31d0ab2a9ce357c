"""The asyncio read-write lock: the same names and semantics as ``ReadWriteLock``, owned per
task."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING

from .._core import rwlock as core
from .._core.lock import Status
from .._rwlockbase import RwSideBase
from ..errors import LeaseLostError, LockTimeoutError
from ..options import Seconds
from ..stats import Lease, LockStatistics
from .client import finish_despite_cancel

if TYPE_CHECKING:
    from .client import AsyncClient


class _Side(RwSideBase):
    """One side of an ``AsyncReadWriteLock``, with the plain ``AsyncLock``'s API. A cancelled
    ``acquire`` leaves nothing held; a cancelled ``release`` still completes (bounded)."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> None:
        super().__init__(
            client._state, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )
        self.client = client

    async def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> bool:
        """Take a hold; ``False`` when ``timeout`` ran out (or the lock was held and
        ``blocking`` is false). Without a ``lease`` the watchdog renews the hold."""
        return await self._acquire(blocking, timeout, lease) is not None

    async def _acquire(
        self, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> Lease | None:
        plan = self._plan_acquire(self.client._owner(), blocking, timeout, lease)
        got = self._acquired(plan, await self.client._run(plan.op, self.name, self._replication))
        if got is not None and got.lease is None:
            self.client._watch()
        return got

    async def release(self) -> None:
        """Give back one hold. Raises ``NotOwnedError`` when the calling task holds none,
        ``LeaseLostError`` when its lease was lost meanwhile."""
        plan = self._plan_release(self.client._owner())
        try:
            remaining = await finish_despite_cancel(
                self.client._run(plan.op, self.name, self._replication),
                lambda remaining: self._released(plan, remaining),
            )
        except BaseException as exc:
            self._release_failed(plan, exc)
            raise
        self._released(plan, remaining)

    @asynccontextmanager
    async def hold(
        self, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> AsyncIterator[Lease]:
        """``async with lock.hold(timeout=5) as lease:`` a bounded wait that raises
        ``LockTimeoutError`` when it runs out, then releases on exit."""
        got = await self._acquire(True, timeout, lease)
        if got is None:
            raise LockTimeoutError(
                f"{self._side} lock of {self.rw_name!r} not acquired within {timeout} s",
                name=self.name,
                owner=self.client._owner(),
            )
        try:
            yield got
        finally:
            await self.release()

    async def locked(self) -> bool:
        """Whether anyone holds this side (asks the server)."""
        return (await self._status()).locked

    async def owned(self) -> bool:
        """Whether the calling task holds this side (asks the server)."""
        return await self.hold_count() > 0

    async def hold_count(self) -> int:
        """How many holds the calling task has on this side (asks the server)."""
        return (await self._status()).holders.get(self.client._owner(), 0)

    async def ttl(self) -> float | None:
        """Seconds left on the lease (the read side: the longest reader's); ``None`` when
        nobody holds this side."""
        return (await self._status()).ttl

    async def force_release(self) -> bool:
        """Drop every hold on this side whoever has it and wake waiters; ``True`` if one was
        held."""
        return await self.client._run(core.force_release(self._rw, self._side), self.name)

    @property
    def fencing_token(self) -> int | None:
        """The fencing token of the calling task's hold (``None`` when it holds none)."""
        return self._token(self.client._owner())

    @property
    def lease_lost(self) -> bool:
        """Whether the calling task's hold was found lost and not yet reported by release."""
        return self._lease_lost(self.client._owner())

    async def statistics(self) -> LockStatistics:
        sub = self.client._subscriber
        waiters = sub.waiting(self._rw.channel) if sub is not None else 0
        return self._statistics(self.client._owner(), await self._status(), waiters)

    async def _status(self) -> Status:
        owner = self.client._owner()
        return (await self.client._run(core.status(self._rw, owner), self.name)).side(self._side)

    async def __aenter__(self) -> _Side:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"<redlease.{type(self).__name__} {self.rw_name!r} on {self.client.address}>"


class AsyncReadLock(_Side):
    """The read side of an ``AsyncReadWriteLock``: many tasks (of any client) may hold it at once,
    each under a lease of its own; not while another owner holds the write side, nor, for a
    first hold, while a writer waits in line (writer preference)."""

    _side = core.READ


class AsyncWriteLock(_Side):
    """The write side of an ``AsyncReadWriteLock``: one owner at a time, with no reader but its own
    read holds. Asking for it while holding only the read side raises ``LockUpgradeError``."""

    _side = core.WRITE


class AsyncReadWriteLock:
    """Many readers or one writer, reentrant on both sides, owned per asyncio task.

    ``rw.read_lock()`` and ``rw.write_lock()`` each have the plain ``AsyncLock``'s API. The writer
    may also take the read lock (downgrade: take read, then release write); taking the write
    lock while holding only the read lock raises ``LockUpgradeError``. Writers waiting in line
    go before new readers. Not Redisson's RReadWriteLock layout.
    """

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> None:
        self.client = client
        self._read = AsyncReadLock(
            client, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )
        self._write = AsyncWriteLock(
            client, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )

    @property
    def name(self) -> str:
        return self._read.rw_name

    def read_lock(self) -> AsyncReadLock:
        """The read side (the same object on every call)."""
        return self._read

    def write_lock(self) -> AsyncWriteLock:
        """The write side (the same object on every call)."""
        return self._write

    def __repr__(self) -> str:
        return f"<redlease.AsyncReadWriteLock {self.name!r} on {self.client.address}>"
