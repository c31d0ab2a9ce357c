"""The bookkeeping of a client's local lines, shared by both runtimes' engines (``line.py``).

No I/O, no locking and no waking here: the threads' engine calls it under its mutex, the
asyncio one from its loop, and each wakes the entry that ``leave`` names in its own way
(an event, a future).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

E = TypeVar("E")


class LineTable(Generic[E]):
    """One line of entries per key, in arrival order, made when a first entry comes and
    dropped when the last leaves: no growth with the keys (lock names) ever used."""

    def __init__(self) -> None:
        self._lines: dict[Hashable, OrderedDict[E, None]] = {}

    def join(self, key: Hashable, entry: E) -> bool:
        """Put ``entry`` at the end of line ``key``; true when it is the head (the line was
        empty: it need not wait)."""
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = OrderedDict()
        line[entry] = None
        return len(line) == 1

    def leave(self, key: Hashable, entry: E) -> E | None:
        """Take ``entry`` out of line ``key``: the entry that becomes head if ``entry`` was
        the head, else ``None`` (also for an entry no longer there: the table was cleared
        after a fork)."""
        line = self._lines.get(key)
        if line is None or entry not in line:
            return None
        was_head = next(iter(line)) is entry
        del line[entry]
        if not line:
            del self._lines[key]
            return None
        return next(iter(line)) if was_head else None

    def waiting(self, key: Hashable) -> int:
        """How many entries are in line ``key``, its head included."""
        line = self._lines.get(key)
        return len(line) if line is not None else 0

    def __len__(self) -> int:
        """How many lines are open (none once every entry left)."""
        return len(self._lines)

    def entries(self) -> Iterator[E]:
        """Every entry of every line."""
        for line in self._lines.values():
            yield from line

    def clear(self) -> None:
        """Forget every line (a forked child's are not its parent's)."""
        self._lines = {}
