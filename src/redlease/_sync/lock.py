"""The thread-based reentrant lock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING

from .._core import lock as core
from .._lockbase import LockBase, fair_layout
from ..errors import LeaseLostError, LockTimeoutError
from ..options import Seconds
from ..stats import Lease, LockStatistics

if TYPE_CHECKING:
    from .client import Client


class Lock(LockBase):
    """A reentrant lease lock, owned per thread, in Redisson's RLock layout.

    ``with lock:`` waits as long as it takes; ``lock.acquire(timeout=5, lease=10)`` is
    Redisson's ``tryLock(5, 10, SECONDS)``; ``with lock.hold(timeout=5):`` raises
    ``LockTimeoutError`` when the wait runs out.
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
        super().__init__(
            client._state,
            name,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
            cluster=client.cluster,
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
        try:
            result = self.client._run(plan.op, self.name, self._replication)
        except BaseException as exc:
            self._acquire_raised(plan, exc)
            raise
        got = self._acquired(plan, result)
        if got is not None and got.lease is None:
            self.client._watch()
        return got

    def release(self) -> None:
        """Give back one hold. Raises ``NotOwnedError`` when the calling thread holds none,
        ``LeaseLostError`` when its lease was lost meanwhile. After a release that raised
        ``ServerUnavailableError``, this call is that release sent again."""
        self._release(retry=True)

    def _release(self, *, retry: bool) -> None:
        plan = self._plan_release(self.client._owner(), retry=retry)
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
                self._not_acquired(timeout),
                name=self.name,
                owner=self.client._owner(),
            )
        try:
            yield got
        finally:
            self._release(retry=False)

    def locked(self) -> bool:
        """Whether anyone holds the lock (asks the server)."""
        return self._status().locked

    def owned(self) -> bool:
        """Whether the calling thread holds the lock (asks the server)."""
        return self.hold_count() > 0

    def hold_count(self) -> int:
        """How many holds the calling thread has on the lock (asks the server)."""
        return self._status().holders.get(self.client._owner(), 0)

    def ttl(self) -> float | None:
        """Seconds left on the lease; ``None`` when the lock is free."""
        return self._status().ttl

    def force_release(self) -> bool:
        """Delete the lock whoever holds it and wake its waiters; ``True`` if it was held."""
        return self.client._run(self._force_release_op(), self.name)

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
        waiters = sub.waiting(self._wait_channel) if sub is not None else 0
        return self._statistics(self.client._owner(), self._status(), waiters)

    def _status(self) -> core.Status:
        owner = self.client._owner()
        return self.client._run(self._status_op(owner), self.name)

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release(retry=False)

    def __repr__(self) -> str:
        return f"<redlease.Lock {self.name!r} on {self.client.address}>"


class FairLock(Lock):
    """A reentrant lock that is strictly first come, first served across all clients.

    A blocking acquire takes a place in a line kept on the server; a release hands the lock to
    the first live waiter and wakes only it; a newcomer never takes a free lock ahead of a live
    waiter. A waiter that gives up leaves the line; one that dies loses its place within 20 s
    (it must re-check every 5 s to keep it).

    ``layout="redisson"`` keeps the line in Redisson's ``RedissonFairLock`` layout instead,
    shared with Java services on the same name (their waiters and ours in one line): a
    release wakes the first waiter, which takes the lock with its next try, and a place
    lapses by Redisson's rule (5 minutes, or the acquire's timeout, after the one before it).
    """

    _fair = True

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
        layout: str = "redlease",
    ) -> None:
        LockBase.__init__(
            self,
            client._state,
            name,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
            cluster=client.cluster,
            layout=fair_layout(layout),
        )
        self.client = client
