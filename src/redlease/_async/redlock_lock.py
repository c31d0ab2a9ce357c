"""The Redlock lock: one lock on N independent masters, held on a majority (the client and
its fan-out are in ``redlock``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from .._asyncio import compat
from .._asyncio.cancel import finish_despite_cancel
from .._core import redlock as core
from .._core.arguments import Seconds
from .._shared.lockbase import not_acquired
from .._shared.redlockbase import RedlockLockBase
from ..errors import LeaseLostError, LockTimeoutError
from .shared import AsyncHeld, AsyncLockQueries

if TYPE_CHECKING:
    from .redlock import AsyncRedlockClient


class AsyncRedlockLock(RedlockLockBase, AsyncHeld, AsyncLockQueries):
    """A reentrant lease lock held on a majority of independent masters, owned per asyncio task.

    The same calls as ``AsyncLock``: ``acquire(blocking, timeout, *, lease)``, ``release()``,
    ``async with``, ``hold()``, ``locked()``, ``owned()``, ``ttl()``, ``hold_count()``,
    ``force_release()``.
    It hands out no fencing token: a token that stays increasing needs a single master.
    Cancelling ``acquire`` gives back what the masters granted before the cancellation
    propagates; a cancelled ``release`` still completes (bounded).
    """

    def __init__(
        self,
        client: AsyncRedlockClient,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> None:
        super().__init__(
            client._state,
            client.addresses,
            client.master_timeout,
            name,
            lease=lease,
            on_lease_lost=on_lease_lost,
        )
        self.client = client
        """The client that made it."""

    @compat.owned_by_caller  # ASYNC
    async def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, *, lease: Seconds | None = None
    ) -> bool:
        """Take a hold on a majority; ``False`` when ``timeout`` ran out or (``blocking``
        false, or ``timeout=0``: a single try) the lock is held. Without a ``lease`` the
        watchdog renews the hold.

        Args:
            blocking: ``False``: a single try.
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the hold lasts, not renewed; ``None``: renewed by the watchdog.

        Returns:
            ``True`` when the calling task holds the lock on a majority of the masters.

        Raises:
            QuorumError: no majority could be had (too few masters answered); ``.outcomes``
                says what each master answered.
            InvalidArgumentError: a bad ``timeout`` or ``lease``."""
        plan = self._plan_acquire(self.client._owner(), blocking, timeout, lease)
        got = self._acquired(plan, await self.client._run(plan.op, self.name))
        if got:
            # reported, not renewed, if its task ends holding it
            self.client._mind_owner()  # ASYNC
            if plan.lease is None:
                self.client._watch()
        return got

    @compat.owned_by_caller  # ASYNC
    async def release(self, *, keep_for: Seconds | None = None) -> None:
        """Give back one hold on every master.

        Args:
            keep_for: Seconds: the last hold goes but each master keeps the lock taken, by
                no one, that much longer, then lets it expire, as ``AsyncLock.release``'s
                ``keep_for`` does on one master: nobody takes it meanwhile (another owner
                needs a majority, which meets a kept master), the caller included, and no
                waiter is woken. Judged as a plain release: kept on a majority is a success.
                Only the last hold; ``0`` is a plain release.

        Raises:
            NotOwnedError: the calling task holds none.
            LeaseLostError: a majority of the masters no longer has it.
            QuorumError: fewer than a majority could confirm the release.
            InvalidArgumentError: a bad ``keep_for``, or ``keep_for`` on a hold that is not
                the caller's last."""
        plan = self._plan_release(self.client._owner(), keep_for)
        try:
            result = await finish_despite_cancel(
                self.client._run(plan.op, self.name), lambda result: self._released(plan, result)
            )
        except BaseException as exc:
            self._release_failed(plan, exc)
            raise
        self._released(plan, result)

    @asynccontextmanager
    async def hold(
        self, *, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> AsyncIterator[None]:
        """``async with lock.hold(timeout=5):`` as ``AsyncLock.hold``: a bounded wait that
        raises ``LockTimeoutError`` when it runs out, then releases on exit.

        Args (keyword-only, in ``acquire``'s order):
            blocking: ``False``: a single try.
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the hold lasts, not renewed; ``None``: renewed by the watchdog.

        Raises:
            LockTimeoutError: the lock was not acquired in time (or at the single try).
            InvalidArgumentError: a bad ``timeout`` or ``lease``."""
        if not await self.acquire(blocking, timeout, lease=lease):
            raise LockTimeoutError(
                not_acquired(blocking, timeout), name=self.name, owner=self.client._owner()
            )
        try:
            yield
        finally:
            await self.release()

    async def force_release(self) -> bool:
        """Delete the lock on every master whoever holds it; ``True`` if any master had it."""
        op = core.force_release(self._keys, self._masters, master_timeout=self._master_timeout)
        return await self.client._run(op, self.name)

    @property
    def lease_lost(self) -> bool:
        """Whether the calling task's hold was found lost and not yet reported by release."""
        return self._lease_lost(self.client._owner())

    async def _status(self) -> core.MajorityStatus:
        op = core.status(self._keys, self._masters, master_timeout=self._master_timeout)
        return await self.client._run(op, self.name)

    def _caller(self) -> str:
        return self.client._owner()

    def __repr__(self) -> str:
        return f"<redlease.AsyncRedlockLock {self.name!r} on {self._where()}>"
