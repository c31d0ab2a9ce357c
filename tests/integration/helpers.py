"""Waiting helpers: bounded waits on a condition, never a bare sleep for correctness."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def eventually(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` (sync or async) is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)
