"""The asyncio pipeline (issue #15): script calls from many tasks share a few connections.

Each call is a command packed by ``_wire.Packer``. It joins the queue of one of at most
``WIDTH`` connections taken from the client's redis-py pool (so TLS, ACL users, ``HELLO`` and
health checks stay redis-py's); a writer task per connection sends everything queued in one
write, and a reader task reads the replies in order and hands each to its caller, as
Redisson's Netty client does. Replies are matched to callers by position only, so nothing may
ever be sent or read out of turn:

* a caller cancelled before its command was written is dropped from the batch (never sent);
  one cancelled after has its reply read and discarded, so the connection stays in step;
* an error reply (``NOSCRIPT``, ``WRONGTYPE``) is that call's exception, the connection kept;
* a connection error or a read timeout (the pool's ``socket_timeout``) fails every call
  queued on that connection with a copy of the error; the connection is disconnected and
  given back to the pool, the other connections take no new call, and the next call opens a
  fresh one. After a connection error (never a timeout) a call is sent again as redis-py
  sends its own (the connections' ``retry``), then once more by the client: every script is
  idempotent for a repeated request.

Without the pipeline (the default) an ``AsyncClient`` sends one command per checked-out
connection, in the caller's task (``send_checked_out``, ``send_direct``); a caller cancelled in
``cancel``'s path 1 after its command went out still reads the reply (``read_late``). The sync
``Client`` sends one command per checked-out connection too (``_threads/transport.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import redis.exceptions

if sys.version_info >= (3, 11):
    from asyncio import timeout as async_timeout
else:  # redis-py's own dependency there
    from async_timeout import timeout as async_timeout  # type: ignore[import-not-found, no-redef, unused-ignore]

from .._core.log import log
from .._redis.errors import HUNG, Hung, fresh_copy
from .._redis.wire import NOT_ENOUGH_DATA, SPARE_CONNECTIONS, buffered_reply, hiredis_parser
from .._shared import fork
from .cancel import CANCEL_GRACE, Cancelled, cancellable, keeping, within

WIDTH = 2
"""Connections a pipeline keeps at most: one is enough to keep a single server busy; a second
opens when the first has ``SPREAD`` calls waiting, so one slow batch does not hold all back."""

SPREAD = 64
"""Calls queued on every open connection before another one is opened."""

DEPTH = 4096
"""Calls queued or awaiting their reply at once, over all connections; a caller beyond it
waits for room (back-pressure instead of unbounded memory)."""

RETIRE_GRACE = 5.0
"""How long retiring a connection waits for its reader and writer tasks to end."""


class PipelineClosedError(redis.exceptions.ConnectionError):
    """The pipeline was closed with the call still queued (``AsyncClient.close``)."""


_UNSENT = object()
"""What a cancelled caller in ``cancel``'s path 1 learns of a call the writer dropped unsent."""


class _Link:
    """One connection of a pipeline: its queue to write, the calls awaiting their reply
    (in the order they were written), and its writer and reader tasks."""

    __slots__ = (
        "conn",
        "dead",
        "draining",
        "outgoing",
        "pending",
        "readable",
        "reader",
        "wake",
        "writer",
    )

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.outgoing: list[tuple[bytes, asyncio.Future[Any]]] = []
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.wake = asyncio.Event()  # set when outgoing has calls for the writer
        self.readable = asyncio.Event()  # set when pending has calls for the reader
        self.dead = False
        self.draining = False  # takes no new calls; retired once its replies are read
        self.writer: asyncio.Task[None] | None = None
        self.reader: asyncio.Task[None] | None = None

    @property
    def load(self) -> int:
        return len(self.outgoing) + len(self.pending)


@dataclass
class _Home:
    """Where a pipeline's connections belong: an event loop of one process."""

    loop: asyncio.AbstractEventLoop | None = None


class Pipeline:
    """Script calls of one ``AsyncClient`` on at most ``width`` connections of ``pool``,
    written in batches and read in order. Use it from one event loop."""

    def __init__(self, pool: Any, checkout: tuple[str, ...] = (), width: int = WIDTH) -> None:
        self._pool = pool
        self._checkout = checkout
        self._width = max(1, width)
        self._links: list[_Link] = []  # the connections new calls go to
        self._draining: list[_Link] = []  # suspect ones: their calls finish, no new ones
        self._opening: asyncio.Future[_Link] | None = None
        self._queued = 0  # calls queued or awaiting their reply
        self._room: deque[asyncio.Future[None]] | None = None  # callers waiting for room
        self._retiring: set[asyncio.Task[None]] = set()
        self._home: fork.PerProcess[_Home] = fork.PerProcess(_Home)
        """The event loop the connections belong to, in this process (a forked child's
        starts with none: the connections it finds are its parent's)."""
        self._retry: Any = None  # the connections' redis-py ``retry``, once one is open
        self._kept: set[asyncio.Future[Any]] = set()
        """Calls whose caller, if cancelled, still wants the reply (``cancel``'s path 1)."""
        self._late: dict[asyncio.Future[Any], asyncio.Future[Any]] = {}
        """Where the reply of a kept call goes once its caller is cancelled: made only then
        (by the cancelled caller, or by whoever meets the reply or the failure first)."""
        self.closed = False

    def call(self, packed: bytes) -> Coroutine[Any, Any, Any]:
        """Send ``packed`` (one whole command) and return its reply; an error reply is raised
        (redis-py's ``ResponseError`` and its kinds), as is a connection error or a timeout.
        After a connection error it is sent again as redis-py sends its own commands again
        (the connections' ``retry``); never after a timeout (it would only wait again)."""
        return self._call_once(packed, first=True)

    async def _call_again(self, packed: bytes, failed: Exception) -> Any:
        """``call`` after its first attempt failed with ``failed``: the rest of the attempts
        the connections' ``retry`` allows, with its back-off (``failed`` counts as the first)."""
        first = [failed]

        async def attempt() -> Any:
            if first:
                raise first.pop()  # the failure already met: counted, backed off from
            try:
                return await self._call_once(packed)
            except (*HUNG, PipelineClosedError) as exc:
                raise Hung(exc) from exc  # not one redis-py's retry retries

        try:
            return await self._retry.call_with_retry(attempt, _nothing)
        except Hung as exc:
            raise exc.error from None

    async def _call_once(self, packed: bytes, first: bool = False) -> Any:
        """One attempt of ``call``; the ``first`` one goes on with the others after a
        connection error (``_call_again``)."""
        loop = asyncio.get_running_loop()
        if loop is not self._home.get().loop:
            # a forked child (or another event loop) never touches the connections it finds
            self._forget(loop)
        keep = keeping()
        try:
            try:
                if self._queued >= DEPTH:
                    await self._wait_for_room()
                if self.closed:
                    raise PipelineClosedError("the pipeline is closed")
                link = self._pick()
                if link is None:
                    link = await self._open()
                    if link.dead:  # failed as it opened (its error went to the calls it had)
                        raise redis.exceptions.ConnectionError("the pipeline's connection closed")
            except asyncio.CancelledError as cancelled:
                if keep:
                    raise Cancelled(cancelled, packed, False, None) from None
                raise
            future: asyncio.Future[Any] = loop.create_future()
            if keep:  # its reply is handed on if the caller is cancelled before it is read
                self._kept.add(future)
            link.outgoing.append((packed, future))
            link.wake.set()
            self._queued += 1
            try:
                return await future
            except asyncio.CancelledError as cancelled:
                if not keep:
                    raise
                raise await self._cancelled(cancelled, link, packed, future) from None
            finally:
                if keep:
                    self._kept.discard(future)
                    if self._late:
                        self._late.pop(future, None)
                self._queued -= 1
                if self._room is not None and self._queued < DEPTH:
                    self._make_room()
        except (*HUNG, PipelineClosedError):
            raise
        except redis.exceptions.ConnectionError as exc:
            if not first or self._retry is None:
                raise
            failed = exc
        return await self._call_again(packed, failed)

    async def _cancelled(
        self,
        cancelled: asyncio.CancelledError,
        link: _Link,
        packed: bytes,
        future: asyncio.Future[Any],
    ) -> Cancelled:
        """What a caller cancelled in ``cancel``'s path 1 raises: a call not yet written is dropped
        (the writer skips a cancelled one); else its reply, still read in turn, is awaited
        (bounded) and handed up."""
        if future.done() and not future.cancelled():
            return Cancelled(cancelled, packed, True, future)  # answered as it was cancelled
        late = self._late.get(future)  # answered (or dropped unsent) since it was cancelled
        if late is None:
            if future not in self._kept or any(queued is future for _, queued in link.outgoing):
                return Cancelled(cancelled, packed, False, None)  # the writer skips it
            late = self._late_of(future)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({late}, timeout=CANCEL_GRACE)
        if late.done() and not late.exception() and late.result() is _UNSENT:
            return Cancelled(cancelled, packed, False, None)  # dropped by the writer
        return Cancelled(cancelled, packed, True, late if late.done() else None)

    def _late_of(self, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Where the reply of ``future``'s call (a kept one) goes once its caller is cancelled."""
        late = self._late.get(future)
        if late is None:
            late = asyncio.get_running_loop().create_future()
            late.add_done_callback(_retrieved)
            self._late[future] = late
        return late

    def _hand_late(
        self, future: asyncio.Future[Any], reply: Any, error: BaseException | None
    ) -> None:
        """Hand the reply (or error) of a cancelled caller's call to it (in ``cancel``'s path 1)."""
        if future not in self._kept:
            return
        late = self._late_of(future)
        if late.done():
            return
        if error is None:
            late.set_result(reply)
        else:
            late.set_exception(error)

    async def _wait_for_room(self) -> None:
        """Wait until fewer than ``DEPTH`` calls are queued (woken in turn, never polled)."""
        if self._room is None:
            self._room = deque()
        while self._queued >= DEPTH:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._make_room()  # pass the turn on
                raise

    def _make_room(self) -> None:
        room = self._room
        while room:
            waiter = room.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @property
    def connections(self) -> int:
        """Connections open now (for tests and benchmarks)."""
        return len(self._links) + len(self._draining)

    def _pick(self) -> _Link | None:
        """The live connection with the fewest calls queued, or ``None`` when another one
        should be opened first (none yet); starts opening one more in the background when
        every open one is busy."""
        links = self._links
        if not links:
            return None
        best = links[0]
        if len(links) > 1:
            for link in links[1:]:
                if link.load < best.load:
                    best = link
        if best.load >= SPREAD and len(links) < self._width and self._opening is None:
            self._start_opening()
        return best

    async def _open(self) -> _Link:
        """A connection to queue on: the one being opened, or a new one."""
        if self._opening is None:
            self._start_opening()
        assert self._opening is not None
        try:
            return await asyncio.shield(self._opening)
        except Exception as exc:
            raise fresh_copy(exc) from None  # each waiter its own (see fresh_copy)

    def _start_opening(self) -> None:
        loop = asyncio.get_running_loop()
        opening: asyncio.Future[_Link] = loop.create_future()
        self._opening = opening

        async def open_one() -> None:
            try:
                conn = await self._pool.get_connection(*self._checkout)
                if self.closed:
                    await self._pool.release(conn)
                    raise PipelineClosedError("the pipeline is closed")
            except BaseException as exc:
                self._opening = None
                if not isinstance(exc, Exception):
                    opening.cancel()
                    raise
                opening.set_exception(exc)
                opening.exception()  # retrieved: only the callers waiting need it
                return
            self._retry = getattr(conn, "retry", None)
            link = _Link(conn)
            link.writer = loop.create_task(self._write(link), name="redlease-pipeline-writer")
            link.reader = loop.create_task(self._read(link), name="redlease-pipeline-reader")
            self._links.append(link)
            self._opening = None
            opening.set_result(link)

        task = loop.create_task(open_one(), name="redlease-pipeline-open")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _write(self, link: _Link) -> None:
        """Send everything queued on ``link`` in one write, batch after batch."""
        conn, pending = link.conn, link.pending
        try:
            while True:
                if not link.outgoing:
                    link.wake.clear()
                    await link.wake.wait()
                    continue
                if not conn.is_connected:  # never let redis-py reconnect it under the reader
                    raise redis.exceptions.ConnectionError("pipeline connection closed")
                if not pending and conn.health_check_interval:
                    await conn.check_health()  # PING while no reply is due (the reader idles)
                if _closed_under(conn):  # (on 3.12+ nothing suspends from here to the write)
                    raise redis.exceptions.ConnectionError("pipeline connection closed")
                batch, link.outgoing = link.outgoing, []
                # a call cancelled before it is written is never sent
                live = [(packed, future) for packed, future in batch if not future.done()]
                if len(live) < len(batch) and self._kept:
                    for _, future in batch:
                        if future.done():
                            self._hand_late(future, _UNSENT, None)
                if not live:
                    continue
                pending.extend(future for _, future in live)
                link.readable.set()
                await conn.send_packed_command([packed for packed, _ in live], check_health=False)
        except BaseException as exc:
            self._fail(link, exc)
            if not isinstance(exc, Exception):
                raise

    async def _read(self, link: _Link) -> None:
        """Read ``link``'s replies in order and hand each to its caller (unless cancelled).
        Each read that waits for the socket is redis-py's ``read_response`` (bounded by the
        pool's ``socket_timeout``); with hiredis, the replies that came in the same read of the
        socket are then taken from its buffer at once, without waiting (one read per batch
        instead of one per reply: no timer, no coroutines per reply)."""
        conn, pending = link.conn, link.pending
        parser = hiredis_parser(conn)  # None: redis-py's Python parsers, one by one
        push = getattr(parser, "_hiredis_PushNotificationType", None)  # (set as it connected)
        try:
            while True:
                if not pending:
                    link.readable.clear()
                    await link.readable.wait()
                    continue
                try:
                    reply = await conn.read_response()
                except redis.exceptions.ResponseError as exc:  # an error reply, read whole
                    reply = exc
                self._answer(pending.popleft(), reply)
                while pending and parser is not None:  # what is read already: no wait
                    reply = buffered_reply(parser)
                    if reply is NOT_ENOUGH_DATA:
                        break
                    if push is not None and isinstance(reply, push):
                        await parser.handle_push_response(reply)  # as redis-py's read does
                        continue
                    self._answer(pending.popleft(), reply)
                if link.draining and not link.load:
                    self._retire(link)
                    return
        except BaseException as exc:
            self._fail(link, exc)
            if not isinstance(exc, Exception):
                raise

    def _answer(self, future: asyncio.Future[Any], reply: Any) -> None:
        """Hand ``reply`` (an error reply: a ``ResponseError``) to the caller of ``future``."""
        error = reply if isinstance(reply, redis.exceptions.ResponseError) else None
        if future.done():
            if self._kept:
                self._hand_late(future, reply, error)
        elif error is None:
            future.set_result(reply)
        else:
            future.set_exception(error)

    def _fail(self, link: _Link, exc: BaseException) -> None:
        """Fail every call queued on ``link`` with (a copy of) ``exc`` and retire it. After a
        connection error or a timeout the other connections most likely died with it (a
        restart, a cut, a hung server): the idle ones go at once, the busy ones take no new
        call and go once their replies are read, so that a call's second try goes to a fresh
        connection."""
        if link.dead:
            return
        self._retire(link)
        error = _connection_error(exc)
        sent, unsent = list(link.pending), [future for _, future in link.outgoing]
        link.pending.clear()
        link.outgoing.clear()
        for future in (*sent, *unsent):
            if not future.done():
                future.set_exception(fresh_copy(error))
            elif self._kept:
                if future in unsent:
                    self._hand_late(future, _UNSENT, None)
                else:
                    self._hand_late(future, None, fresh_copy(error))
        if not isinstance(error, PipelineClosedError):
            suspect, self._links = self._links, []
            for other in suspect:
                if other.load:
                    other.draining = True
                    self._draining.append(other)
                else:
                    self._retire(other)

    def _retire(self, link: _Link) -> None:
        """Stop ``link``'s tasks, then disconnect it and give it back to the pool."""
        link.dead = True
        for links in (self._links, self._draining):
            with contextlib.suppress(ValueError):
                links.remove(link)
        current = asyncio.current_task()
        tasks = [t for t in (link.writer, link.reader) if t is not None]
        for task in tasks:
            if task is not current:
                task.cancel()
        others = [t for t in tasks if t is not current]

        async def retire() -> None:
            if others:
                await asyncio.wait(others, timeout=RETIRE_GRACE)
            try:
                await link.conn.disconnect(nowait=True)
            finally:
                await self._pool.release(link.conn)

        task = asyncio.get_running_loop().create_task(retire(), name="redlease-pipeline-retire")
        self._retiring.add(task)
        task.add_done_callback(self._retired)

    def _retired(self, task: asyncio.Task[None]) -> None:
        self._retiring.discard(task)
        if not task.cancelled():
            task.exception()  # a failed disconnect is nothing to report

    async def close(self) -> None:
        """Fail what is still queued, stop the tasks, give every connection back."""
        self.closed = True
        if self._home.get().loop is not asyncio.get_running_loop():
            self._forget(None)
            return
        for link in [*self._links, *self._draining]:
            self._fail(link, PipelineClosedError("the pipeline is closed"))
        if self._retiring:
            await asyncio.wait(list(self._retiring), timeout=RETIRE_GRACE)

    def _forget(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Drop every connection without touching it: they belong to a parent process, or
        to another event loop (whose tasks would never run on this one)."""
        self._home.get().loop = loop
        self._links = []
        self._draining = []
        self._kept = set()
        self._late = {}
        self._opening = None
        self._queued = 0
        self._room = None
        self._retiring = set()


def _closed_under(conn: Any) -> bool:
    """Whether ``conn`` was closed by another task, its close not finished yet (redis-py's
    ``disconnect()`` closes the transport, then awaits its end before it forgets it: a
    ``pool.disconnect()`` of the application's, say). Writing on it then is no write at all;
    on Python 3.12 and 3.13.0 ``writelines`` even raises ``TypeError`` ('NoneType' object is not
    callable: a closed transport's write callback is gone)."""
    writer = getattr(conn, "_writer", None)  # an asyncio.StreamWriter
    return writer is not None and writer.transport.is_closing()


def _connection_error(exc: BaseException) -> Exception:
    """What the calls of a connection that failed with ``exc`` get: a redis-py error as it
    is; a stop (a cancellation) as ``PipelineClosedError``; anything else that broke the
    connection's reader or writer as a ``ConnectionError`` (logged, with its cause): the call
    is then retried as after a lost connection, and never hands an internal error (a
    ``TypeError`` from a transport closed mid-write) to the caller."""
    if isinstance(exc, redis.exceptions.RedisError):
        return exc
    if not isinstance(exc, Exception):
        return PipelineClosedError("pipeline stopped")
    log.warning("pipeline connection broke unexpectedly", exc_info=exc)
    error = redis.exceptions.ConnectionError(f"pipeline connection broke: {exc!r}")
    error.__cause__ = exc
    return error


async def drop_idle(pool: Any) -> None:
    """Close the idle connections of ``pool`` (a call's connection failed: the others most
    likely died with it), each one at once, while it is still idle. Not redis-py's
    ``pool.disconnect(inuse_connections=False)``: it closes them in tasks of their own, a turn
    later, by when the pool may have handed one out (to the pipeline opening a connection),
    which was then closed under its new user."""
    idle = pool._available_connections
    for conn in list(idle):
        if conn in idle:  # still idle: nothing else uses it, and closing it never suspends
            await conn.disconnect(nowait=True)


async def send_checked_out(
    pool: Any, checkout: tuple[str, ...], spare: list[Any], packed: bytes
) -> Any:
    """A command packed by redlease, on a connection kept between calls (``spare``, at most
    ``SPARE_CONNECTIONS``; else one from ``pool``), in the caller's task; a dead connection is
    retried as redis-py's own commands are (the connection's ``retry``). A caller cancelled in
    ``cancel``'s path 1 gets a ``Cancelled`` carrying the reply, read late, when the command
    was written."""
    keep = keeping()
    progress = Progress()
    try:
        conn = spare.pop()
    except IndexError:
        try:
            conn = await pool.get_connection(*checkout)
        except asyncio.CancelledError as cancelled:
            if keep:
                raise Cancelled(cancelled, packed, False, None) from None
            raise

    async def send() -> Any:
        try:
            return await send_direct(conn, packed, progress)
        except HUNG as exc:  # a hung server: redis-py's retry would only wait again
            raise Hung(exc) from exc

    async def failed(_: Exception) -> None:
        await conn.disconnect()

    try:
        reply = await conn.retry.call_with_retry(send, failed)
    except redis.exceptions.ResponseError:
        spare.append(conn)  # an error reply, read whole: the connection is fine
        raise
    except BaseException as exc:
        if keep and isinstance(exc, asyncio.CancelledError):
            raise await _kept(exc, pool, spare, conn, packed, progress) from None
        # nothing or half a reply read (or cancelled mid-read): never reuse it as it is
        await conn.disconnect(nowait=True)
        await pool.release(conn)
        if isinstance(exc, Hung):
            raise exc.error from None
        raise
    if len(spare) < SPARE_CONNECTIONS:
        spare.append(conn)
    else:
        await pool.release(conn)
    return reply


async def _kept(
    cancelled: asyncio.CancelledError,
    pool: Any,
    spare: list[Any],
    conn: Any,
    packed: bytes,
    progress: Progress,
) -> Cancelled:
    """What a direct call cancelled in path 1 raises: the reply, read late when the caller
    was cancelled awaiting it; else whether its command may have gone out."""
    outcome = await read_late(conn) if progress.reading else None
    if outcome is not None and len(spare) < SPARE_CONNECTIONS:
        spare.append(conn)  # read in step: as good as any
    else:
        await conn.disconnect(nowait=True)
        await pool.release(conn)
    return Cancelled(cancelled, packed, progress.written, outcome)


class Progress:
    """How far a direct call got: ``written``, its command went out (in some try);
    ``reading``, the try now running awaits the reply (the connection is in step)."""

    __slots__ = ("reading", "written")

    def __init__(self) -> None:
        self.written = False
        self.reading = False


async def send_direct(conn: Any, packed: bytes, progress: Progress) -> Any:
    """Write ``packed`` on ``conn`` (checked out by the caller) and return its reply, in the
    caller's task: no task per command (redis-py's ``send_packed_command`` runs the write in
    ``asyncio.wait_for`` when a ``socket_timeout`` is set, one task and one loop turn more per
    call), and the socket timeout bounds the write only when it has to wait for room. A
    cancellation leaves ``conn`` in step (the reply still to be read: ``read_late``)
    once the command is written; any other failure disconnects it."""
    progress.reading = False
    if not conn.is_connected:
        await cancellable(conn.connect())  # (its HELLO, AUTH, ...: redis-py's writes)
    if conn.health_check_interval:  # a PING when redis-py's health_check_interval is due
        await cancellable(conn.check_health())
    writer = getattr(conn, "_writer", None)  # an asyncio.StreamWriter
    progress.written = True  # from here a cancellation may find the command sent
    try:
        if writer is None:
            await conn.send_packed_command([packed], check_health=False)
        else:
            writer.write(packed)  # all of it is on its way: the transport sends what it holds
            progress.reading = True
            if writer.transport.get_write_buffer_size():
                # not all of it went out at once: wait for room, bounded as redis-py bounds it
                await within(writer.drain(), conn.socket_timeout)
    except asyncio.TimeoutError:
        progress.reading = False
        await conn.disconnect(nowait=True)
        raise redis.exceptions.TimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        progress.reading = False
        await conn.disconnect(nowait=True)
        raise redis.exceptions.ConnectionError(f"Error while writing to socket: {exc}") from exc
    progress.reading = True
    try:
        return await conn.read_response(disconnect_on_error=False)
    except redis.exceptions.ResponseError:
        raise  # an error reply, read whole: the connection is in step
    except Exception:
        progress.reading = False  # nothing more to read on it (a retry may follow)
        await conn.disconnect(nowait=True)
        raise


async def read_late(conn: Any) -> asyncio.Future[Any] | None:
    """The reply of a direct call whose caller was cancelled while awaiting it (a done future:
    the reply or an error reply), read on ``conn`` within ``CANCEL_GRACE`` whatever further
    cancellations come meanwhile (as a task of its own would have); ``None`` when it could not
    be read (``conn`` is then disconnected)."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()
    outcome.add_done_callback(_retrieved)
    deadline = loop.time() + CANCEL_GRACE
    while not outcome.done():
        try:
            async with async_timeout(max(0.0, deadline - loop.time())):
                outcome.set_result(await conn.read_response(disconnect_on_error=False))
        except redis.exceptions.ResponseError as exc:
            outcome.set_exception(exc)
        except asyncio.CancelledError:
            if loop.time() < deadline:
                continue  # cancelled again: the read resumes where it stopped
            await conn.disconnect(nowait=True)
            return None
        except BaseException:
            await conn.disconnect(nowait=True)
            return None
    return outcome


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark an abandoned call's error as seen (no "exception never retrieved" warning)."""
    if not future.cancelled():
        future.exception()


async def _nothing(_: Exception) -> None:
    """What redis-py's retry does to a failed connection here: nothing (already retired)."""
