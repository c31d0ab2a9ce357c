"""Cancellation shielding (asyncio only): a call that changed server state finishes, and is
undone or recorded, before a cancellation propagates."""

from __future__ import annotations

import asyncio
import contextlib
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
