"""The thread-based Redlock fan-out, the engine under ``RedlockClient``.

A fan-out sends its script to every master first and then reads the replies as they come, on
connections of its own (one pipeline per master), so N masters cost about one round trip, not
N. A reply that has not come within the per-master timeout is given up; its connection is never
reused by another call (the reply may still come), but the same operation's next call to that
master goes on it, after the late one (see ``Late``). New connections are opened by helper
threads, so a master that accepts connections but never answers (stopped, overloaded) cannot
hold a caller past the timeout either.
"""

from __future__ import annotations

import contextlib
import functools
import math
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._core import redlock as core
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
from .compat import owner_number
from .subscriber import Subscriber

IO_TIMEOUT = 5.0
"""Socket timeout of fan-out connections when the redis client sets none: it bounds a helper
thread's connect and the read of a reply that has started to arrive."""

MAX_CONNECTING = 4
"""Connections being opened at once to one master; more waiters share them."""

MAX_IDLE = 64
"""Idle fan-out connections kept per master."""

FIRST_CONNECT_GRACE = 1.0
"""How much longer than ``master_timeout`` a fan-out waits for the first connection to a
master this process has not reached yet (nor failed to): connection set-up (a thread, TCP,
HELLO, AUTH, TLS) is not counted against ``master_timeout``, so the first call of a fresh
process is not failed by it against healthy masters; once connected, the reply has
``master_timeout`` as always. A master that failed, or was reached, gets no grace again."""

CONNECT_POLL = 0.002
"""How often a fan-out that waits for a new connection looks whether it is there."""


class Master:
    """One master: its redlease ``Client`` (address, subscriber) and the idle connections that
    fan-outs use. Thread-safe."""

    def __init__(self, client: MasterClient[Subscriber]) -> None:
        self.client = client
        self.address = client.address
        pool = client.redis.connection_pool
        given = pool.connection_kwargs
        kwargs = subscriber_kwargs(given)
        kwargs["socket_timeout"] = given.get("socket_timeout") or IO_TIMEOUT
        kwargs["socket_connect_timeout"] = (
            given.get("socket_connect_timeout") or kwargs["socket_timeout"]
        )
        kwargs["retry"] = Retry(NoBackoff(), 0)  # a fan-out never waits on redis-py's retries
        self._factory: Callable[[], Any] = lambda: pool.connection_class(**kwargs)
        self._idle: list[Any] = []
        self._connecting = 0
        self._failures = 0
        self._error: BaseException | None = None
        self._reached = False
        self._mutex = threading.Lock()
        fork.in_child(self.after_fork)

    def take_idle(self) -> Any | None:
        with self._mutex:
            return self._idle.pop() if self._idle else None

    def give(self, conn: Any) -> None:
        with self._mutex:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        with contextlib.suppress(Exception):
            conn.disconnect()

    @property
    def first_contact(self) -> bool:
        """Whether no connection to this master was ever opened, nor failed to open."""
        return not self._reached and self._failures == 0

    @property
    def failures(self) -> int:
        """How many connection attempts have failed so far (a mark for ``failed_since``)."""
        return self._failures

    def failed_since(self, mark: int) -> BaseException | None:
        """The last connection error, if an attempt failed after ``mark`` was taken."""
        with self._mutex:
            return self._error if self._failures > mark else None

    def request_connection(self, helpers: ThreadPoolExecutor) -> None:
        """Have a helper thread open a connection (it becomes idle), unless enough are on the
        way: a master that accepts connections but never answers ties up no caller."""
        with self._mutex:
            if self._connecting >= MAX_CONNECTING:
                return
            self._connecting += 1
        try:
            helpers.submit(self._open)
        except RuntimeError:  # the client is closing
            with self._mutex:
                self._connecting -= 1

    def _open(self) -> None:
        conn = self._factory()
        try:
            conn.connect()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.disconnect()
            with self._mutex:
                self._connecting -= 1
                self._failures += 1
                self._error = exc
            return
        with self._mutex:
            self._connecting -= 1
            self._reached = True
        self.give(conn)

    def drop_idle(self) -> None:
        """Disconnect every idle connection (one was found dead: the others likely are)."""
        with self._mutex:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.disconnect()

    def after_fork(self) -> None:
        """In a forked child (``fork.in_child``): a fresh mutex; the parent's sockets are not
        ours, forgotten without touching them."""
        self._idle = []
        self._connecting = 0
        self._mutex = threading.Lock()


@dataclass
class Flight:
    """A call sent to one master whose reply has not been read yet."""

    conn: Any
    call: Call
    reused: bool
    evaled: bool = False
    skip: int = 0
    """Replies to earlier calls still to come first on ``conn`` (read and dropped)."""


class Listening:
    """The waiters of one operation on several masters, all setting one event."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._mutex = threading.Lock()
        self._waiters: dict[int, tuple[Subscriber, Waiter]] = {}
        self._closed = False

    def has(self, index: int) -> bool:
        with self._mutex:
            return index in self._waiters

    def count(self) -> int:
        with self._mutex:
            return len(self._waiters)

    def adopt(self, index: int, subscriber: Subscriber, waiter: Waiter) -> None:
        with self._mutex:
            if self._closed or index in self._waiters:
                subscriber.unsubscribe(waiter)
                return
            old, waiter.event = waiter.event, self.event
            self._waiters[index] = (subscriber, waiter)
        if old.is_set():
            self.event.set()

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            waiters = list(self._waiters.values())
            self._waiters.clear()
        for subscriber, waiter in waiters:
            subscriber.unsubscribe(waiter)


def nothing() -> int:
    return 0


def adopt(listening: Listening, i: int, sub: Subscriber, future: Future[Waiter]) -> None:
    if future.cancelled() or future.exception() is not None:
        return  # not confirmed: wake-ups are hints, waits are bounded anyway
    listening.adopt(i, sub, future.result())


class Round:
    """One fan-out in progress: a call per master, sent at once, replies read as they come."""

    def __init__(
        self, client: RedlockDriver, calls: tuple[Call | None, ...], name: str | None, late: Late
    ):
        self.client = client
        self.masters = client._masters
        self.calls = calls
        self.name = name
        self.late = late
        self.out: list[Any] = [None] * len(calls)
        self.flights: dict[int, Flight] = {}
        self.waiting: dict[int, int] = {}  # master -> connection-failure mark when it began
        self.first: set[int] = set()  # masters waiting for their first connection ever
        self.own_end: dict[int, float] = {}  # their replies' deadlines, once sent
        self.timeout = 0.0
        self._packed: dict[tuple[Any, ...], Any] = {}

    def run(self, deadline: float) -> list[Any]:
        self.timeout = max(0.0, deadline - time.monotonic())
        try:
            for i, call in enumerate(self.calls):
                if call is None:
                    continue
                if i in self.late:  # after the late call on its connection
                    conn, skip = self.late.pop(i)
                    self.dispatch(i, conn, reused=True, skip=skip)
                else:
                    self.dispatch(i, self.masters[i].take_idle(), reused=True)
            # the usual case: read in the order sent, each read waiting at most until the
            # deadline (a slow master delays reading the others, not their replies)
            for i in list(self.flights):
                while i in self.flights and not self.waiting:
                    if not self.receive(i, max(0.0, deadline - time.monotonic())):
                        break  # late: the rest are read without waiting
            # a master waits for a new connection (or answered late): poll them all
            while self.flights or self.waiting:
                progressed = self.connected()
                remaining = self.end(deadline) - time.monotonic()
                wait = 0.0 if progressed else max(0.0, remaining)
                if self.waiting:
                    wait = min(wait, CONNECT_POLL)
                ready = self.readable(wait)
                for i in ready:
                    self.receive(i, 0.0)
                if not ready and not progressed and remaining <= 0:
                    break
        finally:
            for i, flight in self.flights.items():
                # its reply may still come: never reused, but the next call to the master goes
                # after it on it
                self.late[i] = (flight.conn, flight.skip + 1)
                self.out[i] = self.client._late(i, self.name, "did not answer")
            for i in self.waiting:
                self.out[i] = self.client._late(
                    i, self.name, "could not be connected to", sent=False
                )
        return self.out

    def end(self, deadline: float) -> float:
        """When the round gives up: at ``deadline``, or later for a master's first connection
        (``FIRST_CONNECT_GRACE``) and then its reply (``master_timeout`` from sending)."""
        ends = [deadline]
        ends += [self.own_end[i] for i in self.flights if i in self.own_end]
        ends += [deadline + FIRST_CONNECT_GRACE for i in self.waiting if i in self.first]
        return max(ends)

    def readable(self, timeout: float) -> list[int]:
        """The masters whose reply can be read, waiting up to ``timeout`` for one (one
        ``poll`` for all: a socket with nothing to read costs no system call of its own)."""
        now: list[int] = []
        polled: dict[int, int] = {}
        for i, flight in self.flights.items():
            sock = flight.conn._sock
            if sock is None or getattr(sock, "pending", nothing)():
                now.append(i)  # broken (the read will say why) or TLS data already decrypted
            else:
                polled[sock.fileno()] = i
        if now or not polled:
            return now
        if not hasattr(select, "poll"):  # Windows
            readable, _, _ = select.select(list(polled), [], [], timeout)
            return [polled[fd] for fd in readable]
        poller = select.poll()
        for fd in polled:
            poller.register(fd, select.POLLIN)
        return [polled[fd] for fd, _ in poller.poll(math.ceil(timeout * 1000))]

    def packed(self, conn: Any, call: Call) -> Any:
        """``EVALSHA`` for ``call`` as bytes, packed once for every master alike."""
        packer, encoder = conn._command_packer, conn.encoder
        key = (id(call), type(packer), encoder.encoding, encoder.encoding_errors)
        command = self._packed.get(key)
        if command is None:
            args = (call.script.sha, len(call.keys), *call.keys, *call.args)
            command = self._packed[key] = packer.pack("EVALSHA", *args)
        return command

    def connected(self) -> bool:
        """Send on connections that helper threads opened meanwhile; report failed ones."""
        progressed = False
        for i, mark in list(self.waiting.items()):
            master = self.masters[i]
            conn = master.take_idle()
            if conn is not None:
                del self.waiting[i]
                if i in self.first:
                    self.own_end[i] = time.monotonic() + self.timeout
                self.dispatch(i, conn, reused=False)
                progressed = True
            elif (error := master.failed_since(mark)) is not None:
                del self.waiting[i]
                self.out[i] = unavailable(error, master.address, self.name)
                progressed = True
            else:
                master.request_connection(self.client._helpers())
        return progressed

    def dispatch(self, i: int, conn: Any | None, *, reused: bool, skip: int = 0) -> None:
        """Send master ``i``'s call on ``conn`` (where ``skip`` earlier replies are still to
        come), or wait for a new connection."""
        master, call = self.masters[i], self.calls[i]
        assert call is not None
        if conn is not None and skip and conn._sock is None:
            # the late call's connection is gone (redis-py would open a new socket under it)
            conn = None
        if conn is None:
            self.waiting[i] = master.failures
            if master.first_contact:
                self.first.add(i)
            master.request_connection(self.client._helpers())
            return
        try:
            conn.send_packed_command(self.packed(conn, call), check_health=False)
        except CONNECTION_ERRORS as exc:
            if reused:  # a dead idle connection (a restarted master): the others are too
                master.drop_idle()
                self.dispatch(i, None, reused=False)
            else:
                self.out[i] = unavailable(exc, master.address, self.name)
            return
        self.flights[i] = Flight(conn, call, reused, skip=skip)

    def receive(self, i: int, wait: float) -> bool:
        """Read master ``i``'s reply if it comes within ``wait`` seconds and record the
        outcome; ``False`` when it has not come."""
        flight = self.flights[i]
        master, conn, call = self.masters[i], flight.conn, flight.call
        try:
            if not conn.can_read(timeout=wait):
                return False
            if flight.skip:  # an earlier call's late reply: dropped
                flight.skip -= 1
                with contextlib.suppress(redis.exceptions.ResponseError):
                    conn.read_response()
                return True
            reply = conn.read_response()
        except redis.exceptions.NoScriptError as exc:
            if flight.evaled:
                del self.flights[i]
                master.give(conn)
                self.out[i] = translate(exc, master.address, self.name)
                return True
            # a restarted master has an empty script cache: EVAL loads it again
            try:
                args = (call.script.source, len(call.keys), *call.keys, *call.args)
                conn.send_command("EVAL", *args)
            except CONNECTION_ERRORS as error:
                del self.flights[i]
                self.out[i] = unavailable(error, master.address, self.name)
                return True
            flight.evaled = True
            return True
        except CONNECTION_ERRORS as exc:
            del self.flights[i]
            with contextlib.suppress(Exception):
                conn.disconnect()
            if flight.reused:  # a dead idle connection: send once more on a new one
                master.drop_idle()
                self.dispatch(i, None, reused=False)
            else:  # it broke after the call was written: the call may have run
                self.out[i] = self.client._broken(i, self.name, exc)
            return True
        except redis.exceptions.RedisError as exc:
            del self.flights[i]
            master.give(conn)  # an error reply: the connection itself is fine
            self.out[i] = translate(exc, master.address, self.name)
            return True
        del self.flights[i]
        master.give(conn)
        self.out[i] = reply
        return True


T = TypeVar("T")


class RedlockDriver(RedlockClientBase):
    """The I/O under a Redlock client: running operations across the masters, listening for
    wake-ups, the watchdog."""

    _masters: list[Master]
    _policy: RenewalPolicy
    _closed: bool

    def _start_driver(self) -> None:
        self._mutex = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._watchdog: threading.Thread | None = None
        self._stop = threading.Event()
        fork.in_child(self._fresh_after_fork)

    def _fresh_after_fork(self) -> None:
        """In a forked child (``fork.in_child``): threads do not survive a fork, and a lock
        one of the parent's held stays held; the masters forget their own connections."""
        self._pool = None
        self._watchdog = None
        self._mutex = threading.Lock()

    def _stop_driver(self) -> None:
        self._stop.set()
        thread = self._watchdog
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for master in self._masters:
            master.client.close()
            master.drop_idle()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _check_fork(self) -> None:
        # nothing left to do: the child made all anew at the fork (_fresh_after_fork, the
        # masters' and their clients' own)
        self._state.check_fork()

    def _owner(self) -> str:
        self._check_fork()
        return self._state.owner(owner_number())

    def _helpers(self) -> ThreadPoolExecutor:
        with self._mutex:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=(MAX_CONNECTING + 2) * len(self._masters),
                    thread_name_prefix="redlease-redlock",
                )
            return self._pool

    def _run(self, op: core.RedlockOperation[T], name: str | None) -> T:
        """Perform ``op``'s requests one by one until it returns."""
        if self._closed:
            raise ClientClosedError(name=name)
        listening: Listening | None = None  # made when first needed (most calls never wait)
        late: Late = {}
        reply: Any = None
        try:
            while True:
                request = op.send(reply)
                if isinstance(request, core.Fanout):
                    reply = self._fanout(request.calls, request.timeout, name, late)
                elif isinstance(request, core.Listen):
                    if request.only_if_live and not self._any_subscriber():
                        reply = 0 if listening is None else listening.count()
                        continue
                    listening = listening or Listening()
                    reply = self._listen(request, listening, name)
                    self._stop_if_closed(name)
                elif isinstance(request, WaitWake):
                    listening = listening or Listening()
                    reply = listening.event.wait(request.timeout)
                    listening.event.clear()
                    self._stop_if_closed(name)  # close() wakes every waiter
                elif isinstance(request, Sleep):
                    self._stop.wait(request.seconds)  # set by close()
                    reply = None
                    self._stop_if_closed(name)
        except StopIteration as stop:
            result: T = stop.value
            return result
        finally:
            op.close()
            if listening is not None:
                listening.close()
            for conn, _ in late.values():
                with contextlib.suppress(Exception):
                    conn.disconnect()

    def _stop_if_closed(self, name: str | None) -> None:
        if self._closed:
            raise ClientClosedError(name=name)

    def _any_subscriber(self) -> bool:
        return any(m.client._subscriber is not None for m in self._masters)

    def _fanout(
        self, calls: tuple[Call | None, ...], timeout: float, name: str | None, late: Late
    ) -> list[Any]:
        """Send to every master, then read the replies as they come, all within ``timeout``;
        a master without an idle connection gets one from a helper thread meanwhile."""
        return Round(self, calls, name, late).run(time.monotonic() + timeout)

    def _listen(self, request: core.Listen, listening: Listening, name: str | None) -> int:
        wanted = [i for i in request.masters if not listening.has(i)]
        if request.only_if_live:
            for i in wanted:
                sub = self._masters[i].client._subscriber
                waiter = sub.listen_if_live(request.channel, request.owner) if sub else None
                if waiter is not None and sub is not None:
                    listening.adopt(i, sub, waiter)
            return listening.count()
        futures: list[Future[Waiter]] = []
        for i in wanted:
            sub = self._masters[i].client._subscriber_started()
            future = self._helpers().submit(
                sub.subscribe, request.channel, request.owner, name=name
            )
            future.add_done_callback(functools.partial(adopt, listening, i, sub))
            futures.append(future)
        # a subscription not confirmed in time still joins when it is (or is dropped if the
        # operation is over by then)
        wait_futures(futures, timeout=self.master_timeout)
        return listening.count()

    # --- the watchdog ---------------------------------------------------------------------

    def _watch(self) -> None:
        with self._mutex:
            if self._watchdog is None or not self._watchdog.is_alive():
                self._watchdog = threading.Thread(
                    target=self._watchdog_loop, name="redlease-redlock-watchdog", daemon=True
                )
                self._watchdog.start()

    def _watchdog_loop(self) -> None:
        policy, state = self._policy, self._state
        delay = policy.interval
        while not self._stop.wait(delay):
            with state.mutex:
                holds = state.holds.watched()
            if not holds:
                delay = policy.interval
                continue
            ok = True
            try:
                renewals = self._run(
                    core.renew(holds, policy, self.addresses, master_timeout=self.master_timeout),
                    None,
                )
            except Exception as exc:
                if self._closed:
                    return
                renewal_failed(state, policy, holds, exc, time.monotonic())
                ok = False
            else:
                ok = all(r.renewed for r in renewals)
                apply_renewals(state, policy, renewals, time.monotonic())
            delay = policy.next_delay(ok)
