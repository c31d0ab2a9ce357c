"""The group lock: many values of one group locked all-or-nothing (Redisson's
``RFasterMultiLock``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .._core.arguments import Seconds
from .._core.group import GroupKeys, GroupLayout, value_fields
from .._shared.lockbase import LockBase
from ..errors import LeaseLostError
from .lock import AsyncLock

if TYPE_CHECKING:
    from .client import AsyncClient


class AsyncGroupLock(AsyncLock):
    """Many values of one group (strings: order ids, seats, file paths) locked together,
    owned per asyncio task, in one hash with one script call per acquire or release and one
    watchdog entry per hold: Redisson's ``RFasterMultiLock`` layout, so a Java service
    locking the same strings in the same group and redlease exclude each other.

    ``acquire`` takes every value or none: while another owner holds one of them, nothing is
    taken and the waiter waits (woken by a release in the group, as Redisson's are). Two group
    locks of one group exclude each other only on the values they share. The lock's API:
    ``acquire(blocking, timeout, *, lease)``, ``timeout=0`` for a single try, ``hold()``,
    ``async with``, ``release()``, reentrancy, fencing tokens, watchdog renewal, events and
    metrics. ``name`` labels its holds (``"<group> [<set id>]"``).
    """

    def __init__(
        self,
        client: AsyncClient,
        group: str,
        values: Iterable[str],
        *,
        lease: Seconds | None = None,
        on_lease_lost: Callable[[LeaseLostError], None] | None = None,
        replicas: int | None = None,
    ) -> None:
        LockBase.__init__(
            self,
            client._state,
            group,
            lease=lease,
            on_lease_lost=on_lease_lost,
            replicas=replicas,
            cluster=client.cluster,
            layout=GroupLayout(value_fields(values)),
        )
        self.client = client
        """The client that made it."""

    @property
    def group(self) -> str:
        """The group's name (the key of its hash)."""
        keys = self._keys
        assert isinstance(keys, GroupKeys)
        return keys.group

    def __repr__(self) -> str:
        return f"<redlease.AsyncGroupLock {self.name!r} on {self.client.address}>"
