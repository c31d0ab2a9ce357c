"""The thread-based read-write lock: many readers or one writer, owned per thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING

from .._core import rwlock as core
from .._core.lock import Status
from .._rwlockbase import RwSideBase
from ..errors import LeaseLostError, LockTimeoutError
from ..options import Seconds
from ..stats import Lease, LockStatistics

if TYPE_CHECKING:
    from .client import Client


class _Side(RwSideBase):
    """One side of a ``ReadWriteLock``, with the plain ``Lock``'s API."""

    def __init__(
        self,
        client: Client,
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

    def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> bool:
        """Take a hold; ``False`` when ``timeout`` ran out (or the lock was held and
        ``blocking`` is false). Without a ``lease`` the watchdog renews the hold."""
        return self._acquire(blocking, timeout, lease) is not None

    def _acquire(
        self, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> Lease | None:
        plan = self._plan_acquire(self.client._owner(), blocking, timeout, lease)
        got = self._acquired(plan, self.client._run(plan.op, self.name, self._replication))
        if got is not None and got.lease is None:
            self.client._watch()
        return got

    def release(self) -> None:
        """Give back one hold. Raises ``NotOwnedError`` when the calling thread holds none,
        ``LeaseLostError`` when its lease was lost meanwhile."""
        plan = self._plan_release(self.client._owner())
        try:
            remaining = self.client._run(plan.op, self.name, self._replication)
        except BaseException as exc:
            self._release_failed(plan, exc)
            raise
        self._released(plan, remaining)

    @contextmanager
    def hold(self, timeout: Seconds | None = None, lease: Seconds | None = None) -> Iterator[Lease]:
        """``with lock.hold(timeout=5) as lease:`` a bounded wait that raises
        ``LockTimeoutError`` when it runs out, then releases on exit."""
        got = self._acquire(True, timeout, lease)
        if got is None:
            raise LockTimeoutError(
                f"{self._side} lock of {self.rw_name!r} not acquired within {timeout} s",
                name=self.name,
                owner=self.client._owner(),
            )
        try:
            yield got
        finally:
            self.release()

    def locked(self) -> bool:
        """Whether anyone holds this side (asks the server)."""
        return self._status().locked

    def owned(self) -> bool:
        """Whether the calling thread holds this side (asks the server)."""
        return self.hold_count() > 0

    def hold_count(self) -> int:
        """How many holds the calling thread has on this side (asks the server)."""
        return self._status().holders.get(self.client._owner(), 0)

    def ttl(self) -> float | None:
        """Seconds left on the lease (the read side: the longest reader's); ``None`` when
        nobody holds this side."""
        return self._status().ttl

    def force_release(self) -> bool:
        """Drop every hold on this side whoever has it and wake waiters; ``True`` if one was
        held."""
        return self.client._run(core.force_release(self._rw, self._side), self.name)

    @property
    def fencing_token(self) -> int | None:
        """The fencing token of the calling thread's hold (``None`` when it holds none)."""
        return self._token(self.client._owner())

    @property
    def lease_lost(self) -> bool:
        """Whether the calling thread's hold was found lost and not yet reported by release."""
        return self._lease_lost(self.client._owner())

    def statistics(self) -> LockStatistics:
        sub = self.client._subscriber
        waiters = sub.waiting(self._rw.channel) if sub is not None else 0
        return self._statistics(self.client._owner(), self._status(), waiters)

    def _status(self) -> Status:
        owner = self.client._owner()
        return self.client._run(core.status(self._rw, owner), self.name).side(self._side)

    def __enter__(self) -> _Side:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<redlease.{type(self).__name__} {self.rw_name!r} on {self.client.address}>"


class ReadLock(_Side):
    """The read side of a ``ReadWriteLock``: many threads (of any client) may hold it at once,
    each under a lease of its own; not while another owner holds the write side, nor, for a
    first hold, while a writer waits in line (writer preference)."""

    _side = core.READ


class WriteLock(_Side):
    """The write side of a ``ReadWriteLock``: one owner at a time, with no reader but its own
    read holds. Asking for it while holding only the read side raises ``LockUpgradeError``."""

    _side = core.WRITE


class ReadWriteLock:
    """Many readers or one writer, reentrant on both sides, owned per thread.

    ``rw.read_lock()`` and ``rw.write_lock()`` each have the plain ``Lock``'s API. The writer
    may also take the read lock (downgrade: take read, then release write); taking the write
    lock while holding only the read lock raises ``LockUpgradeError``. Writers waiting in line
    go before new readers. Not Redisson's RReadWriteLock layout.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> None:
        self.client = client
        self._read = ReadLock(
            client, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )
        self._write = WriteLock(
            client, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
        )

    @property
    def name(self) -> str:
        return self._read.rw_name

    def read_lock(self) -> ReadLock:
        """The read side (the same object on every call)."""
        return self._read

    def write_lock(self) -> WriteLock:
        """The write side (the same object on every call)."""
        return self._write

    def __repr__(self) -> str:
        return f"<redlease.ReadWriteLock {self.name!r} on {self.client.address}>"
