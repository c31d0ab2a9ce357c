"""Several locks taken all-or-nothing: ``MultiLock(*locks)``."""

from __future__ import annotations

import time
from collections.abc import Iterable
from types import TracebackType
from typing import Protocol

from .._shell import log
from ..errors import InvalidArgumentError
from ..options import Seconds, optional_seconds, wait_args


class SupportsLock(Protocol):
    """What a member needs: a name and the lock calls (``Lock``, ``RedlockLock``, ...)."""

    @property
    def name(self) -> str: ...

    def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> bool: ...

    def release(self) -> None: ...


def order_key(lock: object) -> tuple[str, str]:
    """Members are taken in one order everywhere (by name, then where they live), so two
    multi-locks over the same locks, given in different orders, cannot deadlock."""
    client = getattr(lock, "client", None)
    return (str(getattr(lock, "name", "")), str(getattr(client, "address", "")))


def check_members(locks: tuple[object, ...]) -> None:
    if not locks:
        raise InvalidArgumentError("a MultiLock needs at least one lock")
    for lock in locks:
        if not callable(getattr(lock, "acquire", None)) or not callable(
            getattr(lock, "release", None)
        ):
            raise InvalidArgumentError(f"{lock!r} is not a lock (no acquire/release)")


def first_error(errors: list[BaseException], what: str) -> BaseException:
    """The error to raise after trying every member; the others are logged."""
    for extra in errors[1:]:
        log.warning("%s: another member failed too: %r", what, extra)
    return errors[0]


class MultiLock:
    """Several locks (any names, any servers, single-master or Redlock) held together.

    ``acquire`` takes every member or none within one ``timeout``: members are taken in a
    fixed order (by name), and when one cannot be had, or raises, the ones already taken are
    released before returning ``False`` or raising. ``release`` releases every member, even
    when some fail, then raises the first failure. Reentrant as its members are.
    """

    def __init__(self, *locks: SupportsLock) -> None:
        check_members(locks)
        self.locks = locks
        self._order = sorted(locks, key=order_key)

    def acquire(
        self, blocking: bool = True, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> bool:
        """Take every member; ``False`` (holding none) when ``timeout`` ran out or, with
        ``blocking`` false, when a member is held elsewhere. ``lease`` applies to each member
        (``None``: each member's own default)."""
        wait = wait_args(blocking, timeout)
        optional_seconds(lease, "lease")
        deadline = None if wait is None else time.monotonic() + wait
        taken: list[SupportsLock] = []
        try:
            for lock in self._order:
                if not _take(lock, blocking, deadline, lease):
                    break
                taken.append(lock)
        finally:
            if len(taken) < len(self._order):  # never left half-held, whatever happened
                self._release_all(taken, raise_errors=False)
        return len(taken) == len(self._order)

    def release(self) -> None:
        """Release every member (in reverse order), even when some fail; then raise the first
        failure (``NotOwnedError``, ``LeaseLostError``, ``QuorumError``, ...)."""
        self._release_all(self._order, raise_errors=True)

    def _release_all(self, locks: Iterable[SupportsLock], *, raise_errors: bool) -> None:
        errors: list[BaseException] = []
        for lock in reversed(list(locks)):
            try:
                lock.release()
            except Exception as exc:
                errors.append(exc)
        if errors and raise_errors:
            raise first_error(errors, "MultiLock release")
        for error in errors:
            log.warning("MultiLock: giving back %r after a failed acquire failed: %r", self, error)

    def __enter__(self) -> MultiLock:
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
        return f"<redlease.MultiLock {[lock.name for lock in self.locks]!r}>"


def _take(
    lock: SupportsLock, blocking: bool, deadline: float | None, lease: Seconds | None
) -> bool:
    if not blocking:
        return lock.acquire(blocking=False, lease=lease)
    if deadline is None:
        return lock.acquire(lease=lease)
    remaining = deadline - time.monotonic()
    if remaining <= 0:  # out of time: one last try, no wait
        return lock.acquire(blocking=False, lease=lease)
    return lock.acquire(timeout=remaining, lease=lease)
