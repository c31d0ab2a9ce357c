"""The read-write lock: many readers or one writer, owned per task."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core import rwlock as core
from .._core.arguments import LayoutName, Seconds
from .._core.arguments import layout as check_layout
from .._shared.rwlockbase import RwSideBase
from ..errors import LeaseLostError
from .lock import AsyncLock

if TYPE_CHECKING:
    from .client import AsyncClient


class _Side(RwSideBase, AsyncLock):
    """One side of a read-write lock, with the plain ``AsyncLock``'s API (and methods)."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
        layout: LayoutName = "redlease",
    ) -> None:
        AsyncLock.__init__(
            self, client, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )
        self._init_side(layout)

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
    go before new readers.

    ``layout="redisson"`` keeps Redisson's RReadWriteLock layout instead, so Java services
    using Redisson share the lock: no writer preference then (see ``_core.rwlock_redisson``).
    """

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
        layout: LayoutName = "redlease",
    ) -> None:
        self.client = client
        """The client that made it."""
        layout = check_layout(layout)
        self._read = AsyncReadLock(
            client,
            name,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
            layout=layout,
        )
        self._write = AsyncWriteLock(
            client,
            name,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
            layout=layout,
        )

    @property
    def name(self) -> str:
        """The read-write lock's name, as given (both sides share it)."""
        return self._read.rw_name

    def read_lock(self) -> AsyncReadLock:
        """The read side (the same object on every call)."""
        return self._read

    def write_lock(self) -> AsyncWriteLock:
        """The write side (the same object on every call)."""
        return self._write

    def __repr__(self) -> str:
        return f"<redlease.AsyncReadWriteLock {self.name!r} on {self.client.address}>"
