"""Several locks taken all-or-nothing: ``AsyncMultiLock(*locks)``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Protocol

from .._asyncio import compat
from .._core.arguments import Seconds, optional_seconds, wait_args
from .._core.log import log
from .._shared.keep import keep_ms
from .._shared.lockbase import not_acquired
from .._shared.multilockbase import check_members, first_error, order_key
from ..errors import InvalidArgumentError, LockTimeoutError
from .shared import AsyncHeld


class SupportsAsyncLock(Protocol):
    """What a member needs: a name and the lock calls (``AsyncLock``, ``AsyncRedlockLock``, ...)."""

    @property
    def name(self) -> str:
        """The lock's name (the multi-lock takes its members in the order of their names)."""
        ...

    async def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, *, lease: Seconds | None = None
    ) -> bool:
        """Take a hold, as ``AsyncLock.acquire``."""
        ...

    async def release(self, *, keep_for: Seconds | None = None) -> None:
        """Give back one hold, as ``AsyncLock.release`` (``keep_for``: keep it taken)."""
        ...


class AsyncMultiLock(AsyncHeld):
    """Several locks (any names, any servers, single-master or Redlock) held together.

    ``acquire`` takes every member or none within one ``timeout``: members are taken in a
    fixed order (by name), and when one cannot be had, or raises, the ones already taken are
    released before returning ``False`` or raising. ``release`` releases every member, even
    when some fail, then raises the first failure. Reentrant as its members are.
    A cancelled ``acquire`` gives back what it took before the cancellation propagates; a
    cancelled ``release`` still releases every member (each bounded) before it does.
    """

    def __init__(self, *locks: SupportsAsyncLock) -> None:
        check_members(locks)
        self.locks = locks
        """The locks, in the order given (taken in a fixed order of their own)."""
        self._order = sorted(locks, key=order_key)

    @compat.owned_by_caller  # ASYNC
    async def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, *, lease: Seconds | None = None
    ) -> bool:
        """Take every member; ``False`` (holding none) when ``timeout`` ran out or, with
        ``blocking`` false or ``timeout=0`` (a single try of each), when a member is held
        elsewhere.

        Args:
            blocking: ``False``: a single try of each member.
            timeout: Seconds to wait at most for all of them; ``None``: as long as it takes.
            lease: Applies to each member; ``None``: each member's own default.

        Returns:
            ``True`` when the calling task holds every member; ``False`` holding none."""
        blocking, wait = wait_args(blocking, timeout)
        optional_seconds(lease, "lease")
        deadline = None if wait is None else time.monotonic() + wait
        taken: list[SupportsAsyncLock] = []
        try:
            for lock in self._order:
                if not await _take(lock, blocking, deadline, lease):
                    break
                taken.append(lock)
        finally:
            if len(taken) < len(self._order):  # never left half-held, whatever happened
                await self._release_all(taken, raise_errors=False)
        return len(taken) == len(self._order)

    @asynccontextmanager
    async def hold(
        self, *, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> AsyncIterator[None]:
        """``async with lock.hold(timeout=5):`` as ``AsyncLock.hold``, of every member: a
        bounded wait that raises ``LockTimeoutError`` when it runs out, then releases on exit.

        Args (keyword-only, in ``acquire``'s order):
            blocking: ``False``: a single try.
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the hold lasts, not renewed; ``None``: renewed by the watchdog.

        Raises:
            LockTimeoutError: the lock was not acquired in time (or at the single try).
            InvalidArgumentError: a bad ``timeout`` or ``lease``."""
        if not await self.acquire(blocking, timeout, lease=lease):
            names = ", ".join(lock.name for lock in self.locks)
            raise LockTimeoutError(not_acquired(blocking, timeout), name=names)
        try:
            yield
        finally:
            await self.release()

    @compat.owned_by_caller  # ASYNC
    async def release(self, *, keep_for: Seconds | None = None) -> None:
        """Release every member (in reverse order), even when some fail; then raise the first
        failure (``NotOwnedError``, ``LeaseLostError``, ``QuorumError``, ...).

        Args:
            keep_for: Seconds: every member's last hold goes but each member stays taken, by
                no one, that much longer (``AsyncLock.release(keep_for=)``; a Redlock member
                on a majority of its masters): nobody takes any of them meanwhile. A member
                that cannot be kept (a read-write lock's side, the Redisson layout, a
                re-entered hold) is released plainly and its ``InvalidArgumentError`` raised
                after every member had its turn. ``0`` is a plain release.

        Raises:
            InvalidArgumentError: a bad ``keep_for`` (before any member is released), or a
                member that could not be kept (released plainly)."""
        keep_ms(keep_for)  # a bad value is refused before any member is released
        await self._release_all(self._order, raise_errors=True, keep_for=keep_for)

    async def _release_all(
        self,
        locks: Iterable[SupportsAsyncLock],
        *,
        raise_errors: bool,
        keep_for: Seconds | None = None,
    ) -> None:
        # in the caller's task (a hold belongs to its task)
        errors: list[BaseException] = []
        # each member's release completes even when cancelled, and a cancellation waits
        # until every member had its turn
        cancelled: compat.Cancelled | None = None  # ASYNC
        for lock in reversed(list(locks)):
            try:
                await _give_back(lock, keep_for, errors)
            except compat.Cancelled as exc:  # ASYNC
                cancelled = exc
            except Exception as exc:
                errors.append(exc)
        if cancelled is not None:  # ASYNC
            for error in errors:
                log.warning("AsyncMultiLock release (cancelled): a member failed: %r", error)
            raise cancelled
        if errors and raise_errors:
            raise first_error(errors, "AsyncMultiLock release")
        for error in errors:
            log.warning(
                "AsyncMultiLock: giving back %r after a failed acquire failed: %r", self, error
            )

    def __repr__(self) -> str:
        return f"<redlease.AsyncMultiLock {[lock.name for lock in self.locks]!r}>"


async def _give_back(
    lock: SupportsAsyncLock, keep_for: Seconds | None, errors: list[BaseException]
) -> None:
    if not keep_for:
        await lock.release()
        return
    try:
        await lock.release(keep_for=keep_for)
    except InvalidArgumentError as exc:  # refused before anything was sent: still held
        errors.append(exc)
        await lock.release()


async def _take(
    lock: SupportsAsyncLock, blocking: bool, deadline: float | None, lease: Seconds | None
) -> bool:
    if not blocking:
        return await lock.acquire(blocking=False, lease=lease)
    if deadline is None:
        return await lock.acquire(lease=lease)
    remaining = deadline - time.monotonic()
    if remaining <= 0:  # out of time: one last try, no wait
        return await lock.acquire(blocking=False, lease=lease)
    return await lock.acquire(timeout=remaining, lease=lease)
