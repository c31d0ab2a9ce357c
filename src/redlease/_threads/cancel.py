"""Finishing despite a cancellation, on threads: the no-op twin of ``_asyncio/cancel.py``.

A thread's call cannot be cancelled midway: each entry point just runs (or returns) the call,
and ``then`` is never needed (the caller acts on the result itself, as it would had nothing
happened). The same names and parameters as the asyncio module, so a shell file is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._core.requests import Call, Operation
from ..errors import RedleaseError

T = TypeVar("T")

CANCEL_GRACE = 5.0
"""How long a cancelled call may still take to finish on asyncio (unused on threads)."""


GAVE_UP: tuple[type[BaseException], ...] = (RedleaseError,)
"""How a ``bounded`` give-back may fail: its own error (on threads, no other way)."""


def before_sending(awaitable: T) -> T:
    """The result of a wait before a command is written (nothing to do)."""
    return awaitable


def cancellable(awaitable: T) -> T:
    """The result of a redis-py call (no cancellation to lose on threads)."""
    return awaitable


def bounded(awaitable: T) -> T:
    """The result of a best-effort give-back (already done, in this thread)."""
    return awaitable


def undo_despite_cancel(undo: Any) -> None:
    """Nothing: a thread's call is not cancelled, so there is nothing to give back for it
    (named as on asyncio, where the Redlock fan-out calls it)."""


def finish_despite_cancel(awaitable: T, then: Callable[[T], Any]) -> T:
    """The call's result (named as on asyncio: there it is awaited; here it ran to its end
    in this thread)."""
    return awaitable


def finish_call(
    send: Callable[[], T],
    then: Callable[[T], Any],
    *,
    packed: Callable[[], bytes] | None = None,
) -> T:
    """``send()``."""
    return send()


def finish_run(
    run: Callable[[Operation[T]], T],
    op: Operation[T],
    then: Callable[[T], Any],
    *,
    again: Callable[[], Operation[T]] | None = None,
    pack: Callable[[Call], bytes] | None = None,
) -> T:
    """``run(op)``."""
    return run(op)


class Cancelled(BaseException):
    """Never raised: a thread's call is not cancelled (asyncio's carries a late reply)."""

    def __init__(self, cancelled: BaseException, packed: bytes, sent: bool, outcome: Any) -> None:
        super().__init__(*cancelled.args)
        self.packed = packed
        self.sent = sent
        self.outcome = outcome


def keeping() -> bool:
    """``False``: no call of a thread is ever cancelled midway."""
    return False


def unsent(cancelled: BaseException, packed: bytes = b"") -> BaseException:
    """The cancellation itself (never met on threads)."""
    return cancelled
