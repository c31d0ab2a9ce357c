"""The client's driver: runs a core operation's requests (script calls, subscriptions, waits
for a wake-up, pauses) until it returns, leaves the line on every way out, gives back what a
closed or timed-out call was granted; and starts the subscriber and the watchdog it needs."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .._asyncio import cancel, compat
from .._asyncio.subscriber import Subscriber, wait
from .._core.requests import Call, Handed, Operation, Replication, Sleep, Subscribe, WaitWake
from .._redis.errors import gives_back, timed_out
from .._shared.channels import Abandoned, Waiter
from ..errors import (
    ClientClosedError,
    EventLoopError,
    RedleaseError,
    ReplicaError,
    ServerUnavailableError,
)
from .calls import AsyncCalls
from .servers import AsyncServers

T = TypeVar("T")


class AsyncDriver(AsyncCalls, AsyncServers):
    """The client's driver (``AsyncClient`` sets these attributes up)."""

    _subscriber: Subscriber | None
    _start_mutex: threading.Lock
    """Held while the subscriber or the watchdog starts, and by ``close()``: nothing starts
    once closed."""
    _ops: compat.Operations
    """The operations under way, which ``close()`` stops and waits for; its ``mutex`` guards
    ``_closed`` too."""
    _closing: compat.Event
    """Set by ``close()``: ends a back-off pause at once."""
    # asyncio: the one event loop of the client's connections
    _loop: compat.LoopBinding  # ASYNC

    async def _run_kept(
        self,
        op: Operation[T],
        again: Callable[[], Operation[T]] | None,
        name: str,
        replication: Replication | None,
        then: Callable[[T], Any],
    ) -> T:
        """``_run`` for a release. It finishes even when its caller is cancelled: ``then``
        runs on its result before the cancellation goes on (``cancel.finish_run``;
        ``again``: the operation made anew, same request ids)."""
        if True:  # ASYNC
            packer = self._packer
            pack = packer.pack if packer is not None and replication is None else None
            run = functools.partial(self._run, name=name, replication=replication)
            return await cancel.finish_run(run, op, then, again=again, pack=pack)
        else:
            return await self._run(op, name, replication)

    async def _run(self, op: Operation[T], name: str, replication: Replication | None = None) -> T:
        """Perform ``op``'s requests one by one until it returns; with ``replication`` every
        script waits for replica acknowledgements. ``close()`` stops it at its next wait."""
        ops = self._ops
        with ops.mutex:
            if self._closed:
                op.close()
                raise ClientClosedError(name=name)
            # asyncio: the loop it was first used on
            try:  # ASYNC
                self._loop.check(name)
            except EventLoopError:
                op.close()
                raise
            ops.started()
        try:
            return await self._drive(op, name, replication)
        finally:
            with ops.mutex:
                ops.ended(self._closed)

    async def _drive(self, op: Operation[T], name: str, replication: Replication | None) -> T:
        if not self._state.pubsub.settled:
            await self._settle_pubsub(name)
        if self._checks.is_due():  # at the first use, then every half hour: not per call
            await self._check_servers(name)
        waiter: Waiter | None = None
        leave: Call | None = None  # run if the operation is abandoned while in line
        listened: Subscribe | None = None  # how the waiter listens (its wait id, its give-back)
        place: Abandoned | None = None  # the waiter's place once its wait is over
        reply: Any = None
        resume = op.send
        hung: ServerUnavailableError | None = None  # a call of this operation timed out
        try:
            while True:
                request = resume(reply)
                resume = op.send
                if isinstance(request, Call):
                    if request.undo is not None:
                        self._stop_if_closed(name)  # never take what must be given back
                    if listened is not None and place is None and gives_back(request):
                        # the wait is over without the lock: its leave goes now
                        place = self._abandon(waiter, listened, name)
                        waiter = None
                    if hung is not None and gives_back(request):
                        self._give_back_later(request, name, place)
                        if request is leave:
                            leave = None
                        reply, resume = hung, op.throw
                        continue
                    try:
                        reply = await self._perform(request, name, replication)
                    except (ServerUnavailableError, ReplicaError) as exc:
                        reply, resume = exc, op.throw
                        if isinstance(exc, ServerUnavailableError) and timed_out(exc):
                            hung = exc
                    else:
                        if place is not None and gives_back(request):
                            self._left(place)
                        if request.undo is not None and self._closed:
                            # granted as the client closed: give it back
                            back = request.undo(reply)
                            if back is not None:
                                with contextlib.suppress(*compat.FAILED):
                                    await self._call(back, name)
                            raise ClientClosedError(name=name)
                elif isinstance(request, Subscribe):
                    leave = request.leave
                    listened = request if request.wait else None
                    channel, owner, private = request.channel, request.owner, request.private
                    if request.only_if_live:
                        sub = self._subscriber
                        waiter = sub.listen_if_live(channel, owner, private) if sub else None
                    else:
                        waiter = await self._subscriber_started().subscribe(
                            channel, owner, name=name, private=private
                        )
                    reply = waiter is not None
                    self._stop_if_closed(name)
                elif isinstance(request, WaitWake):
                    assert waiter is not None
                    reply = await wait(waiter, request.timeout)
                    self._stop_if_closed(name)  # a hand-over it brought is left (leave)
                elif isinstance(request, Sleep):
                    await compat.wait_event(self._closing, request.seconds)
                    reply = None
                    self._stop_if_closed(name)
        except StopIteration as stop:
            leave = None
            result: T = stop.value
            return result
        finally:
            op.close()
            if leave is not None and listened is not None and place is None:
                place = self._abandon(waiter, listened, name)
                waiter = None
            if waiter is not None and self._subscriber is not None:
                self._subscriber.unsubscribe(waiter)
            if leave is not None and hung is not None:
                self._give_back_later(leave, name, place)
            elif leave is not None:
                with contextlib.suppress(*compat.FAILED_OR_CANCELLED):
                    await cancel.bounded(self._call(leave, name))
                    if place is not None:
                        self._left(place)

    def _abandon(self, waiter: Waiter | None, listened: Subscribe, name: str) -> Abandoned | None:
        """The wait that ``listened`` (its ``waiter``, if it listens yet) is over without the
        lock, and its leave is about to be sent: until the server confirms it, a turn that
        comes to its place (the leave was lost: a frozen link) is given back at once
        (``listened.grant_back`` for a hand-over, else the leave again), in a task of its
        own."""
        subscriber = self._subscriber
        if subscriber is None:
            return None
        leave, grant_back = listened.leave, listened.grant_back

        def give_back(handed: Handed | None) -> None:
            if handed is not None and grant_back is not None:
                self._give_back_later(grant_back(handed), name)
            elif leave is not None:
                self._give_back_later(leave, name)

        channel = listened.private or listened.channel  # where its turn is told
        return subscriber.abandon(waiter, channel, listened.owner, listened.wait, give_back)

    def _left(self, place: Abandoned) -> None:
        """``place``'s leave was confirmed: no turn can come to it any more."""
        if self._subscriber is not None:
            self._subscriber.left(place)

    def _check_loop(self, name: str | None) -> None:  # ASYNC
        """Raise ``EventLoopError`` if this client was first used on another event loop (for
        the calls that read the server without ``_run``: an election's ``leader()``,
        ``eviction_policies()``, ...)."""
        self._loop.check(name)

    def _give_back_later(
        self, call: Call, name: str | None, place: Abandoned | None = None
    ) -> None:
        """Send a give-back in a task of its own: the server did not answer a call of this
        operation in time, and the caller's error must not wait for it once more (or a turn
        came to a wait that is over); ``place``: the wait's place, gone once it ran."""

        async def send() -> None:
            with contextlib.suppress(RedleaseError):
                await self._call(call, name)
                if place is not None:
                    self._left(place)

        compat.spawn(send, "redlease-give-back")

    def _stop_if_closed(self, name: str | None) -> None:
        if self._closed:
            raise ClientClosedError(name=name)

    def _subscriber_started(self) -> Subscriber:
        with self._start_mutex:
            self._stop_if_closed(None)
            if self._subscriber is None:
                self._subscriber = Subscriber(self.redis, sharded=self._state.pubsub.sharded)
                self._subscriber.holders = self._state  # told of force releases
            return self._subscriber
