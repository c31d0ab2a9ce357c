"""What several primitives and clients share, written once: ``async with`` and a lock's
status queries."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

H = TypeVar("H", bound="AsyncHeld")
C = TypeVar("C", bound="AsyncClosing")


class AsyncHeld:
    """``async with x:`` takes ``x`` (``acquire()``: waiting as long as it takes) and gives it
    back on the way out."""

    async def acquire(self) -> Any:
        raise NotImplementedError

    async def release(self) -> Any:
        raise NotImplementedError

    async def _release_on_exit(self) -> None:
        await self.release()

    async def __aenter__(self: H) -> H:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._release_on_exit()


class AsyncClosing:
    """``async with client:`` closes the client on the way out."""

    async def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:  # ASYNC
        """The same as ``close()``, in redis-py's spelling (``redis.asyncio.Redis.aclose``
        since 5.0.1, the standard library's for asynchronous resources)."""
        await self.close()

    async def __aenter__(self: C) -> C:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncLockQueries:
    """A lock's questions to the server (for a Redlock lock: what a majority of its masters
    agrees on), each answered from one status read."""

    async def _status(self) -> Any:
        raise NotImplementedError

    def _caller(self) -> str:
        """The owner id of the calling task."""
        raise NotImplementedError

    async def locked(self) -> bool:
        """Whether anyone holds the lock (asks the server)."""
        return bool((await self._status()).locked)

    async def owned(self) -> bool:
        """Whether the calling task holds the lock (asks the server)."""
        return await self.hold_count() > 0

    async def hold_count(self) -> int:
        """How many holds the calling task has on the lock (asks the server)."""
        return int((await self._status()).holders.get(self._caller(), 0))

    async def ttl(self) -> float | None:
        """Seconds left on the lease; ``None`` when the lock is free (asks the server)."""
        ttl: float | None = (await self._status()).ttl
        return ttl
