"""The asyncio local line: a client's own waiters for one lock wait here, in arrival order,
and only the head talks to the server (the engine the sync side runs with threads).

Without it every waiting task would take a place in the server's line and re-check on every
wake-up: N waiters, N places and N re-checks per hand-over. With it, the head alone waits on
the server; when its acquire ends (granted, timed out, failed, cancelled) the next task in
line becomes head at once, so a hand-over within one client costs one release and one
acquire script, however long the line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from types import TracebackType

from .._shared import fork
from .._shared.lines import LineTable
from ..errors import ClientClosedError


class _Entry:
    """One waiter: its future (``None`` for a head from the start: it never waited), set to
    ``True`` when it becomes head, ``False`` when its timeout ran out, or to
    ``ClientClosedError``; its timer, if it has a timeout."""

    __slots__ = ("future", "timer")

    def __init__(self) -> None:
        self.future: asyncio.Future[bool] | None = None
        self.timer: asyncio.TimerHandle | None = None


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class AsyncLines:
    """A client's local lines, one per lock (keyed by name and layout), made when a first
    waiter comes and dropped when the last leaves: no growth with the names ever used. Used
    from the client's event loop only; a forked child starts with none."""

    def __init__(self) -> None:
        self._lines: fork.PerProcess[LineTable[_Entry]] = fork.PerProcess(LineTable)
        """The lines (none of the parent's in a forked child: its waiters are not the
        child's)."""
        self._closed = False

    def turn(self, key: Hashable, name: str, timeout: float | None) -> AsyncTurn:
        """``async with lines.turn(key, name, timeout) as head:`` wait in line ``key`` until
        this task is its head (``head`` true) or ``timeout`` ran out (false); leave on exit,
        which makes the next waiter head. Raises ``ClientClosedError`` once the client
        closes."""
        return AsyncTurn(self, key, name, timeout)

    def waiting(self, key: Hashable) -> int:
        """How many tasks are in line ``key``, its head included."""
        return self._lines.get().waiting(key)

    def opened(self) -> int:
        """How many lines are open (none once every waiter left)."""
        return len(self._lines.get())

    def close(self) -> None:
        """Wake every task waiting in a line with ``ClientClosedError`` (a head's own call
        is stopped by the client); no task joins a line any more."""
        self._closed = True
        for entry in self._lines.get().entries():
            if entry.future is not None and not entry.future.done():
                entry.future.set_exception(ClientClosedError())

    def _join(self, key: Hashable, name: str) -> _Entry:
        if self._closed:
            raise ClientClosedError(name=name)
        entry = _Entry()
        if not self._lines.get().join(key, entry):
            entry.future = asyncio.get_running_loop().create_future()
        return entry

    def _leave(self, key: Hashable, entry: _Entry) -> None:
        """Take ``entry`` out of its line; if it was the head, the next waiter becomes head
        (one that already stopped waiting, timed out or cancelled, passes it on as it
        leaves in turn)."""
        if entry.timer is not None:
            entry.timer.cancel()
        head = self._lines.get().leave(key, entry)
        if head is not None and head.future is not None and not head.future.done():
            head.future.set_result(True)


class AsyncTurn:
    """A task's place in one local line, as an async context manager (see ``turn``)."""

    __slots__ = ("_entry", "_key", "_lines", "_name", "_timeout")

    def __init__(self, lines: AsyncLines, key: Hashable, name: str, timeout: float | None) -> None:
        self._lines, self._key, self._name, self._timeout = lines, key, name, timeout
        self._entry: _Entry | None = None

    async def __aenter__(self) -> bool:
        entry = self._entry = self._lines._join(self._key, self._name)
        if entry.future is None:
            return True
        if self._timeout is not None:
            loop = asyncio.get_running_loop()
            entry.timer = loop.call_later(self._timeout, _expire, entry.future)
        try:
            return await entry.future
        except ClientClosedError:
            self._lines._leave(self._key, entry)
            raise ClientClosedError(name=self._name) from None
        except BaseException:  # cancelled: leave, passing the turn on if it was ours
            if entry.future.done() and not entry.future.cancelled():
                entry.future.exception()  # closed meanwhile: no "never retrieved" warning
            self._lines._leave(self._key, entry)
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entry is not None:
            self._lines._leave(self._key, self._entry)
