"""The asyncio Redlock client: one lock on N independent masters, held on a majority (its
fan-out is in ``fanout``, its lock in ``redlock_lock``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio
import redis.exceptions

from .._asyncio import compat
from .._asyncio.fanout import (
    AsyncRedlockDriver,
    Master,
)
from .._core import redlock as core
from .._core.arguments import Seconds, seconds
from .._core.watchdog import RenewalPolicy
from .._redis.urls import checked_url
from .._shared.clientbase import default_timeouts
from .._shared.redlockbase import check_masters
from .._shared.state import ClientState
from ..errors import (
    InvalidArgumentError,
    LeaseLostError,
)
from .client import AsyncClient
from .redlock_lock import AsyncRedlockLock
from .shared import AsyncClosing


class AsyncRedlockClient(AsyncRedlockDriver, AsyncClosing):
    """Redlock over independent masters (one ``redis.asyncio.Redis`` each): a lock is held when
    a majority (``N // 2 + 1``) granted it with validity left. Use it from one event loop.

    ``watchdog_timeout`` is the lease of a hold taken without an explicit lease; one watchdog
    renews all such holds on every master and counts a majority. ``master_timeout`` is how long
    any operation waits for one master: keep it far below your leases.

    Operational rule (from the Redis page): a master that crashed without persistence must stay
    down for longer than the longest lease before it rejoins; otherwise it comes back empty
    while others still rely on its vote.
    """

    def __init__(
        self,
        clients: Sequence[redis.asyncio.Redis],
        *,
        watchdog_timeout: Seconds = 30.0,
        master_timeout: Seconds = core.MASTER_TIMEOUT,
    ) -> None:
        clients = list(clients)
        for given in clients:
            if not isinstance(given, redis.asyncio.Redis):
                raise compat.not_a_master(given)
        timeout = seconds(watchdog_timeout, "watchdog_timeout")
        self.master_timeout = seconds(master_timeout, "master_timeout")
        """Seconds each master is given to answer one call."""
        self._masters = [
            Master(AsyncClient(c, watchdog_timeout=timeout, handoff_window=0)) for c in clients
        ]
        self.addresses = check_masters([m.address for m in self._masters])
        """The masters' addresses, in the order given."""
        self._state = ClientState(timeout, 0.0, None)
        self._policy = RenewalPolicy(timeout)
        self._start_driver()
        self._closed = False

    @classmethod
    def from_urls(
        cls,
        urls: Sequence[str],
        *,
        watchdog_timeout: Seconds = 30.0,
        master_timeout: Seconds = core.MASTER_TIMEOUT,
        **redis_kwargs: Any,
    ) -> AsyncRedlockClient:
        """A client over ``redis.asyncio.Redis.from_url(url, **redis_kwargs)`` for each URL,
        closed with it.

        Args:
            urls: One URL per independent master (3 or 5, usually; not replicas of one
                another).
            watchdog_timeout: Seconds a hold taken without a ``lease`` lasts unless renewed
                (on every master).
            master_timeout: Seconds each master is given to answer one call; keep it far
                below the lease.
            **redis_kwargs: Keywords of redis-py's ``from_url``, for every master.

        Raises:
            InvalidArgumentError: no URL, a URL given twice, or a bad option."""
        if isinstance(urls, str):
            raise InvalidArgumentError("from_urls needs a list of URLs, one per master")
        for url in urls:
            checked_url(url)
        default_timeouts(redis_kwargs, 0, 0)
        clients = [redis.asyncio.Redis.from_url(url, **redis_kwargs) for url in urls]
        try:
            client = cls(clients, watchdog_timeout=watchdog_timeout, master_timeout=master_timeout)
        except BaseException:
            compat.close_unused(clients)
            raise
        for master in client._masters:
            master.client._owns_redis = True
        return client

    @property
    def id(self) -> str:
        """This client's id: the first half of every owner field it writes."""
        self._check_fork()
        return self._state.id

    def lock(
        self,
        name: str,
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    ) -> AsyncRedlockLock:
        """A reentrant lock named ``name``, held on a majority of the masters.

        Args:
            name: The lock's name, the same on every master.
            lease: The default lease of its acquires; ``None``: renewed by the watchdog.
            on_lease_lost: Called with a ``LeaseLostError`` when a hold is found lost."""
        return AsyncRedlockLock(self, name, lease=lease, on_lease_lost=on_lease_lost)

    async def close(self) -> None:
        """Stop the watchdog, the subscribers and the connections (and the redis clients that
        ``from_urls`` made). Holds still held are not released: they expire with their lease."""
        if self._closed:
            return
        self._closed = True
        await self._stop_driver()

    def __repr__(self) -> str:
        return f"<redlease.AsyncRedlockClient {self.address} id={self._state.id}>"
