"""Finishing despite a cancellation (asyncio): the one mechanism.

A call that changed (or may have changed) server state, such as a grant to give back or a
release, must finish, and be undone or recorded, before a cancellation of its caller goes on.
Callers use one family of entry points; how it is done is this module's choice:

* ``finish_call(send, then, packed=...)``: one script call (``send()``) whose outcome a
  cancelled caller must act on (``then``, e.g. give back a grant);
* ``finish_run(run, op, then, again=..., pack=...)``: a whole operation (a release), its
  result recorded by ``then``;
* ``finish_despite_cancel(awaitable, then)``: any other awaitable (a semaphore's or latch's
  call, a Redlock fan-out);
* ``bounded(awaitable)``: a best-effort give-back that a cancellation must not cut short;
* ``undo_despite_cancel(awaitable)``: the give-back of a caller already cancelled (the Redlock
  fan-out's take-back, bounded by its own deadline), before its cancellation goes on;
* ``before_sending(awaitable)``: a wait before a command goes out (a call slot, a
  connection, a script load), so that a cancellation there is known to have sent nothing;
* ``cancellable(awaitable)``: a redis-py call, so that a cancellation redis-py's
  ``asyncio.wait_for`` swallowed on Python 3.10 or 3.11 still stops the caller (the reverse
  guard: not finishing despite a cancellation, but not losing one).

Two paths, one guarantee (``then`` runs on the call's real outcome, within ``CANCEL_GRACE``,
before the cancellation propagates; the cancellation is never swallowed):

1. **In the caller's task** (``finish_call`` given ``packed``, ``finish_run`` given ``again``
   and ``pack``: a call packed by redlease, without replication). The call runs under
   ``_KEEP``; a transport (``transport.send_direct`` on a kept connection, or the pipeline)
   that sees its caller cancelled raises ``Cancelled``, carrying the command (``packed``),
   whether it was written and its reply read late (``read_late``) on the same connection.
   *Invariant relied on*: a command is either not written at all (nothing ran: nothing to
   undo) or its reply is read in order on that connection, whatever the cancellation; a
   reply is matched to its command by the exact packed bytes; when the outcome is still
   unknown (a connection lost, a cancellation between two tries) the call is sent once more,
   since every script is idempotent for a repeated request (same request ids, wait id).
   No task per call: the hot path stays one coroutine.
2. **A shielded task** (everything else: replication's pipeline with ``WAIT``, a cluster,
   redis-py's own commands). The call runs in a task of its own under ``asyncio.shield``; a
   cancelled caller waits for that task (at most ``CANCEL_GRACE``) and runs ``then`` on its
   result. *Invariant relied on*: redis-py's call, once started in its own task, is never
   cancelled by anyone else, so its result is the server's answer.

``_threads/cancel.py`` is the no-op twin: a thread's call cannot be cancelled midway.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

import redis.exceptions

from .._core.requests import Call, Operation
from .._redis.errors import HUNG
from ..errors import RedleaseError

T = TypeVar("T")

CANCEL_GRACE = 5.0
"""How long a cancelled call may still take to finish (and be undone) before we give up."""

GAVE_UP: tuple[type[BaseException], ...] = (
    RedleaseError,
    asyncio.TimeoutError,
    asyncio.CancelledError,
)
"""How a ``bounded`` give-back may fail: its own error, out of time, or cancelled."""

_KEEP: contextvars.ContextVar[bool] = contextvars.ContextVar("redlease_keep", default=False)
"""Set (path 1) around a call whose outcome its caller must learn even when cancelled: the
caller then gets a ``Cancelled`` that carries it (from the pipeline or a direct call)."""


class Cancelled(asyncio.CancelledError):
    """The caller of a call made in path 1 was cancelled: ``packed`` is the command, ``sent``
    whether it was written, ``outcome`` its reply or error (a done future) once read, ``None``
    if not sent or not answered within ``CANCEL_GRACE``."""

    def __init__(
        self,
        cancelled: asyncio.CancelledError,
        packed: bytes,
        sent: bool,
        outcome: asyncio.Future[Any] | None,
    ) -> None:
        super().__init__(*cancelled.args)  # the cancellation's message, if any
        self.packed = packed
        self.sent = sent
        self.outcome = outcome


def keeping() -> bool:
    """Whether the running call is in path 1 (for the transports: then raise ``Cancelled``)."""
    return _KEEP.get()


def unsent(cancelled: asyncio.CancelledError, packed: bytes = b"") -> asyncio.CancelledError:
    """What a transport raises for a caller cancelled before its command was written: in path
    1 a ``Cancelled`` saying nothing was sent, else the cancellation itself."""
    if _KEEP.get():
        return Cancelled(cancelled, packed, False, None)
    return cancelled


async def before_sending(awaitable: Awaitable[T]) -> T:
    """``await awaitable`` (a wait before a command is written: a call slot, another call's
    script load); a cancellation there is known to have sent nothing (``unsent``)."""
    try:
        return await awaitable
    except asyncio.CancelledError as cancelled:
        raise unsent(cancelled) from None


async def bounded(awaitable: Awaitable[T]) -> T:
    """``await awaitable`` in a task of its own that a cancellation of the caller does not
    stop, at most ``CANCEL_GRACE`` (``TimeoutError`` after)."""
    return await within(asyncio.shield(awaitable), CANCEL_GRACE)


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``, or ``asyncio.TimeoutError`` after ``seconds`` (``None``: no
    limit); a cancellation of the caller always raises ``CancelledError``.

    The engine's one timed wait, never ``asyncio.wait_for``: on Python 3.10 and 3.11
    ``wait_for`` returns the awaitable's result and drops the caller's cancellation when the
    awaitable ends in the turn of the cancellation or up to two turns before (CPython
    gh-86296): a waiter cancelled as it was woken went on waiting, still in line. From 3.11
    ``asyncio.timeout`` waits in the calling task and tells its own expiry from a caller's
    cancellation (``Task.cancelling()``). 3.10 has neither: ``awaitable`` runs in a task of
    its own, awaited with ``asyncio.wait``, which lets every cancellation out; that task is
    cancelled and awaited when the caller is cancelled or the time is up (a result it still
    returns after the time is up is returned, as ``wait_for`` does)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    task = asyncio.ensure_future(awaitable)  # pragma: no cover - Python 3.10
    try:
        done, _ = await asyncio.wait((task,), timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait((task,))
        if not task.cancelled():
            task.exception()  # retrieved: the caller's cancellation comes first
        raise
    if not done:
        task.cancel()
        await asyncio.wait((task,))
        if task.cancelled():
            raise asyncio.TimeoutError
    return task.result()


async def cancellable(awaitable: Awaitable[T]) -> T:
    """Await a call made through redis-py, and raise a cancellation it swallowed.

    On Python 3.10 and 3.11 redis-py writes every command in ``asyncio.wait_for`` (when a
    ``socket_timeout`` is set), and ``wait_for`` returns the inner result, dropping the
    caller's cancellation, when the two come in the same turn of the loop (CPython
    gh-86296, fixed in 3.12). On 3.11 the cancellation is still counted on the task
    (``Task.cancelling()``): one counted during the call and not taken back raises here, so a
    cancelled caller stops (inside a task of its own, as ``finish_despite_cancel`` runs a
    call, the count is that task's, which nobody cancels). 3.10 counts nothing: there the
    call is watched as it runs (``_Watched``), and a cancellation thrown into it while it
    waits in ``wait_for``, which the call then did not let out, raises here. A call that
    fails after such a cancellation raises the cancellation too: the caller was cancelled,
    that comes first. Inside ``asyncio.timeout`` (``async_timeout`` on 3.10) an expiry is
    such a cancellation: the timeout then raises ``TimeoutError`` as it would have."""
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - no task
        return await awaitable
    if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
        return await _Watched(awaitable)
    before = task.cancelling()
    try:
        result = await awaitable
    except asyncio.CancelledError:
        raise
    except Exception:
        if task.cancelling() > before:
            raise asyncio.CancelledError from None
        raise
    if task.cancelling() > before:
        raise asyncio.CancelledError
    return result


_WAIT_FOR = asyncio.wait_for.__code__


def _in_wait_for(awaitable: Awaitable[Any]) -> bool:
    """Whether ``awaitable`` (a coroutine) is suspended in ``asyncio.wait_for``'s own wait:
    the innermost coroutine it awaits through is ``wait_for``."""
    innermost = None
    current: Any = awaitable
    while True:
        code = getattr(current, "cr_code", None)
        if code is None:
            return innermost is _WAIT_FOR
        innermost = code
        current = current.cr_await


class _Watched(Generic[T]):
    """``await _Watched(call)`` is ``await call``, watched on its way (Python 3.10, where a
    task does not count its cancellations): every future the call waits on passes through,
    and every exception the task throws into it. A ``CancelledError`` thrown in while the
    call waits in ``asyncio.wait_for``, after which the call goes on (``wait_for`` returned
    the inner result, gh-86296) instead of letting it out, is raised when the call ends, or
    in place of the error it then raised. Cancellations the call handles elsewhere (a
    timeout of its own, turned into its ``TimeoutError``) are its business, as
    ``Task.uncancel()`` makes them on 3.11."""

    __slots__ = ("_call",)

    def __init__(self, call: Awaitable[T]) -> None:
        self._call = call

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self._call.__await__()
        swallowed: asyncio.CancelledError | None = None
        value: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                if thrown is None:
                    waited = steps.send(value)
                else:
                    if isinstance(thrown, asyncio.CancelledError) and _in_wait_for(self._call):
                        swallowed = thrown  # unless it comes out of the call right away
                    waited = steps.throw(thrown)
            except StopIteration as stop:
                if swallowed is not None:
                    raise asyncio.CancelledError(*swallowed.args) from None
                return stop.value  # type: ignore[no-any-return]
            except asyncio.CancelledError:
                raise
            except Exception:
                if swallowed is not None:
                    raise asyncio.CancelledError(*swallowed.args) from None
                raise
            value, thrown = None, None
            try:
                value = yield waited
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # what the task throws in (a cancellation)
                thrown = exc


async def undo_despite_cancel(undo: Awaitable[Any]) -> None:
    """Run ``undo`` (what a caller that was just cancelled gives back) in a task of its own and
    wait for it; a further cancellation stops the wait, not ``undo`` (bounded by itself), and
    its errors are suppressed: the caller re-raises its own cancellation next."""
    task = asyncio.ensure_future(undo)
    with contextlib.suppress(BaseException):
        await asyncio.shield(task)


async def finish_despite_cancel(awaitable: Awaitable[T], then: Callable[[T], Any]) -> T:
    """Await ``awaitable`` (path 2); if the caller is cancelled meanwhile, let it finish
    (bounded), run ``then`` on its result, and re-raise the cancellation."""
    task = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            result = await within(task, CANCEL_GRACE)
            outcome = then(result)
            if asyncio.iscoroutine(outcome):
                await within(outcome, CANCEL_GRACE)
        raise


async def finish_call(
    send: Callable[[], Awaitable[T]],
    then: Callable[[T], Awaitable[Any]],
    *,
    packed: Callable[[], bytes] | None = None,
) -> T:
    """``send()`` one script call; a cancelled caller runs ``then`` on its outcome (bounded)
    before the cancellation goes on. ``packed``: the command as redlease packs it, when it
    goes out that way (a direct call or the pipeline, no replication): then path 1 (in the
    caller's task; an unknown outcome is learnt by sending it once more), else path 2."""
    if packed is None:
        return await finish_despite_cancel(send(), then)
    keep: contextvars.Token[bool] | None = _KEEP.set(True)
    try:
        return await send()
    except asyncio.CancelledError as cancelled:  # (``_run_kept``, inlined: no closure per call)
        assert keep is not None
        _KEEP.reset(keep)
        keep = None
        plain = await _settled(cancelled, _settle(cancelled, send, packed, then))
        if plain is not cancelled:
            raise plain from None
        raise
    finally:
        if keep is not None:
            _KEEP.reset(keep)


async def finish_run(
    run: Callable[[Operation[T]], Awaitable[T]],
    op: Operation[T],
    then: Callable[[T], Any],
    *,
    again: Callable[[], Operation[T]] | None = None,
    pack: Callable[[Call], bytes] | None = None,
) -> T:
    """``run(op)``; a cancelled caller runs ``then`` on its result (bounded) before the
    cancellation goes on. With ``again`` (the operation made anew, same request ids) and
    ``pack`` (how redlease packs a call; ``None`` when its calls do not go out packed, as
    with replication): path 1, where the first call's reply, read late, answers ``again()``,
    and an outcome not known that way is learnt by running ``again()`` (the server
    recognises a request that already ran); else path 2."""
    if again is None or pack is None:
        return await finish_despite_cancel(run(op), then)
    keep: contextvars.Token[bool] | None = _KEEP.set(True)
    try:
        return await run(op)
    except asyncio.CancelledError as cancelled:  # (``_run_kept``, inlined: no closure per call)
        assert keep is not None
        _KEEP.reset(keep)
        keep = None
        plain = await _settled(cancelled, _settle_run(cancelled, run, again, pack, then))
        if plain is not cancelled:
            raise plain from None
        raise
    finally:
        if keep is not None:
            _KEEP.reset(keep)


async def _settle_run(
    cancelled: asyncio.CancelledError,
    run: Callable[[Operation[T]], Awaitable[T]],
    again: Callable[[], Operation[T]],
    pack: Callable[[Call], bytes],
    then: Callable[[T], Any],
) -> None:
    """Run ``then`` on the result of an operation whose caller was cancelled (see
    ``finish_run``)."""
    result = _answered(again(), cancelled, pack)
    if result is None:
        result = (await run(again()),)
    then(result[0])


def _answered(
    op: Operation[T], cancelled: asyncio.CancelledError, pack: Callable[[Call], bytes]
) -> tuple[T] | None:
    """The result of ``op`` when its first call's reply, read late, is what ``cancelled``
    carries and finishes it; else ``None``."""
    if not isinstance(cancelled, Cancelled):
        return None
    outcome = cancelled.outcome
    if outcome is None or outcome.exception() is not None:
        return None
    try:
        request = op.send(None)
        if not isinstance(request, Call) or pack(request) != cancelled.packed:
            return None
        op.send(outcome.result())
    except StopIteration as stop:
        return (stop.value,)
    finally:
        op.close()
    return None  # it has more to send: run anew


async def _settled(
    cancelled: asyncio.CancelledError, settle: Awaitable[Any]
) -> asyncio.CancelledError:
    """The cancellation a caller of ``finish_call`` or ``finish_run`` (awaited under
    ``_KEEP``) raises once ``settle`` (what the cancellation carries: see ``Cancelled``) has
    run within ``CANCEL_GRACE``, its errors suppressed."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await within(settle, CANCEL_GRACE)
    if isinstance(cancelled, Cancelled):
        # a plain one: asyncio.timeout() recognises its own by the exact class
        return asyncio.CancelledError(*cancelled.args)
    return cancelled


async def _settle(
    cancelled: asyncio.CancelledError,
    send: Callable[[], Awaitable[T]],
    packed: Callable[[], bytes],
    then: Callable[[T], Awaitable[Any]],
) -> None:
    """Run ``then`` on the outcome of a call whose caller was cancelled (see
    ``finish_call``)."""
    if isinstance(cancelled, Cancelled):
        if not cancelled.sent:
            return  # never written: nothing to undo
        if cancelled.packed != packed():
            return  # another command of the call (SCRIPT LOAD, TYPE): its script did not run
        outcome = cancelled.outcome
        if outcome is not None:
            error = outcome.exception()
            if error is None:
                await then(outcome.result())
                return
            if isinstance(error, HUNG) or not isinstance(error, redis.exceptions.ConnectionError):
                return  # refused (nothing ran), or hung: as a call that raised
    await then(await send())
