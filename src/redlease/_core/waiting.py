"""The bounded wait loop the semaphores and the latch share: try, listen, wait for a wake-up
(or a re-check), try again; ride out an outage; drop the waiter's registration on giving up."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from ..errors import ServerUnavailableError
from .backoff import Outage
from .lock import OUTAGE_TOLERANCE, RECHECK
from .requests import Call, Operation, Sleep, Subscribe, WaitWake
from .scripts import Script

R = TypeVar("R")

SEMAPHORE_LEAVE = Script.load("semaphore_leave")
"""A waiter's leave: its registration in the semaphores' and the latch's ``waiters`` key
(a set, not a line: see the glossary, docs/layout.md)."""


def wait_loop(
    channel: str,
    owner: str,
    leave: Call | None,
    attempt: Callable[[bool], Generator[Any, Any, tuple[R | None, float]]],
    *,
    timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
    retry_until: Callable[[], float] | None = None,
) -> Operation[R | None]:
    """Try, and while time is left wait for a wake-up and try again; ``None`` on timeout.

    ``attempt(register)`` is one try: it returns the result (``None``: not yet) and how long
    until a re-check is worthwhile anyway (``math.inf``: only a wake-up helps; 0: at once).
    An attempt that cannot succeed however often it is sent paces itself (see
    ``lease_acquire``). Listening
    starts before the first try when the client already listens on ``channel``, else after
    the first failed try, which is then repeated at once (a wake-up between the two would be
    missed). Every wait is bounded by the hint, our own deadline and ``RECHECK``, so a lost
    message costs at most ``RECHECK``. A waiter that has listened rides out a server outage of
    up to ``OUTAGE_TOLERANCE``, but never sends a try after ``retry_until()`` (a request whose
    outcome is unknown past its window: see ``Windows``). ``timeout=0`` tries once. Giving up
    runs ``leave``.
    """
    deadline = None if timeout is None else clock() + timeout
    blocking = timeout is None or timeout > 0
    subscribed = bool(blocking and (yield Subscribe(channel, owner, leave, True)))
    outage = Outage(clock, deadline, OUTAGE_TOLERANCE)
    while True:
        try:
            result, hint = yield from attempt(blocking)
        except ServerUnavailableError:
            pause = outage.failed(listening=subscribed)
            if pause is None or (retry_until is not None and clock() + pause >= retry_until()):
                raise
            yield Sleep(pause)
            continue
        outage.ended()
        if result is not None:
            return result
        if not blocking:
            return None
        remaining = math.inf if deadline is None else deadline - clock()
        if remaining <= 0:
            if leave is not None:
                yield leave
            return None
        if not subscribed:
            yield Subscribe(channel, owner, leave)  # listens, or raises
            subscribed = True
            continue
        yield WaitWake(max(0.0, min(remaining, hint, RECHECK)))


def leave_call(waiters: str, owner: str) -> Call:
    """A waiter drops its registration (it gave up)."""
    return Call(SEMAPHORE_LEAVE, (waiters,), (owner,))
