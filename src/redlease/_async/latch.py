"""The count-down latch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._asyncio.cancel import finish_despite_cancel
from .._core import arguments
from .._core import latch as core
from .._core.arguments import Seconds
from ..stats import LatchStatistics

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncCountDownLatch:
    """A count-down latch shared by every client of the server (Redisson's RCountDownLatch).

    ``try_set_count(n)`` arms it, each ``count_down()`` takes one off, and ``wait()`` returns
    once the count is zero: all waiters are woken by pub/sub, and each re-checks the count at
    least every few seconds whatever happens to the messages. Every wait takes a timeout.
    A cancelled ``wait`` leaves nothing behind; a cancelled ``count_down`` still completes
    (bounded) before the cancellation propagates.
    """

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        """The client that made it."""
        self._keys = core.keys_for(
            arguments.name(name, "latch"), cluster=client.cluster, pubsub=client._state.pubsub
        )

    @property
    def name(self) -> str:
        """The latch's name, as given."""
        return self._keys.name

    async def try_set_count(self, count: int) -> bool:
        """Set the count if the latch is not armed (count 0); ``False`` when it is.

        Args:
            count: The number of ``count_down()`` calls that open the latch (at least 1).

        Raises:
            InvalidArgumentError: a count below 1 or above 2**53 - 1."""
        value = core.count_arg(count)
        return await self.client._run(core.try_set_count(self._keys, value), self.name)

    async def count_down(self) -> None:
        """Take one off the count; at zero, wake every waiter. Does nothing on an open latch."""
        await finish_despite_cancel(
            self.client._run(core.count_down(self._keys), self.name), lambda _left: None
        )

    async def count(self) -> int:
        """The count now (0: open)."""
        return (await self.client._run(core.status(self._keys), self.name))[0]

    async def delete(self) -> bool:
        """Delete the latch (Redisson's ``delete``): it is open, and every waiter of every
        client is woken; ``False`` when it was open already. A cancelled call still completes
        (bounded) before the cancellation propagates."""
        return await finish_despite_cancel(
            self.client._run(core.delete(self._keys), self.name), lambda _deleted: None
        )

    async def wait(self, timeout: Seconds | None = None) -> bool:
        """Wait until the count is zero; ``False`` when ``timeout`` ran out first (``None``:
        as long as it takes; ``0``: check once).

        Args:
            timeout: Seconds to wait at most; ``None``: as long as it takes; ``0``: one check.

        Returns:
            ``True`` when the count is zero (the latch is open).

        Raises:
            InvalidArgumentError: a bad ``timeout``.
            ServerUnavailableError: the server could not be reached.
            ClientClosedError: the client is closed, or was closed while waiting."""
        op = core.wait(self._keys, self.client._owner(), timeout=arguments.wait(timeout))
        return await self.client._run(op, self.name)

    async def statistics(self) -> LatchStatistics:
        """The latch as the server has it (its count) and this client's waiters, in one
        round trip."""
        state = await self.client._run(core.status(self._keys), self.name)
        sub = self.client._subscriber
        local = sub.waiting(self._keys.channel) if sub is not None else 0
        return core.statistics(state, self.name, local)

    def __repr__(self) -> str:
        return f"<redlease.AsyncCountDownLatch {self.name!r} on {self.client.address}>"
