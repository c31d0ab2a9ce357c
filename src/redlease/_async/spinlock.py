"""The spin lock: the reentrant lock whose waiters back off instead of listening."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._core import arguments
from .._core.arguments import Seconds
from .._core.backoff import ExponentialBackoff
from .._shared.spinlockbase import SpinLockBase
from ..errors import LeaseLostError
from .lock import AsyncLock

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncSpinLock(SpinLockBase, AsyncLock):
    """A reentrant lease lock, owned per asyncio task, that never uses pub/sub (Redisson's
    ``RSpinLock``): for servers and proxies without SUBSCRIBE.

    It is the lock (``AsyncLock``): the same key and scripts (a spin lock, a lock and a
    Redisson RLock of one name exclude each other), the same ``acquire`` / ``release`` /
    ``hold()`` / ``async with``, reentrancy, fencing tokens, watchdog renewal, events and
    metrics. Only a waiter differs: it takes no place in line and hears no release; it tries,
    sleeps the next pause of its ``backoff`` (``ExponentialBackoff``) while the lock is held,
    and tries again, so a release is noticed at the waiter's next try, not at once, and
    waiters are not served in arrival order. ``timeout=0`` is a single try. Its release
    publishes nothing (Redisson's ``RSpinLock`` neither): no ``PUBLISH`` permission needed.
    """

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        backoff: ExponentialBackoff | None = None,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> None:
        super().__init__(client, name, lease=lease, on_lease_lost=on_lease_lost, replicas=replicas)
        self._backoff = arguments.backoff(backoff)

    def __repr__(self) -> str:
        return f"<redlease.AsyncSpinLock {self.name!r} on {self.client.address}>"
