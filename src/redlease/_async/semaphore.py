"""The semaphore and the lease semaphore, and the renewer of a client's lease permits."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._asyncio import cancel
from .._asyncio.cancel import finish_despite_cancel
from .._core import arguments, receipts
from .._core import lease_semaphore as lease_core
from .._core import permits as permit_core
from .._core import semaphore as core
from .._core.arguments import Seconds
from .._core.keys import LeaseSemaphoreKeys, SemaphoreKeys
from .._core.lease_semaphore import Granted, ManyReleased
from .._core.log import log
from .._core.permits import PendingUndo, PermitTable
from .._core.requests import Call
from .._shared.semaphorebase import (
    report_expired,
    report_lost,
    report_may_stay_taken,
    report_over_total,
    report_unsettled,
)
from ..errors import InvalidArgumentError, LeaseLostError, LockTimeoutError
from ..stats import SemaphoreStatistics
from .shared import AsyncHeld

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncSemaphore(AsyncHeld):
    """A counting semaphore shared by every client of the server (Redisson's RSemaphore).

    Permits are not owned: any task may release what another took. ``async with sem:`` takes
    one permit (waiting as long as it takes) and gives it back. A holder that crashes keeps its
    permits for good; use ``AsyncLeaseSemaphore`` when that matters.
    Cancelling ``acquire`` after the server granted the permits gives them back; a cancelled
    ``release`` still completes (bounded) before the cancellation propagates.
    """

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        """The client that made it."""
        self._keys = SemaphoreKeys.for_name(arguments.name(name, "semaphore"), client._state.pubsub)

    @property
    def name(self) -> str:
        """The semaphore's name, as given."""
        return self._keys.name

    async def try_set_permits(self, permits: int) -> bool:
        """Set the number of permits if it was never set; ``False`` when it already was."""
        count = arguments.count(permits, "permits")
        return await self.client._run(core.try_set_permits(self._keys, count), self.name)

    async def add_permits(self, permits: int) -> None:
        """Add ``permits`` to the semaphore (to its total too) and wake its waiters. As
        Redisson's ``addPermits``, a negative count takes permits away: the free count may go
        below zero (acquires then wait until releases bring it back up); 0 changes nothing."""
        count = arguments.permits_delta(permits)
        await self.client._run(core.add_permits(self._keys, count), self.name)

    async def set_permits(self, permits: int) -> None:
        """Make the semaphore have ``permits`` in all, those held now included: the free count
        moves by the difference (below zero while more are held than ``permits``)."""
        count = arguments.permits(permits)
        await self.client._run(core.set_permits(self._keys, count), self.name)

    async def acquire(self, permits: int = 1, *, timeout: Seconds | None = None) -> bool:
        """Take ``permits`` at once; ``False`` when ``timeout`` ran out first (``None``: wait
        as long as it takes; ``0``: try once). Waiters are woken by releases (pub/sub) and
        re-check at least every few seconds. ``acquire(0)`` succeeds at once.

        Args:
            permits: How many permits to take, all at once (never some of them).
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.

        Returns:
            ``True`` when the permits were taken.

        Raises:
            InvalidArgumentError: bad ``permits`` or ``timeout``, or more permits than its
                total (set plus added); nothing is taken.
            ServerUnavailableError: the server could not be reached.
            ClientClosedError: the client is closed, or was closed while waiting."""
        count = arguments.permits(permits)
        wait = arguments.wait(timeout)
        request_id = core.new_request_id()
        unsure = receipts.Unsure()  # when a try whose outcome is unknown was first sent
        op = core.acquire(
            self._keys,
            self.client._owner(),
            permits=count,
            timeout=wait,
            request_id=request_id,
            unsure=unsure,
        )
        try:
            return await self.client._run(op, self.name)
        except InvalidArgumentError:
            raise
        except BaseException:  # the outcome is unknown: it may have taken the permits
            undo = core.undo_call(self._keys, count, request_id)
            await self.client._permit_keeper.get().undo(undo, self.name, unsure.since)
            raise

    async def release(self, permits: int = 1) -> None:
        """Give back ``permits``. As in Redisson, more may be given back than were taken (the
        semaphore then has more permits). ``release(0)`` does nothing. A release that pushes
        the free count past the total the semaphore was set to (permits given back twice,
        typically after a failover or a restart lost an acquire) is reported: a WARNING and a
        ``semaphore_total_raised`` event.

        Args:
            permits: How many permits to give back.

        Raises:
            InvalidArgumentError: bad ``permits``, or the semaphore was never set.
            ServerUnavailableError: the server could not be reached."""
        count = arguments.permits(permits)
        if count == 0:
            return
        owner = self.client._owner()

        def report(released: core.Released) -> None:
            listeners = self.client._state.listeners
            report_over_total(listeners, self.name, owner, count, released)

        op = core.release(self._keys, permits=count, request_id=core.new_request_id())
        report(await finish_despite_cancel(self.client._run(op, self.name), report))

    async def drain_permits(self) -> int:
        """Take every permit free now and return how many (Redisson's ``drainPermits``); give
        them back with ``release(n)``."""
        request_id = core.new_request_id()
        unsure = receipts.Unsure()
        op = core.drain_permits(self._keys, request_id, unsure)
        try:
            return await self.client._run(op, self.name)
        except BaseException:  # the outcome is unknown: it may have taken the permits
            undo = core.undo_call(self._keys, 0, request_id)  # (the count is in the receipt)
            await self.client._permit_keeper.get().undo(undo, self.name, unsure.since)
            raise

    async def available(self) -> int:
        """Permits free now (0 when never set)."""
        return (await self.client._run(core.status(self._keys), self.name)).available or 0

    async def statistics(self) -> SemaphoreStatistics:
        """The semaphore as the server has it (permits available) and this client's
        waiters, in one round trip."""
        status = await self.client._run(core.status(self._keys), self.name)
        return core.statistics(status, self.name, _local_waiters(self.client, self._keys.channel))

    @asynccontextmanager
    async def hold(
        self, permits: int = 1, *, timeout: Seconds | None = None
    ) -> AsyncIterator[None]:
        """``async with sem.hold(timeout=5):`` a bounded wait that raises
        ``LockTimeoutError`` when it runs out, then gives the permits back on exit.

        Args:
            permits: How many permits to take, all at once.
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.

        Raises:
            LockTimeoutError: the permits were not taken in time.
            InvalidArgumentError: bad ``permits`` or ``timeout``."""
        if not await self.acquire(permits, timeout=timeout):
            raise _timeout(self.name, self.client._owner(), timeout)
        try:
            yield
        finally:
            await self.release(permits)

    def __repr__(self) -> str:
        return f"<redlease.AsyncSemaphore {self.name!r} on {self.client.address}>"


class AsyncLeaseSemaphore:
    """A semaphore whose every permit has an id and a lease (Redisson's
    RPermitExpirableSemaphore): a crashed holder's permits come back when their lease ends.

    ``acquire()`` returns the permit id (``None`` on timeout). Without a ``lease`` (here or in
    the constructor) the permit lasts the client's ``watchdog_timeout`` and is renewed every
    third of that for as long as it is held; with one, it simply expires. When renewal finds a
    permit gone, ``on_lease_lost`` runs and its ``release`` raises ``LeaseLostError``.
    The one to use for limiting concurrent work across processes.
    Cancelling ``acquire`` after the server granted a permit gives it back; a cancelled
    ``release`` still completes (bounded) before the cancellation propagates.
    """

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> None:
        self.client = client
        """The client that made it."""
        self._keys = LeaseSemaphoreKeys.for_name(
            arguments.name(name, "lease semaphore"), client._state.pubsub
        )
        self._lease = None if lease is None else arguments.lease(lease)
        self._on_lease_lost = on_lease_lost
        self._entered: dict[str, list[str]] = {}  # owner -> permits taken by ``async with``
        self._mutex = threading.Lock()

    @property
    def name(self) -> str:
        """The semaphore's name, as given."""
        return self._keys.name

    async def try_set_permits(self, permits: int) -> bool:
        """Set the number of permits if it was never set; ``False`` when it already was."""
        count = arguments.count(permits, "permits")
        return await self.client._run(
            lease_core.lease_try_set_permits(self._keys, count), self.name
        )

    async def add_permits(self, permits: int) -> None:
        """Add ``permits`` and wake the waiters. As Redisson's ``addPermits``, a negative count
        takes permits away (the free count may go below zero); 0 changes nothing."""
        count = arguments.permits_delta(permits)
        await self.client._run(lease_core.lease_add_permits(self._keys, count), self.name)

    async def set_permits(self, permits: int) -> None:
        """Make the semaphore have ``permits`` in all, leased ones included (Redisson's
        ``setPermits``): the free count becomes ``permits`` less those leased now."""
        count = arguments.permits(permits)
        await self.client._run(lease_core.lease_set_permits(self._keys, count), self.name)

    async def acquire(
        self, *, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> str | None:
        """Take one permit; returns its id, or ``None`` when ``timeout`` ran out first
        (``None``: wait as long as it takes; ``0``: try once).

        Args:
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the permit lasts unless given back or renewed; ``None``: renewed by
                the client's watchdog (as a lock's hold) until given back.

        Returns:
            The permit's id (give it to ``release``; any process may), or ``None``.

        Raises:
            InvalidArgumentError: a bad ``timeout`` or ``lease``.
            ServerUnavailableError: the server could not be reached.
            ClientClosedError: the client is closed, or was closed while waiting."""
        ids = await self._acquire(1, timeout, lease)
        return None if ids is None else ids[0]

    async def acquire_many(
        self, permits: int, *, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> list[str] | None:
        """Take ``permits`` at once, all under one lease (Redisson's ``acquire(permits)``);
        returns their ids, or ``None`` when ``timeout`` ran out first. ``acquire_many(0)``
        returns ``[]`` at once. Give them back with ``release_many(ids)``.

        Args:
            permits: How many permits to take, all at once.
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the permits last; ``None``: renewed by the watchdog.

        Returns:
            The permits' ids, or ``None``.

        Raises:
            InvalidArgumentError: bad ``permits``, ``timeout`` or ``lease``.
            ServerUnavailableError: the server could not be reached."""
        return await self._acquire(arguments.permits_at_once(permits), timeout, lease)

    async def _acquire(
        self, count: int, timeout: Seconds | None, lease: Seconds | None
    ) -> list[str] | None:
        wait = arguments.wait(timeout)
        chosen = self._lease if lease is None else arguments.lease(lease)
        if count == 0:
            return []
        ids = [lease_core.new_permit_id() for _ in range(count)]
        op = lease_core.lease_acquire(
            self._keys,
            self.client._owner(),
            lease=self.client.watchdog_timeout if chosen is None else chosen,
            timeout=wait,
            permit=ids[0],
            more=ids[1:],
        )
        try:
            granted = await self.client._run(op, self.name)
        except InvalidArgumentError:
            raise
        except BaseException:  # the outcome is unknown: it may hold the permits
            # (a give-back needs no receipt: a permit stays in the leases while it is held)
            await self.client._permit_keeper.get().undo(
                lease_core.give_back_call(self._keys, ids), self.name, None
            )
            raise
        if granted is None:
            return None
        self.client._permit_keeper.get().granted(
            self._keys, granted, chosen is None, self._on_lease_lost
        )
        return granted.ids

    async def release(self, permit_id: str) -> None:
        """Give back the permit ``permit_id``.

        Args:
            permit_id: The id ``acquire`` returned.

        Raises:
            LeaseLostError: the permit's lease ran out first.
            InvalidArgumentError: an id that is not a held permit.
            ServerUnavailableError: the server could not be reached."""
        permit = arguments.permit_id(permit_id)
        kept = self.client._permit_keeper.get()
        request_id = kept.begin_release(permit)
        # an error leaves the outcome unknown: the permit stays "releasing" (neither renewed
        # nor reported lost) and a retry sends the same request id, which the server recognises
        op = lease_core.lease_release(self._keys, permit, request_id=request_id)
        code = await finish_despite_cancel(
            self.client._run(op, self.name),
            lambda code: kept.finish(self._keys, permit, code),
        )
        error = kept.finish(self._keys, permit, code)
        if error is not None:
            raise error

    async def release_many(self, permit_ids: Iterable[str]) -> int:
        """Give back several permits at once, all or none (Redisson's ``release(List)``);
        returns how many. When one is not held, none is given back: ``InvalidArgumentError``
        for an id that is not a held permit, else ``LeaseLostError`` for a lease that ran out.
        A retry after an error is recognised as the same release; a cancelled call still
        completes (bounded) before the cancellation propagates.

        Args:
            permit_ids: The ids ``acquire`` or ``acquire_many`` returned.

        Returns:
            How many permits were given back.

        Raises:
            InvalidArgumentError: an id that is not a held permit (none is given back).
            LeaseLostError: a permit's lease ran out (none is given back)."""
        permits = arguments.permit_ids(permit_ids)
        if not permits:
            return 0
        kept = self.client._permit_keeper.get()
        request_ids = kept.begin_releases(permits)
        op = lease_core.lease_release_many(self._keys, permits, request_ids)
        done = await finish_despite_cancel(
            self.client._run(op, self.name),
            lambda done: kept.finish_many(self._keys, permits, done),
        )
        error = kept.finish_many(self._keys, permits, done)
        if error is not None:
            raise error
        return len(permits)

    async def update_lease_time(self, permit_id: str, lease: Seconds) -> bool:
        """Set the permit's lease to ``lease`` from now, shorter or longer (Redisson's
        ``updateLeaseTime``; the one way to change a permit's lease). The client stops
        renewing it: it now simply expires.

        Args:
            permit_id: The permit's id.
            lease: Seconds from now.

        Returns:
            ``False`` when the permit is not held (its lease ran out, or it was released).

        Raises:
            InvalidArgumentError: a bad ``permit_id`` or ``lease``."""
        permit = arguments.permit_id(permit_id)
        seconds = arguments.lease(lease)
        sent_at = time.monotonic()
        held = await self.client._run(
            lease_core.update_lease(self._keys, permit, seconds), self.name
        )
        self.client._permit_keeper.get().lease_set(permit, held, sent_at)
        return held

    def disown(self, permit_id: str) -> bool:
        """Hand the permit ``permit_id`` to another process: this client forgets it (no longer
        renews it, never reports it lost, keeps no record of it) and the permit stays held
        until its lease ends or someone releases it by its id (``release`` works from any
        client). Give it a lease (``acquire(lease=...)``) first: a permit left to the watchdog
        would otherwise end after ``watchdog_timeout``. Returns whether this client had it;
        sends nothing."""
        return self.client._permit_keeper.get().disown(arguments.permit_id(permit_id))

    async def expire(self, seconds: Seconds) -> bool:
        """Delete the semaphore (its count and its leases) ``seconds`` from now, as Redisson's
        ``expire``; ``False`` when it does not exist. Permits taken meanwhile go with it."""
        ttl = arguments.duration(seconds, "seconds")
        return await self.client._run(lease_core.lease_expire(self._keys, ttl), self.name)

    async def available(self) -> int:
        """Permits free now, counting those whose lease ran out (0 when never set)."""
        return (
            await self.client._run(lease_core.lease_status(self._keys), self.name)
        ).available or 0

    async def statistics(self) -> SemaphoreStatistics:
        """The semaphore as the server has it (permits available, permits leased out) and
        this client's waiters, in one round trip."""
        status = await self.client._run(lease_core.lease_status(self._keys), self.name)
        local = _local_waiters(self.client, self._keys.channel)
        return lease_core.lease_statistics(status, self.name, local)

    @asynccontextmanager
    async def hold(
        self, *, timeout: Seconds | None = None, lease: Seconds | None = None
    ) -> AsyncIterator[str]:
        """``async with sem.hold(timeout=5) as permit_id:`` a bounded wait that raises
        ``LockTimeoutError`` when it runs out, then gives the permit back on exit.

        Args:
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one try.
            lease: Seconds the permit lasts; ``None``: renewed by the watchdog.

        Raises:
            LockTimeoutError: no permit was taken in time.
            LeaseLostError: on exit, the permit's lease had run out."""
        permit = await self.acquire(timeout=timeout, lease=lease)
        if permit is None:
            raise _timeout(self.name, self.client._owner(), timeout)
        try:
            yield permit
        finally:
            await self.release(permit)

    async def __aenter__(self) -> str:
        permit = await self.acquire()
        assert permit is not None  # no timeout: waits as long as it takes
        with self._mutex:
            self._entered.setdefault(self.client._owner(), []).append(permit)
        return permit

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        owner = self.client._owner()
        with self._mutex:
            stack = self._entered[owner]
            permit = stack.pop()
            if not stack:
                del self._entered[owner]
        await self.release(permit)

    def __repr__(self) -> str:
        return f"<redlease.AsyncLeaseSemaphore {self.name!r} on {self.client.address}>"


def _local_waiters(client: AsyncClient, channel: str) -> int:
    sub = client._subscriber
    return sub.waiting(channel) if sub is not None else 0


def _timeout(name: str, owner: str, timeout: Seconds | None) -> LockTimeoutError:
    within = "in its single try (timeout=0)" if timeout == 0 else f"within {timeout} s"
    return LockTimeoutError(f"semaphore {name!r}: no permit {within}", name=name, owner=owner)


# --- the renewer of lease permits -------------------------------------------------------------


class AsyncPermitKeeper:
    """A client's lease permits; the client's one watchdog renews the watched ones, batched per
    semaphore, every ``watchdog_timeout / 3`` (this is one of its renewal sources)."""

    def __init__(self, client: weakref.ref[AsyncClient]) -> None:
        self._client = client
        self.mutex = threading.Lock()
        self.table = PermitTable()

    def granted(
        self,
        keys: LeaseSemaphoreKeys,
        granted: Granted,
        watched: bool,
        listener: Callable[[LeaseLostError], None] | None,
    ) -> None:
        with self.mutex:
            for one in granted.each():
                self.table.granted(keys, one, watched=watched, listener=listener)
        client = self._client()
        if watched and client is not None:
            client._state.add_renewal_source(self)
            client._watch()

    def begin_release(self, permit: str) -> str:
        with self.mutex:
            return self.table.begin_release(permit, time.monotonic())

    def begin_releases(self, permits: list[str]) -> list[str]:
        with self.mutex:
            return self.table.begin_releases(permits, time.monotonic())

    def finish_many(
        self, keys: LeaseSemaphoreKeys, permits: list[str], done: ManyReleased
    ) -> Exception | None:
        """Apply a several-permit release's outcome; the error it reports, if any."""
        with self.mutex:
            return permit_core.finish_release_many(self.table, keys, permits, done)

    def lease_set(self, permit: str, held: bool, sent_at: float) -> None:
        with self.mutex:
            self.table.lease_set(permit, held, sent_at)

    async def undo(self, call: Call, name: str, since: float | None = None) -> None:
        """Send an undo now (bounded, even when cancelled); one that cannot reach the server
        is retried by the watchdog within the window of the request it undoes, first sent at
        ``since`` (``None``: no try's outcome is unknown, or no receipt is involved: now). One
        that cannot tell whether its request ran is reported: its permits may stay taken."""
        client = self._client()
        pending = permit_core.pending_undo(call, name, time.monotonic() if since is None else since)
        if client is None or client._closed:
            if since is not None and pending.counting:  # (a lease ends by itself)
                report_may_stay_taken(
                    None if client is None else client._state.listeners,
                    pending,
                    "the client was closed before an abandoned request could be undone",
                )
            return
        try:
            reply = await cancel.bounded(client._call(call, name))
        except cancel.GAVE_UP as exc:
            log.warning("undo of an abandoned request on %r failed, retrying later: %s", name, exc)
            with self.mutex:
                self.table.keep_undo(pending)
            client._state.add_renewal_source(self)
            client._watch()
            return
        self._undo_answered(pending, reply)

    def _undo_answered(self, pending: PendingUndo, reply: Any) -> None:
        now = time.monotonic()
        if not permit_core.undo_settled(pending, reply, now):
            client = self._client()
            report_unsettled(None if client is None else client._state.listeners, pending, now)

    def disown(self, permit: str) -> bool:
        """Forget a permit handed to another process; whether it was this client's."""
        with self.mutex:
            return self.table.released(permit) is not None

    def finish(self, keys: LeaseSemaphoreKeys, permit: str, code: int) -> Exception | None:
        """Forget a released permit; the error its release reports, if any."""
        with self.mutex:
            lost = self.table.take_lost(permit)
            ours = self.table.released(permit) is not None
        return lease_core.release_error(keys, permit, code, ours, lost)

    # --- the watchdog's renewal source ----------------------------------------------------

    def renewal_calls(self, lease: float) -> list[tuple[Any, Call]]:
        with self.mutex:
            undos, expired = self.table.undo_round(time.monotonic())
            calls = list(PermitTable.calls(self.table.watched(), lease))
        if expired:
            client = self._client()
            report_expired(None if client is None else client._state.listeners, expired)
        return [*calls, *undos]

    def renewal_done(self, batch: Any, reply: Any, sent_at: float) -> None:
        with self.mutex:
            if isinstance(batch, PendingUndo):
                self.table.undo_done(batch)
            else:
                gone = self.table.renewed(batch, reply, sent_at)
        if isinstance(batch, PendingUndo):
            self._undo_answered(batch, reply)
            return
        report_lost(gone)

    def renewal_failed(self, batch: Any, exc: Exception) -> None:
        if isinstance(batch, PendingUndo):
            return  # kept: retried next round
        log.warning("lease permit renewal failed: %s", exc)
        client = self._client()
        lease = client.watchdog_timeout if client is not None else 0.0
        with self.mutex:
            gone = self.table.renewal_failed(batch, time.monotonic(), lease)
        report_lost(gone)
