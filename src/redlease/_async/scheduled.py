"""Scheduled-job locks (ShedLock's model): a job that every instance runs on the same schedule
runs on one of them per tick."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from .._asyncio.compat import JobDecorator
from .._core.arguments import Seconds
from .._shared.scheduledbase import ScheduledBase, ScheduledRun
from ..errors import LeaseLostError, RedleaseError

if TYPE_CHECKING:
    from .client import AsyncClient

P = ParamSpec("P")
R = TypeVar("R")


class AsyncScheduledLock(ScheduledBase, JobDecorator):
    """The slot of a scheduled job, ShedLock's ``@SchedulerLock``: a job that every instance
    runs at the same times runs on one of them per tick; the others skip it at once, never
    wait.

    As a decorator, the job runs when the slot is free and its result is returned; when
    another instance holds the slot the call returns ``None`` at once. As a context manager,
    ``async with client.scheduled_lock(...) as run:`` gives a ``ScheduledRun``, true when this
    instance got the slot.

    ``at_most_for``: the lock's lease while the job runs, so a dead instance frees the slot
    after that. ``at_least_for``: after a fast run the slot stays taken until that long after
    the job began (the key's TTL set to what is left of it), so instances whose clocks or ticks
    are a little apart do not run the job again. ``keep_alive``: the watchdog renews the lease
    while the job runs, however long (ShedLock's ``KeepAliveLockProvider``); a dead instance
    then frees the slot within the client's ``watchdog_timeout``.

    A skip is logged at INFO and sent to the client's listeners as a ``skipped`` event. A
    decorated job that has a ``fencing_token`` parameter is given its run's token. The slot
    is per name, whoever asks: a task that already runs the job finds it taken too.
    A plain function decorated on an ``AsyncClient`` runs in the event loop, as it would
    undecorated (make a long one a coroutine function, or call ``asyncio.to_thread`` in it).
    """

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        at_most_for: Seconds | None = None,
        at_least_for: Seconds = 0,
        keep_alive: bool = False,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> None:
        super().__init__(
            client._state,
            name,
            at_most_for=at_most_for,
            at_least_for=at_least_for,
            keep_alive=keep_alive,
        )
        self.client = client
        """The client that made it."""
        self._lock = client.lock(name, lease=self._lease, on_lease_lost=on_lease_lost)
        self._entered: dict[str, list[AbstractAsyncContextManager[ScheduledRun]]] = {}
        """The runs entered by ``async with self``, per owner (task; a list: nested ones)."""

    @property
    def name(self) -> str:
        """The job's lock name, as given."""
        return self._lock.name

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[ScheduledRun]:
        """Try the slot once; run the block; free the slot, or keep it what is left of
        ``at_least_for``."""
        lock = self._lock
        started = time.monotonic()
        got = await lock._acquire(False, None, None)
        if got is not None and got.hold_count > 1:
            await lock.release()  # the calling task runs the job already: taken
            got = None
        if got is None:
            self._skipped(self.name, self.client._owner(), started)
            yield ScheduledRun(self.name, False)
            return
        acquired_at = time.monotonic()
        try:
            yield ScheduledRun(self.name, True, got.fencing_token)
        finally:
            await self._end(acquired_at)

    async def _end(self, acquired_at: float) -> None:
        kept = self._kept_for(acquired_at)
        try:
            await self._lock.release(keep_for=kept if kept > 0 else None)
        except RedleaseError as exc:
            self._end_failed(self.name, exc)

    async def __aenter__(self) -> ScheduledRun:
        slot = self._slot()
        run = await slot.__aenter__()
        self._entered.setdefault(self.client._owner(), []).append(slot)
        return run

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        here = self.client._owner()
        entered = self._entered[here]
        slot = entered.pop()
        if not entered:
            del self._entered[here]
        return await slot.__aexit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return (
            f"<redlease.AsyncScheduledLock {self.name!r} at_most_for={self.at_most_for:g}"
            f" at_least_for={self.at_least_for:g} on {self.client.address}>"
        )
