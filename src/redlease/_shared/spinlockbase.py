"""The part of ``SpinLock`` and ``AsyncSpinLock`` that does no I/O: the lock's, with a waiter
that backs off instead of listening (``_core/spin.py``)."""

from __future__ import annotations

import time
from collections.abc import Hashable

from .._core import spin
from .._core.arguments import Seconds, chosen_lease, wait_args
from .._core.backoff import ExponentialBackoff
from .._core.lock import Acquired
from .._core.requests import Operation
from .lockbase import AcquirePlan, LockBase
from .state import next_request_id


class SpinLockBase(LockBase):
    """A lock whose acquire waits by sleeping ``_backoff``'s pauses between single tries: no
    subscription, no place in the lock's line, no local line (each waiter tries on its own,
    as Redisson's spin lock does), and no channel where a force release is told (the
    watchdog finds that at its next renewal)."""

    _backoff: ExponentialBackoff
    _quiet = True  # its release publishes nothing, as Redisson's RSpinLock's (no PUBLISH)

    @property
    def backoff(self) -> ExponentialBackoff:
        """How its waiters pace their tries."""
        return self._backoff

    def _plan_acquire(
        self, owner: str, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> AcquirePlan:
        blocking, wait = wait_args(blocking, timeout)
        chosen = chosen_lease(lease, self._lease)

        def acquire(held: int) -> Operation[Acquired | None]:
            return spin.acquire(
                self._keys,
                owner,
                held=held,
                lease=self._state.watchdog_timeout if chosen is None else chosen,
                blocking=blocking,
                timeout=wait,
                wait_id=next_request_id(),
                backoff=self._backoff,
                token=(self._token(owner) or 0) if held else 0,
                on_gone=lambda: gone.append(True),
                layout=self._layout,
            )

        gone: list[bool] = []
        op = self._settled_first(owner, acquire)
        return AcquirePlan(owner=owner, lease=chosen, op=op, started=time.monotonic(), gone=gone)

    @property
    def _line(self) -> Hashable | None:
        return None

    def _hold_channel(self, owner: str) -> str | None:
        return None
