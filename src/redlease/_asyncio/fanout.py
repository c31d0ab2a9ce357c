"""The asyncio Redlock fan-out, the engine under ``AsyncRedlockClient``. A fan-out writes its
script to every master first, on connections of its own, then reads the replies in order, each
read bounded by the per-master deadline; a master without an idle connection gets one in a task
of its own meanwhile, which writes the call there (the fan-out's own task reads every reply).
A master that has not answered by the deadline is given up; its connection is never reused by
another call (the reply may still come), but the same operation's next call to that master
goes on it, after the late one (see ``Late`` and ``Round``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from .._core import redlock as core
from .._core.log import log
from .._core.requests import Call, Sleep, WaitWake
from .._core.watchdog import RenewalPolicy
from .._redis.connections import subscriber_kwargs
from .._redis.errors import CONNECTION_ERRORS, translate, unavailable
from .._shared import fork
from .._shared.channels import Waiter
from .._shared.redlockbase import (
    Late,
    MasterClient,
    RedlockClientBase,
    apply_renewals,
    renewal_failed,
)
from ..errors import (
    ClientClosedError,
)
from .cancel import cancellable, undo_despite_cancel, within
from .compat import LoopBinding, on_owner_end, owner_number, wait_event
from .subscriber import Subscriber


def consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a given-up task's outcome so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


IO_TIMEOUT = 5.0
"""Bound of a new fan-out connection's connect and handshake when the client sets none."""

MAX_IDLE = 64
"""Idle fan-out connections kept per master."""

FIRST_CONNECT_GRACE = 1.0
"""How much longer than ``master_timeout`` a fan-out waits for the first connection to a
master this process has not reached yet (nor failed to): connection set-up (TCP, HELLO,
AUTH, TLS) is not counted against ``master_timeout``, so the first call of a fresh process
is not failed by it against healthy masters; once connected, the reply has
``master_timeout`` as always. A master that failed, or was reached, gets no grace again."""

FINAL_READ = 0.001
"""A reply read after the deadline still gets this long (it may be in the socket already)."""


class Master:
    """One master: its redlease ``AsyncClient`` (address, subscriber) and the idle connections
    that fan-outs use (no socket timeout of their own: every read passes its deadline)."""

    def __init__(self, client: MasterClient[Subscriber]) -> None:
        self.client = client
        self.address = client.address
        pool = client.redis.connection_pool
        given = pool.connection_kwargs
        kwargs = subscriber_kwargs(given)
        self._connect_timeout = (
            given.get("socket_connect_timeout") or given.get("socket_timeout") or IO_TIMEOUT
        )
        kwargs["socket_connect_timeout"] = self._connect_timeout
        kwargs["retry"] = AsyncRetry(NoBackoff(), 0)  # a fan-out never waits on retries
        self._factory: Callable[[], Any] = lambda: pool.connection_class(**kwargs)
        self._idle: fork.PerProcess[list[Any]] = fork.PerProcess(list)
        """Idle connections (none of the parent's in a forked child)."""
        self.first_contact = True
        """No connection to this master was ever opened, nor failed to open."""

    def take_idle(self) -> Any | None:
        idle = self._idle.get()
        return idle.pop() if idle else None

    def give(self, conn: Any) -> None:
        idle = self._idle.get()
        if len(idle) < MAX_IDLE:
            idle.append(conn)
        else:
            discard(conn)

    async def open(self) -> Any:
        conn = self._factory()
        try:
            await within(conn.connect(), self._connect_timeout)
        except BaseException:
            discard(conn)
            self.first_contact = False
            raise
        self.first_contact = False
        return conn

    def drop_idle(self) -> None:
        """Drop every idle connection (one was found dead: the others likely are)."""
        idle = self._idle.get()
        dropped = idle.copy()
        idle.clear()
        for conn in dropped:
            discard(conn)

    async def close(self) -> None:
        idle = self._idle.get()
        dropped = idle.copy()
        idle.clear()
        for conn in dropped:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)
        await self.client.close()


def discard(conn: Any) -> None:
    """Close a connection that must not be reused (without waiting for the close)."""
    with contextlib.suppress(Exception):
        task = asyncio.get_running_loop().create_task(conn.disconnect(nowait=True))
        task.add_done_callback(consume)


@dataclass
class Flight:
    """A call written to one master whose reply has not been read yet."""

    conn: Any
    call: Call
    reused: bool
    deadline: float
    """When its reply is given up (a first connection's gets ``master_timeout`` from sending)."""
    evaled: bool = False
    skip: int = 0
    """Replies to earlier calls still to come first on ``conn`` (read and dropped)."""


class Round:
    """One fan-out in progress: a call per master, written at once, replies read in order.

    Every call written and not yet answered is in ``flights`` until its reply is read, or until
    the round gives up on it and hands its connection to the operation's ``late`` table, after
    the late call (``finish``). Only the round's own task reads its connections (``drain``); a
    new connection's task only opens it and writes the call. A read that is cancelled leaves
    the call in ``flights`` and the connection open (redis-py's parser resumes a cancelled read
    where it stopped). So the operation's next call to a master that has not answered, a
    give-back above all, is always written after the late call on the same connection, and the
    master runs it after the late call, whenever that one arrives: one connection's commands
    are delivered and run in the order they were written."""

    def __init__(
        self,
        client: AsyncRedlockDriver,
        calls: tuple[Call | None, ...],
        name: str | None,
        late: Late,
    ):
        self.client = client
        self.masters = client._masters
        self.calls = calls
        self.name = name
        self.late = late
        self.out: list[Any] = [None] * len(calls)
        self.flights: dict[int, Flight] = {}
        self.fresh: dict[int, asyncio.Task[None]] = {}
        self.ends: dict[int, float] = {}  # when each new-connection task is given up
        self.timeout = 0.0
        self.given_up = False
        self._packed: dict[tuple[Any, ...], Any] = {}

    async def run(self, deadline: float) -> None:
        self.timeout = max(0.0, deadline - time.monotonic())
        for i, call in enumerate(self.calls):
            if call is not None:
                skip = 0
                if i in self.late:  # after the late call on its connection
                    conn, skip = self.late.pop(i)
                else:
                    conn = self.masters[i].take_idle()
                if conn is None or not await self.send(
                    i, conn, reused=True, deadline=deadline, skip=skip
                ):
                    self.start_fresh(i, deadline)
        await self.drain(deadline)

    async def drain(self, deadline: float) -> None:
        """Read every reply due, in the order the calls went out, each by its own deadline; a
        master that needed a new connection is read once its call is out there, waited for
        until its connection is given up."""
        for _ in range(6 * len(self.calls) + 2):  # each turn reads a reply or awaits a task
            if self.flights:
                await self.receive(next(iter(self.flights)))
                continue
            opening = [i for i, task in self.fresh.items() if not task.done()]
            if not opening:
                return
            end = max(self.ends.get(i, deadline) for i in opening)
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            await asyncio.wait(
                [self.fresh[i] for i in opening],
                timeout=remaining,
                return_when=asyncio.FIRST_COMPLETED,
            )

    def finish(self) -> list[Any]:
        """Give up what has not answered: late (its connection kept for the operation's next
        call to that master, or dropped if it has none)."""
        self.given_up = True
        for i, flight in self.flights.items():
            self.late[i] = (flight.conn, flight.skip + 1)
            self.out[i] = self.client._late(i, self.name, "did not answer")
        self.flights.clear()
        for i, task in self.fresh.items():
            if not task.done():  # still connecting: nothing was written on it
                task.cancel()
                task.add_done_callback(consume)
                self.out[i] = self.client._late(
                    i, self.name, "could not be connected to", sent=False
                )
        for i, call in enumerate(self.calls):
            if call is not None and self.out[i] is None:
                self.out[i] = self.client._late(i, self.name, "did not answer")
        return self.out

    def packed(self, conn: Any, call: Call) -> Any:
        """``EVALSHA`` for ``call`` as bytes, packed once for every master alike."""
        encoder = conn.encoder
        key = (id(call), encoder.encoding, encoder.encoding_errors)
        command = self._packed.get(key)
        if command is None:
            args = (call.script.sha, len(call.keys), *call.keys, *call.args)
            command = self._packed[key] = conn.pack_command("EVALSHA", *args)
        return command

    async def send(
        self, i: int, conn: Any, *, reused: bool, deadline: float, skip: int = 0
    ) -> bool:
        """Write master ``i``'s call (on ``conn``, ``skip`` earlier replies are still to come);
        ``False`` when a reused connection turned out dead."""
        call = self.calls[i]
        assert call is not None
        if skip and not conn.is_connected:
            # the late call's connection is gone (redis-py would open a new socket under it)
            discard(conn)
            return False
        # in flight from before the write: a write cancelled midway is given up with it
        self.flights[i] = Flight(conn, call, reused, deadline, skip=skip)
        try:
            await cancellable(conn.send_packed_command(self.packed(conn, call), check_health=False))
        except CONNECTION_ERRORS as exc:
            self.flights.pop(i, None)
            discard(conn)
            if reused:  # a dead idle connection (a restarted master): the others are too
                self.masters[i].drop_idle()
                return False
            self.out[i] = unavailable(exc, self.masters[i].address, self.name)
        return True

    def start_fresh(self, i: int, deadline: float) -> None:
        first = self.masters[i].first_contact
        if first:  # connection set-up is not counted against master_timeout (see the grace)
            self.ends[i] = deadline + FIRST_CONNECT_GRACE + self.timeout
        task = self.on_new_connection(i, deadline, first=first)
        self.fresh[i] = asyncio.get_running_loop().create_task(task)

    async def on_new_connection(self, i: int, deadline: float, *, first: bool = False) -> None:
        """Open a connection to master ``i`` and write its call there (``drain`` reads it)."""
        master = self.masters[i]
        try:
            if first:
                bound = max(0.0, deadline + FIRST_CONNECT_GRACE - time.monotonic())
                conn = await within(master.open(), bound)
            else:
                conn = await master.open()
        except Exception as exc:
            self.out[i] = unavailable(exc, master.address, self.name)
            return
        if self.given_up:  # (the round was given up meanwhile)
            discard(conn)
            return
        if first:  # the reply gets master_timeout from now
            deadline = max(deadline, time.monotonic() + self.timeout)
        await self.send(i, conn, reused=False, deadline=deadline)
        # (a round given up while connecting cancels this task: the connection is dropped)

    async def receive(self, i: int) -> None:
        """Read master ``i``'s reply by its deadline and record the outcome. The call stays in
        ``flights`` while it is read: cancelled, the read resumes later or the call is late."""
        flight = self.flights[i]
        master, conn, call = self.masters[i], flight.conn, flight.call
        reply: Any = None
        reusable = True
        while True:
            try:
                reply = await conn.read_response(
                    timeout=max(FINAL_READ, flight.deadline - time.monotonic()),
                    disconnect_on_error=False,
                )
            except redis.exceptions.NoScriptError as exc:
                reply = translate(exc, master.address, self.name)
                if not flight.evaled and not flight.skip:
                    # a restarted master has an empty script cache: EVAL loads it again
                    flight.evaled = True
                    args = (call.script.source, len(call.keys), *call.keys, *call.args)
                    try:
                        await cancellable(
                            conn.send_packed_command(conn.pack_command("EVAL", *args))
                        )
                        continue
                    except CONNECTION_ERRORS as error:  # (the script has not run)
                        reply, reusable = unavailable(error, master.address, self.name), False
            except redis.exceptions.TimeoutError:
                reply = None  # older redis-py raise where newer ones return None
            except CONNECTION_ERRORS as exc:
                if flight.reused and time.monotonic() < flight.deadline:
                    self.flights.pop(i, None)
                    discard(conn)
                    master.drop_idle()  # a dead idle connection: send once more on a new one
                    self.start_fresh(i, flight.deadline)
                    return
                reply, reusable = self.client._broken(i, self.name, exc), False
            except redis.exceptions.ResponseError as exc:
                reply = translate(exc, master.address, self.name)  # the connection is fine
            except redis.exceptions.RedisError as exc:
                reply, reusable = translate(exc, master.address, self.name), False
            if flight.skip and reply is not None and reusable:
                flight.skip -= 1  # an earlier call's late reply: dropped
                continue
            break
        self.flights.pop(i, None)
        if reply is None:  # no script here replies nil: the read timed out
            self.late[i] = (conn, flight.skip + 1)  # never reused; see Late
            self.out[i] = self.client._late(i, self.name, "did not answer")
            return
        if reusable:
            master.give(conn)
        else:
            discard(conn)  # a late reply may still come: never reuse it
        self.out[i] = reply


class Listening:
    """The waiters of one operation on several masters, all setting one event."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._waiters: dict[int, tuple[Subscriber, Waiter]] = {}

    def has(self, index: int) -> bool:
        return index in self._waiters

    def count(self) -> int:
        return len(self._waiters)

    def adopt(self, index: int, subscriber: Subscriber, waiter: Waiter) -> None:
        if index in self._waiters:
            subscriber.unsubscribe(waiter)
            return
        old, waiter.event = waiter.event, self.event
        self._waiters[index] = (subscriber, waiter)
        if old.is_set():
            self.event.set()

    def close(self) -> None:
        waiters, self._waiters = list(self._waiters.values()), {}
        for subscriber, waiter in waiters:
            subscriber.unsubscribe(waiter)


T = TypeVar("T")


class AsyncRedlockDriver(RedlockClientBase):
    """The I/O under a Redlock client: running operations across the masters, listening for
    wake-ups, the watchdog."""

    _masters: list[Master]
    _policy: RenewalPolicy
    _closed: bool

    def _start_driver(self) -> None:
        self._watchdog: asyncio.Task[None] | None = None
        self._loop = LoopBinding("AsyncRedlockClient")  # its connections belong to one loop

    async def _stop_driver(self) -> None:
        task, self._watchdog = self._watchdog, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for master in self._masters:
            await master.close()

    def _check_fork(self) -> None:
        if self._state.check_fork():
            self._watchdog = None
            for master in self._masters:
                master.client._owner()  # lets each master client notice the fork too

    def _owner(self) -> str:
        self._check_fork()
        return self._state.owner(owner_number())

    async def _run(self, op: core.RedlockOperation[T], name: str | None) -> T:
        """Perform ``op``'s requests one by one until it returns."""
        if self._closed:
            raise ClientClosedError(name=name)
        self._loop.check(name)
        listening = Listening()
        late: Late = {}
        reply: Any = None
        try:
            while True:
                request = op.send(reply)
                if isinstance(request, core.Fanout):
                    reply = await self._fanout(request, name, late)
                elif isinstance(request, core.Listen):
                    reply = await self._listen(request, listening, name)
                    if self._closed:
                        raise ClientClosedError(name=name)
                elif isinstance(request, WaitWake):
                    # (not wait_for: see cancel.within)
                    reply = await wait_event(listening.event, request.timeout)
                    listening.event.clear()
                    if self._closed:  # close() wakes every waiter
                        raise ClientClosedError(name=name)
                elif isinstance(request, Sleep):
                    await asyncio.sleep(request.seconds)
                    reply = None
                    if self._closed:
                        raise ClientClosedError(name=name)
        except StopIteration as stop:
            result: T = stop.value
            return result
        finally:
            op.close()
            listening.close()
            for conn, _ in late.values():
                discard(conn)

    async def _fanout(self, request: core.Fanout, name: str | None, late: Late) -> list[Any]:
        deadline = time.monotonic() + request.timeout
        done = Round(self, request.calls, name, late)
        try:
            await done.run(deadline)
        except asyncio.CancelledError:
            if request.on_cancel is not None:
                await undo_despite_cancel(self._take_back(done, request, deadline, name, late))
            else:
                done.finish()
            raise
        return done.finish()

    async def _take_back(
        self, done: Round, request: core.Fanout, deadline: float, name: str | None, late: Late
    ) -> None:
        """After a cancellation: let the calls in flight land (by the deadline), then undo."""
        try:
            await done.drain(deadline)
        finally:
            done.finish()
        assert request.on_cancel is not None
        undo = Round(self, request.on_cancel, name, late)
        try:
            await undo.run(time.monotonic() + request.timeout)
        finally:
            undo.finish()
        unsure = [
            self._masters[i].address
            for i, (before, after) in enumerate(zip(done.out, undo.out, strict=True))
            if isinstance(after, Exception)
            and (isinstance(before, core.NotAnswered) or not isinstance(before, Exception))
        ]
        if unsure:
            log.warning(
                "%s: undoing calls cancelled while out was not confirmed by %s; what they "
                "made there may stay taken until its lease runs out",
                f"lock {name!r}" if name else "Redlock",
                ", ".join(unsure),
            )

    async def _listen(self, request: core.Listen, listening: Listening, name: str | None) -> int:
        wanted = [i for i in request.masters if not listening.has(i)]
        if request.only_if_live:
            for i in wanted:
                sub = self._masters[i].client._subscriber
                waiter = sub.listen_if_live(request.channel, request.owner) if sub else None
                if waiter is not None and sub is not None:
                    listening.adopt(i, sub, waiter)
            return listening.count()
        loop = asyncio.get_running_loop()
        pending: dict[asyncio.Task[Waiter], tuple[int, Subscriber]] = {}
        for i in wanted:
            sub = self._masters[i].client._subscriber_started()
            task = loop.create_task(sub.subscribe(request.channel, request.owner, name=name))
            pending[task] = (i, sub)
        if not pending:
            return listening.count()
        try:
            done, _ = await asyncio.wait(pending, timeout=self.master_timeout)
        finally:
            for task in pending:
                if not task.done():
                    task.cancel()  # unsubscribes: wake-ups are hints, waits are bounded
                    task.add_done_callback(consume)
        for task in done:
            if not task.cancelled() and task.exception() is None:
                i, sub = pending[task]
                listening.adopt(i, sub, task.result())
        return listening.count()

    # --- the watchdog ---------------------------------------------------------------------

    def _mind_owner(self) -> None:
        """The calling owner took a hold: when it ends, what it still holds is reported and
        renewed no more (see ``ClientState.owner_ended``)."""
        on_owner_end(self._owner_ended)

    def _owner_ended(self, owner_number: int) -> None:
        self._state.owner_ended(self._state.owner(owner_number))

    def _watch(self) -> None:
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(
                self._watchdog_loop(), name="redlease-redlock-watchdog"
            )

    async def _watchdog_loop(self) -> None:
        policy, state = self._policy, self._state
        delay = policy.interval
        while True:
            await asyncio.sleep(delay)
            holds = state.holds.watched()
            if not holds:
                delay = policy.interval
                continue
            try:
                op = core.renew(holds, policy, self.addresses, master_timeout=self.master_timeout)
                renewals = await self._run(op, None)
            except Exception as exc:
                if self._closed:
                    return
                renewal_failed(state, policy, holds, exc, time.monotonic())
                delay = policy.next_delay(False)
                continue
            apply_renewals(state, policy, renewals, time.monotonic())
            delay = policy.next_delay(all(r.renewed for r in renewals))
