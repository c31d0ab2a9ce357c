"""Leader election on a lock: one leader at a time, each term with its fencing token."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from .._asyncio import compat
from .._asyncio.cancel import cancellable
from .._asyncio.subscriber import wait
from .._core.arguments import Seconds, seconds, wait_seconds
from .._core.backoff import Outage
from .._core.lock import OUTAGE_TOLERANCE
from .._core.log import log
from .._redis.errors import TRANSLATED, raise_translated
from .._shared.electionbase import OBSERVE_POLL, ElectionBase, parse_record
from ..errors import (
    ClientClosedError,
    InvalidArgumentError,
    LeaseLostError,
    LockTimeoutError,
    ServerUnavailableError,
    StaleTokenError,
)

if TYPE_CHECKING:
    from .client import AsyncClient
    from .lock import AsyncLock


class AsyncTerm:
    """One term of leadership, from the moment this candidate leads until it resigns.

    ``token`` is the term's fencing token: strictly greater than every earlier term's (it is
    the token of the election lock's hold), so a resource that checks it refuses a deposed
    leader's late writes. ``lost`` is an ``asyncio.Event`` set the moment this candidate is
    known to have lost the leadership (its lease lost, the lock force-released, the server's
    data lost); ``error`` then says why.
    """

    def __init__(self, election: str, identity: str, owner: str) -> None:
        self.election = election
        """The election's name."""
        self.identity = identity
        """This candidate's identity (what ``leader()`` reports while it leads)."""
        self.token = 0
        """The term's fencing token: greater than every earlier term's and hold's on the name."""
        self.lost = compat.Event()
        self.error: LeaseLostError | None = None
        """Why the leadership was lost (``None`` while it lasts)."""
        self.started = time.monotonic()
        """When the term began (``time.monotonic()``)."""
        self._inside = False  # the body of the ``async with`` runs
        self._owner = owner

    def _lose(self, error: LeaseLostError) -> None:
        if self.error is None:
            self.error = error
        self.lost.set()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "leading"
        return (
            f"<redlease.AsyncTerm {self.election!r} {self.identity!r} token={self.token} {state}>"
        )


class AsyncElection(ElectionBase):
    """A leader election among every candidate that uses the same ``name``.

    ``async with election.leadership() as term:`` waits until this candidate leads; leaving the
    block resigns, and the next candidate in line leads within about one round trip. The
    leadership is a lock hold renewed by the client's watchdog: a leader that dies is
    replaced once its lease (the client's ``watchdog_timeout``) runs out; one that was
    stopped past its lease finds ``term.lost`` set as soon as it runs again.
    """

    def __init__(self, client: AsyncClient, name: str, *, identity: str | None = None) -> None:
        super().__init__(name, identity)
        self.client = client
        """The client that made it."""
        self._lock = client.lock(self.lock_name)

    @property
    def lock(self) -> AsyncLock:
        """The election's lock (``statistics()``, ``force_release()``, ...)."""
        return self._lock

    @asynccontextmanager
    async def leadership(
        self,
        timeout: Seconds | None = None,
        *,
        cancel_on_loss: bool = False,
    ) -> AsyncIterator[AsyncTerm]:
        """``async with election.leadership() as term:`` wait until this candidate leads,
        lead for the block, then resign.

        ``timeout`` bounds the wait (``LockTimeoutError`` when it runs out; ``0``: one try).
        Leaving the block after the leadership was lost raises ``LeaseLostError`` (an error
        of the block itself wins). ``cancel_on_loss=True`` cancels the task running the
        block the moment the leadership is lost; the block then ends with
        ``LeaseLostError`` instead of ``CancelledError`` (as ``asyncio.timeout`` ends
        with ``TimeoutError``).

        Args:
            timeout: Seconds to wait at most to lead; ``None``: as long as it takes; ``0``:
                one try.

        Returns:
            A context manager whose value is the ``AsyncTerm`` (its fencing ``token``,
            ``lost`` event and ``error``).

        Raises:
            LockTimeoutError: this candidate did not lead within ``timeout``.
            LeaseLostError: on leaving the block, the leadership had been lost."""
        wait_for = wait_seconds(timeout, "timeout")
        identity = self.identity
        owner = self.client._owner()
        if self._lock.fencing_token is not None:
            raise InvalidArgumentError(
                f"election {self.name!r}: this task already leads it; terms do not nest"
            )
        term = AsyncTerm(self.name, identity, owner)
        task = compat.current_task() if cancel_on_loss else None  # ASYNC
        cancelled = False  # ASYNC

        def lost(error: LeaseLostError) -> None:
            term._lose(self._lost_error(identity, term.token, owner, error))
            nonlocal cancelled  # ASYNC
            if term._inside and not cancelled:  # ASYNC
                cancelled = compat.cancel(task, f"election {self.name!r}: leadership lost")

        lock = self.client.lock(self.lock_name, on_lease_lost=lost)
        blocking = wait_for != 0  # 0: one try
        got = await lock.acquire(blocking, wait_for if blocking else None)
        if not got:
            raise LockTimeoutError(self._not_elected(wait_for), name=self.lock_name, owner=owner)
        try:
            await self._begin(lock, term)
        except BaseException:
            await self._resign(lock, term, quiet=True)
            raise
        if term.error is not None:  # lost before the term could begin
            await self._resign(lock, term, quiet=True)
            raise term.error
        term._inside = True
        try:
            yield term
        except compat.Cancelled:  # ASYNC
            term._inside = False
            await self._resign(lock, term, quiet=True)
            if cancelled and term.error is not None and compat.uncancel(task) == 0:
                # our own cancellation, and nobody else's: the loss is what ended the block
                raise term.error from term.error.__cause__
            raise
        except BaseException:
            term._inside = False
            await self._resign(lock, term, quiet=True)
            raise
        term._inside = False
        # the block caught our cancellation and went on
        if cancelled:  # ASYNC
            compat.uncancel(task)
        await self._resign(lock, term, quiet=False)
        if term.error is not None:
            raise term.error

    async def _begin(self, lock: AsyncLock, term: AsyncTerm) -> None:
        """The term's token, the leader record, the announcement."""
        token = lock.fencing_token
        if token is None:  # the hold was found gone already
            term._lose(self._lost_error(term.identity, 0, term._owner, None))
            return
        term.token = token
        try:
            await self.client.fenced_set(self._record_key, f"{token} {term.identity}", token)
        except StaleTokenError as exc:  # a later term wrote already: this one is over
            term._lose(self._lost_error(term.identity, token, term._owner, exc))
            return
        term.started = time.monotonic()
        self._started(term.identity, token)
        await self._announce("elected", token)

    async def _resign(self, lock: AsyncLock, term: AsyncTerm, *, quiet: bool) -> None:
        """Release the lock (the next candidate leads) and say so. ``quiet``: an error of the
        release is logged, not raised (the block's own error is on its way)."""
        try:
            await lock.release()
        except LeaseLostError as exc:
            term._lose(self._lost_error(term.identity, term.token, term._owner, exc))
        except Exception as exc:
            if not quiet:
                raise
            log.warning("election %r: resigning failed: %s", self.name, exc)
        finally:
            if term.token:
                self._ended(term.identity, term.token, term.error is not None)
        await self._announce("resigned", term.token)

    async def _announce(self, what: str, token: int) -> None:
        """Tell observers that a term began or ended: a hint only (they read the record)."""
        command = self._publish_command(self.client._state.pubsub.sharded)
        message = f"{what} {token}"
        try:
            await cancellable(self.client.redis.execute_command(command, self._channel, message))
        except TRANSLATED as exc:
            log.debug("election %r: announcing %s failed: %s", self.name, what, exc)

    async def leader(self) -> str | None:
        """The identity of the candidate that leads now, else ``None`` (the lock is free, or a
        new leader has not begun its term yet). A leader that died is reported until its
        lease runs out; one whose lock is free or held by a later term never is."""
        for _ in range(2):
            record = await self._record()
            status = await self._lock.statistics()
            token = status.fencing_token
            if token is None:
                return None
            if record is not None and record[0] == token:
                return record[1]
            if record is not None and record[0] > token:
                return None
            # the lock's term is newer than the record: its leader may be writing it now
        return None

    async def _record(self) -> tuple[int, str] | None:
        if self.client._closed:
            raise ClientClosedError(name=self.name)
        self.client._check_loop(self.lock_name)  # ASYNC
        try:
            value = await cancellable(self.client.redis.get(self._record_key))
        except TRANSLATED as exc:
            if self.client._closed:  # closed while the read was under way
                raise ClientClosedError(name=self.name) from None
            raise_translated(exc, self.client.address, self._record_key, user=self.client._user)
        return parse_record(value)

    async def observe(
        self,
        *,
        poll: Seconds = OBSERVE_POLL,
        stop: compat.Event | None = None,
    ) -> AsyncIterator[str | None]:
        """Yield the leader now (its identity, or ``None``), then each time it changes.

        A leader's start and resignation are announced on the election's channel, so they
        are seen at once; a change nobody announces (a leader that died, a force release) is
        seen within ``poll`` seconds. Changes closer together than a read may be seen as one.
        The iteration ends when ``stop`` is set (seen within ``poll``) or the client is
        closed; ``break`` ends it too.

        A server outage is ridden out as a lock's waiters ride it out: while the server
        cannot be reached the leader is unknown and nothing is yielded; the read is tried
        again (backing off to every 0.5 s), and once the server answers the leader then is
        yielded if it changed (a server that came back empty has none until a candidate
        leads again). An outage that lasts 10 s (``OUTAGE_TOLERANCE``) raises
        ``ServerUnavailableError``.

        Raises:
            ServerUnavailableError: the server could not be reached for 10 s in a row."""
        every = seconds(poll, "poll")
        client = self.client
        client._check_loop(self.lock_name)  # ASYNC
        if not client._state.pubsub.settled:
            await client._settle_pubsub(self.name)
        subscriber = client._subscriber_started()
        waiter = await subscriber.subscribe(self._channel, client._owner(), name=self.name)
        outage = Outage(time.monotonic, None, OUTAGE_TOLERANCE)
        try:
            last: tuple[str | None] | None = None
            while stop is None or not stop.is_set():
                try:
                    now = await self.leader()
                except ClientClosedError:
                    return
                except ServerUnavailableError:
                    pause = outage.failed(listening=True)
                    if pause is None:  # down for OUTAGE_TOLERANCE: give up
                        raise
                    await wait(waiter, pause)  # the leader is unknown meanwhile: no yield
                    continue
                outage.ended()
                if last is None or last[0] != now:
                    last = (now,)
                    yield now
                await wait(waiter, every)
        finally:
            subscriber.unsubscribe(waiter)

    async def force_release(self) -> bool:
        """Depose the leader, whoever it is: the lock is freed (the next candidate leads at
        once) and the change announced. The deposed leader's ``term.lost`` is set within
        about a round trip (a redlease leader's client is told on its own channel of the
        lock; should that message be lost, at its watchdog's next round), its error's
        ``cause`` ``"forced"``. ``True`` if someone led."""
        released = await self._lock.force_release()
        if released:
            await self._announce("deposed", 0)
        return released

    def __repr__(self) -> str:
        return f"<redlease.AsyncElection {self.name!r} on {self.client.address}>"
