"""Cancellation shielding (asyncio only): a call that changed server state finishes, and is
undone or recorded, before a cancellation propagates."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

CANCEL_GRACE = 5.0
"""How long a cancelled call may still take to finish (and be undone) before we give up."""


async def finish_despite_cancel(awaitable: Awaitable[T], then: Callable[[T], Any]) -> T:
    """Await ``awaitable``; if the caller is cancelled meanwhile, let it finish (bounded), run
    ``then`` on its result, and re-raise the cancellation."""
    task = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            result = await asyncio.wait_for(task, CANCEL_GRACE)
            outcome = then(result)
            if asyncio.iscoroutine(outcome):
                await asyncio.wait_for(outcome, CANCEL_GRACE)
        raise


async def cancellable(awaitable: Awaitable[T]) -> T:
    """Await a call made through redis-py, and raise a cancellation it swallowed.

    On Python 3.11 redis-py writes every command in ``asyncio.wait_for`` (when a
    ``socket_timeout`` is set), and ``wait_for`` returns the inner result, dropping the
    caller's cancellation, when the two come in the same turn of the loop (CPython
    gh-86296, fixed in 3.12). The cancellation is still counted on the task
    (``Task.cancelling()``): one counted during the call and not taken back raises here, so a
    cancelled caller stops (inside a task of its own, as ``finish_despite_cancel`` runs a
    call, the count is that task's, which nobody cancels)."""
    task = asyncio.current_task()
    if task is None or sys.version_info < (3, 11):  # pragma: no cover - no task, or 3.10
        return await awaitable
    before = task.cancelling()
    result = await awaitable
    if task.cancelling() > before:
        raise asyncio.CancelledError
    return result
