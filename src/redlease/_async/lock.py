"""The reentrant lock and the fair lock, owned per task."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from .._asyncio import compat
from .._core import lock as core
from .._core.arguments import LayoutName, Seconds
from .._shared.keep import plan_keep
from .._shared.lockbase import AcquirePlan, LockBase, fair_layout
from ..errors import LeaseLostError, LockTimeoutError
from ..stats import Lease, LockStatistics
from .shared import AsyncHeld, AsyncLockQueries

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncLock(LockBase, AsyncHeld, AsyncLockQueries):
    """A reentrant lease lock, owned per asyncio task, in Redisson's RLock layout.

    ``async with lock:`` waits as long as it takes; ``lock.acquire(timeout=5, lease=10)`` is
    Redisson's ``tryLock(5, 10, SECONDS)``; ``lock.acquire(timeout=0)`` (or
    ``blocking=False``) is ``tryLock()``, a single try; ``async with lock.hold(timeout=5):``
    raises ``LockTimeoutError`` when the wait runs out.
    Cancelling ``acquire`` after the server granted the hold gives it back; a cancelled
    ``release`` still completes (bounded) before the cancellation propagates.
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
        super().__init__(
            client._state,
            name,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
            cluster=client.cluster,
        )
        self.client = client
        """The client that made it."""

    @compat.owned_by_caller  # ASYNC
    async def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, *, lease: Seconds | None = None
    ) -> bool:
        """Take a hold; ``False`` when ``timeout`` ran out (or the lock was held and
        ``blocking`` is false). ``timeout=0`` (or ``blocking=False``) tries once, without
        waiting; ``None`` waits as long as it takes. Without a ``lease`` the watchdog renews
        the hold.

        Args:
            blocking: ``False``: a single try (Redisson's ``tryLock()``).
            timeout: Seconds to wait at most (a ``timedelta`` too); ``None``: as long as it
                takes; ``0``: a single try.
            lease: Seconds the hold lasts, not renewed (Redisson's ``leaseTime``); ``None``:
                the client's ``watchdog_timeout``, renewed by the watchdog until released.

        Returns:
            ``True`` when the calling task holds the lock (once more, if it held it already).

        Raises:
            InvalidArgumentError: a bad ``timeout`` or ``lease`` (nothing is sent).
            ServerUnavailableError: the server could not be reached (a waiter that saw the
                lock held rides out up to 10 s first).
            ReplicaError: fewer replicas than ``replicas`` confirmed the hold (given back).
            ClientClosedError: the client is closed, or was closed while waiting.
        """
        return await self._acquire(blocking, timeout, lease) is not None

    async def _acquire(
        self, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> Lease | None:
        """A blocking acquire by a task that holds nothing here waits in the client's local
        line for this lock, and only the head of the line asks the server (see ``line.py``);
        a try or a re-entry goes straight to the server."""
        owner = self.client._owner()
        line = self._line_for(owner, blocking, timeout, lease)
        if line is None:
            return await self._acquire_now(self._plan_acquire(owner, blocking, timeout, lease))
        key, wait = line
        started = time.monotonic()
        async with self.client._lines.turn(key, self.name, wait) as head:
            if not head:  # the timeout ran out in the local line: nothing was sent
                self._state.acquire_failed(self.name, owner, started, gone=False)
                return None
            return await self._acquire_now(self._plan_head(owner, wait, lease, started))

    async def _acquire_now(self, plan: AcquirePlan) -> Lease | None:
        try:
            result = await self.client._run(plan.op, self.name, self._replication)
        except BaseException as exc:
            self._acquire_raised(plan, exc)
            raise
        got = self._acquired(plan, result)
        if got is not None:
            # reported, not renewed, if its task ends holding it
            self.client._mind_owner()  # ASYNC
            if got.lease is None:
                # the watchdog renews it, and the client listens where a force release tells
                # it (subscribed in the background: no round trip here)
                self.client._watch(listen=self._hold_channel(plan.owner) is not None)
        return got

    @compat.owned_by_caller  # ASYNC
    async def release(self, *, keep_for: Seconds | None = None) -> None:
        """Give back one hold; the lock is free (and the first waiter handed it) when the
        last hold of the calling task goes. After a release that raised
        ``ServerUnavailableError``, this call is that release sent again.

        Args:
            keep_for: Seconds: the last hold goes but the lock stays taken, by no one, that
                much longer (its TTL is set to it), then expires: nobody takes it meanwhile,
                the caller included, and no waiter is woken (each re-checks within its usual
                bound). A scheduled job's ``at_least_for``. Only the last hold of a lock or
                fair lock in the redlease layout; ``0`` is a plain release.

        Raises:
            NotOwnedError: the calling task holds no hold on the lock.
            LeaseLostError: its hold was lost meanwhile (expired, force-released, the
                server's data lost); ``.cause`` says which, when known.
            ServerUnavailableError: the server could not be reached; call ``release()``
                again (or the next ``acquire()`` sends it first).
        """
        await self._release(retry=True, keep_for=keep_for)

    async def _release(self, *, retry: bool, keep_for: Seconds | None = None) -> None:
        owner = self.client._owner()
        kept = None if keep_for is None else plan_keep(self, owner, keep_for)
        plan = kept or self._plan_release(owner, retry=retry)
        try:
            remaining = await self.client._run_kept(
                plan.op,
                plan.again,
                self.name,
                self._replication,
                lambda remaining: self._released(plan, remaining),
            )
        except BaseException as exc:
            self._release_failed(plan, exc)
            raise
        self._released(plan, remaining)

    @asynccontextmanager
    async def hold(
        self, *, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> AsyncIterator[Lease]:
        """``async with lock.hold(timeout=5) as lease:`` a bounded wait that raises
        ``LockTimeoutError`` when it runs out, then releases on exit. ``timeout=0`` or
        ``blocking=False``: a single try, ``LockTimeoutError`` at once when the lock is
        taken.

        Args (keyword-only, in ``acquire``'s order):
            blocking: ``False``: a single try.
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the hold lasts, not renewed; ``None``: renewed by the watchdog.

        Returns:
            A context manager whose value is the ``Lease`` (its ``fencing_token``,
            ``hold_count``, ``ttl``).

        Raises:
            LockTimeoutError: the lock was not acquired in time (or at the single try).
            LeaseLostError: on exit, the hold had been lost meanwhile.
            InvalidArgumentError: a bad ``timeout`` or ``lease``.
            ServerUnavailableError: the server could not be reached.
        """
        got = await self._acquire(blocking, timeout, lease)
        if got is None:
            raise LockTimeoutError(
                self._not_acquired(timeout, blocking),
                name=self.name,
                owner=self.client._owner(),
            )
        try:
            yield got
        finally:
            await self._release(retry=False)

    async def force_release(self) -> bool:
        """Delete the lock whoever holds it and wake its waiters (Redisson's
        ``forceUnlock()``): the holder is told its lease is lost (``on_lease_lost``,
        ``LeaseLostError`` with cause ``forced``). A lock kept taken after its release
        (``release(keep_for=)``, ``statistics().kept_by``) is deleted the same way.

        Returns:
            ``True`` if the lock was held (or kept).
        """
        return await self.client._run(self._force_release_op(), self.name)

    @property
    def fencing_token(self) -> int | None:
        """The fencing token of the calling task's hold (``None`` when it holds none)."""
        return self._token(self.client._owner())

    @property
    def lease_lost(self) -> bool:
        """Whether the calling task's hold was found lost and not yet reported by release."""
        return self._lease_lost(self.client._owner())

    async def statistics(self) -> LockStatistics:
        """The lock as the server has it; ``local_waiters`` counts this client's tasks in
        the local line (its head, which waits on the server, included)."""
        line = self._line
        if line is not None:
            waiters = self.client._lines.waiting(line)
        else:
            sub = self.client._subscriber
            waiters = sub.waiting(self._wait_channel) if sub is not None else 0
        status = await self._status()
        owners = [*status.holders, *([status.kept_by] if status.kept_by else [])]
        infos = await self.client._holder_infos(owners) if owners else {}
        return self._statistics(self.client._owner(), status, waiters, infos)

    async def _status(self) -> core.Status:
        owner = self.client._owner()
        return await self.client._run(self._status_op(owner), self.name)

    def _caller(self) -> str:
        return self.client._owner()

    async def _release_on_exit(self) -> None:
        await self._release(retry=False)

    def __repr__(self) -> str:
        return f"<redlease.AsyncLock {self.name!r} on {self.client.address}>"


class AsyncFairLock(AsyncLock):
    """A reentrant lock that is strictly first come, first served across all clients.

    A blocking acquire takes a place in a line kept on the server; a release hands the lock to
    the first live waiter and wakes only it; a newcomer never takes a free lock ahead of a live
    waiter. A waiter that gives up leaves the line; one whose process dies loses its place
    when a free lock meets it (its client no longer listens).

    ``layout="redisson"`` keeps the line in Redisson's ``RedissonFairLock`` layout instead,
    shared with Java services on the same name (their waiters and ours in one line): a
    release wakes the first waiter, which takes the lock with its next try, and a place
    lapses by Redisson's rule (5 minutes, or the acquire's timeout, after the one before it).
    """

    _fair = True

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
        """The client that made it."""
