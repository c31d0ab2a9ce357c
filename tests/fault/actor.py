"""An owner that runs the calls it is given, in order: a thread (sync side) or an asyncio task
(asyncio side). A lock's owner is the calling thread or task, so a test that needs one owner
to act several times, while others act in between, sends each call to that owner's actor."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import queue
import threading
from collections.abc import Callable
from typing import Any

STOP = object()


class Actor:
    def __init__(self, side: Any) -> None:
        self._async = side.is_async
        if self._async:
            self._calls: Any = asyncio.Queue()
            self._task = asyncio.ensure_future(self._serve_async())
        else:
            self._calls = queue.Queue()
            self._thread = threading.Thread(target=self._serve_sync, daemon=True)
            self._thread.start()

    def start(self, call: Callable[[], Any]) -> asyncio.Future[Any]:
        """Have the owner run ``call()`` (awaited if it returns an awaitable); a future of its
        result, to await later."""
        if self._async:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._calls.put_nowait((call, future))
            return future
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((call, done))
        return asyncio.wrap_future(done)

    async def do(self, call: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Run ``call()`` as the owner and return its result (or raise its error)."""
        return await asyncio.wait_for(self.start(call), timeout)

    async def close(self) -> None:
        if self._async:
            self._calls.put_nowait((STOP, None))
            await asyncio.wait_for(self._task, 30)
        else:
            self._calls.put((STOP, None))
            await asyncio.to_thread(self._thread.join, 30)

    def _serve_sync(self) -> None:
        while True:
            call, done = self._calls.get()
            if call is STOP:
                return
            try:
                done.set_result(call())
            except BaseException as exc:
                done.set_exception(exc)

    async def _serve_async(self) -> None:
        while True:
            call, done = await self._calls.get()
            if call is STOP:
                return
            try:
                result = call()
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(result)
