"""Running a redlease waiter or a Redisson stand-in beside a test body, and knowing when it is
blocked in its wait (so that what wakes it is the change the test makes next, by pub/sub)."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from redlease._asyncio import subscriber as async_subscriber
from redlease._threads import subscriber as sync_subscriber

WOKEN_WITHIN = 10.0
"""A waiter woken by a message gets what it waits for well within this, however loaded the
machine; without the message a redlease waiter under ``long_recheck`` looks again only at the
end of its 30 s wait (else after ``RECHECK``, 5 s), and a Redisson one never does."""


async def eventually(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> None:
    """Wait until ``condition()`` (sync or async) is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.005)


class Beside:
    """``call()`` run beside the test body: an asyncio task when it returns a coroutine,
    else a thread. ``parked()``: it is blocked in the redlease subscriber's wait for a
    wake-up (after listening and trying again)."""

    def __init__(self, call: Callable[[], Any], *, is_async: bool) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._thread: threading.Thread | None = None
        self._result: list[Any] = []
        self._in_wait = 0  # the thread's calls of the sync subscriber's wait now running
        if is_async:
            self._task = asyncio.create_task(call())
        else:
            wait_code = sync_subscriber.wait.__code__

            def watch(frame: Any, event: str, arg: Any) -> None:
                # Run by the thread itself: reading another thread's frames (sys._current_frames
                # and f_back) while it runs crashed CPython 3.11 in CI (a segfault).
                if frame.f_code is wait_code:
                    if event == "call":
                        self._in_wait += 1
                    elif event == "return":
                        self._in_wait -= 1

            def run() -> None:
                sys.setprofile(watch)
                try:
                    self._result.append(call())
                except BaseException as exc:  # reported by result()
                    self._result.append(exc)
                finally:
                    sys.setprofile(None)

            self._thread = threading.Thread(target=run, daemon=True)
            self._thread.start()

    def parked(self) -> bool:
        if self._task is not None:
            coro: Any = self._task.get_coro()
            for _ in range(60):  # the await chain: acquire -> _run -> wait -> ...
                if coro is None:
                    return False
                if getattr(coro, "cr_code", None) is async_subscriber.wait.__code__:
                    return True
                coro = getattr(coro, "cr_await", None)
            return False
        assert self._thread is not None
        return self._in_wait > 0

    def done(self) -> bool:
        if self._task is not None:
            return self._task.done()
        assert self._thread is not None
        return not self._thread.is_alive()

    async def result(self, timeout: float = 30.0) -> Any:
        if self._task is not None:
            return await asyncio.wait_for(self._task, timeout)
        assert self._thread is not None
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert not self._thread.is_alive(), f"call still running after {timeout} s"
        value = self._result[0]
        if isinstance(value, BaseException):
            raise value
        return value


async def woken(beside: Beside, since: float) -> Any:
    """The result of a waiter that must have been woken by a message sent at ``since``."""
    result = await beside.result(timeout=30)
    elapsed = time.monotonic() - since
    assert elapsed < WOKEN_WITHIN, f"took {elapsed:.2f} s: woken by a re-check, not a message"
    return result


def braced(name: str, kind: str) -> str:
    """A name with a hash tag of its own, as a Java service names per-tenant objects."""
    return f"{{{name}}}:{kind}"


class Crowd:
    """Callers of both sides sharing ``permits``: how many are out now and at most, never more
    than ``permits`` (checked at every entry)."""

    def __init__(self, permits: int) -> None:
        self.permits = permits
        self.in_use = self.peak = 0
        self._mutex = threading.Lock()

    def enter(self, k: int) -> None:
        with self._mutex:
            self.in_use += k
            self.peak = max(self.peak, self.in_use)
            assert self.in_use <= self.permits

    def leave(self, k: int) -> None:
        with self._mutex:
            self.in_use -= k

    async def run(
        self,
        side: Any,
        java_work: Callable[[int], int],
        redlease_work: Callable[[int], Any],
    ) -> tuple[list[int], list[int]]:
        """Two Java threads (seeds 1, 2) and two redlease callers (seeds 3, 4: tasks, or this
        thread and one beside it), each bounded: what each returned."""
        javas = [Beside(partial(java_work, s), is_async=False) for s in (1, 2)]
        if side.is_async:
            ours = await asyncio.wait_for(asyncio.gather(*(redlease_work(s) for s in (3, 4))), 90)
        else:  # one caller on this thread, one more beside it
            other = Beside(lambda: asyncio.run(redlease_work(4)), is_async=False)
            ours = [await redlease_work(3), await other.result(timeout=90)]
        return [await j.result(timeout=90) for j in javas], list(ours)
