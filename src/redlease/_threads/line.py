"""The threads' local line: a client's own waiters for one lock wait here, in arrival order,
and only the head talks to the server (the engine the asyncio side runs with futures).

Without it every waiting thread would take a place in the server's line and re-check on
every wake-up: N waiters, N places and N re-checks per hand-over. With it, the head alone
waits on the server; when its acquire ends (granted, timed out, failed) the next thread in
line becomes head at once, so a hand-over within one client costs one release and one
acquire script, however long the line.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from types import TracebackType

from .._shared import fork
from .._shared.lines import LineTable
from ..errors import ClientClosedError


class _Entry:
    """One waiter: woken by its event when it becomes head (``head``) or the client closes
    (``closed``); both are set under the lines' mutex. ``event`` is ``None`` for a head from
    the start: it never waited."""

    __slots__ = ("closed", "event", "head")

    def __init__(self) -> None:
        self.event: threading.Event | None = None
        self.head = False
        self.closed = False


class Lines:
    """A client's local lines, one per lock (keyed by name and layout), made when a first
    waiter comes and dropped when the last leaves: no growth with the names ever used. Safe
    from any thread; a forked child starts with none."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._lines: LineTable[_Entry] = LineTable()
        self._closed = False
        fork.in_child(self._fresh_after_fork)

    def _fresh_after_fork(self) -> None:
        """A fresh mutex (a parent's thread may have held it) and no lines: the parent's
        waiters are not the child's."""
        self._mutex = threading.Lock()
        self._lines.clear()

    def turn(self, key: Hashable, name: str, timeout: float | None) -> Turn:
        """``with lines.turn(key, name, timeout) as head:`` wait in line ``key`` until this
        thread is its head (``head`` true) or ``timeout`` ran out (false); leave on exit,
        which makes the next waiter head. Raises ``ClientClosedError`` once the client
        closes."""
        return Turn(self, key, name, timeout)

    def waiting(self, key: Hashable) -> int:
        """How many threads are in line ``key``, its head included."""
        with self._mutex:
            return self._lines.waiting(key)

    def opened(self) -> int:
        """How many lines are open (none once every waiter left)."""
        with self._mutex:
            return len(self._lines)

    def close(self) -> None:
        """Wake every thread waiting in a line with ``ClientClosedError`` (a head's own call
        is stopped by the client); no thread joins a line any more."""
        with self._mutex:
            self._closed = True
            for entry in self._lines.entries():
                if entry.event is not None and not entry.head:
                    entry.closed = True
                    entry.event.set()

    def _join(self, key: Hashable, name: str) -> _Entry:
        with self._mutex:
            if self._closed:
                raise ClientClosedError(name=name)
            entry = _Entry()
            if self._lines.join(key, entry):
                entry.head = True
            else:
                entry.event = threading.Event()
            return entry

    def _leave(self, key: Hashable, entry: _Entry) -> None:
        """Take ``entry`` out of its line; if it was the head, the next waiter becomes head
        (one whose wait just timed out finds that it is head after all, and tries once)."""
        with self._mutex:
            first = self._lines.leave(key, entry)
            if first is not None and not first.closed:
                first.head = True
                assert first.event is not None  # only the first to come never waits
                first.event.set()

    def _outcome(self, entry: _Entry) -> tuple[bool, bool]:
        """After a wait: (head, closed), read under the mutex."""
        with self._mutex:
            return entry.head, entry.closed


class Turn:
    """A thread's place in one local line, as a context manager (see ``turn``)."""

    __slots__ = ("_entry", "_key", "_lines", "_name", "_timeout")

    def __init__(self, lines: Lines, key: Hashable, name: str, timeout: float | None) -> None:
        self._lines, self._key, self._name, self._timeout = lines, key, name, timeout
        self._entry: _Entry | None = None

    def __enter__(self) -> bool:
        entry = self._entry = self._lines._join(self._key, self._name)
        if entry.event is None:
            return True
        try:
            # threading's waits refuse a timeout above TIMEOUT_MAX (some 292 years)
            timeout = self._timeout
            entry.event.wait(None if timeout is None else min(timeout, threading.TIMEOUT_MAX))
            head, closed = self._lines._outcome(entry)
        except BaseException:  # KeyboardInterrupt: leave, passing the turn on if it was ours
            self._lines._leave(self._key, entry)
            raise
        if closed:
            self._lines._leave(self._key, entry)
            raise ClientClosedError(name=self._name)
        return head  # not head: the timeout ran out (``__exit__`` leaves the line)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entry is not None:
            self._lines._leave(self._key, self._entry)
