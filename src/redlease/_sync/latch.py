"""The thread-based count-down latch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core import latch as core
from .._core.latch import LatchStatistics
from .._core.semaphore import primitive_name, wait_timeout
from ..options import Seconds

if TYPE_CHECKING:
    from .client import Client


class CountDownLatch:
    """A count-down latch shared by every client of the server (Redisson's RCountDownLatch).

    ``try_set_count(n)`` arms it, each ``count_down()`` takes one off, and ``wait()`` returns
    once the count is zero: all waiters are woken by pub/sub, and each re-checks the count at
    least every few seconds whatever happens to the messages. Every wait takes a timeout.
    """

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self._keys = core.keys_for(
            primitive_name(name, "latch"), cluster=client.cluster, pubsub=client._state.pubsub
        )

    @property
    def name(self) -> str:
        return self._keys.name

    def try_set_count(self, count: int) -> bool:
        """Set the count if the latch is not armed (count 0); ``False`` when it is."""
        value = core.count_arg(count)
        return self.client._run(core.try_set_count(self._keys, value), self.name)

    def count_down(self) -> None:
        """Take one off the count; at zero, wake every waiter. Does nothing on an open latch."""
        self.client._run(core.count_down(self._keys), self.name)

    def count(self) -> int:
        """The count now (0: open)."""
        return self.client._run(core.status(self._keys), self.name)[0]

    def delete(self) -> bool:
        """Delete the latch (Redisson's ``delete``): it is open, and every waiter of every
        client is woken; ``False`` when it was open already."""
        return self.client._run(core.delete(self._keys), self.name)

    def wait(self, timeout: Seconds | None = None) -> bool:
        """Wait until the count is zero; ``False`` when ``timeout`` ran out first (``None``:
        as long as it takes; ``0``: check once)."""
        op = core.wait(self._keys, self.client._owner(), timeout=wait_timeout(timeout))
        return self.client._run(op, self.name)

    def statistics(self) -> LatchStatistics:
        state = self.client._run(core.status(self._keys), self.name)
        sub = self.client._subscriber
        local = sub.waiting(self._keys.channel) if sub is not None else 0
        return core.statistics(state, self.name, local)

    def __repr__(self) -> str:
        return f"<redlease.CountDownLatch {self.name!r} on {self.client.address}>"
