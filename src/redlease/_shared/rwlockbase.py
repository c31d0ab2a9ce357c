"""The part of the read-write lock's sides that does no I/O, shared by both shells."""

from __future__ import annotations

import time
from collections.abc import Hashable

from .._core import rwlock as core
from .._core.arguments import LayoutName, Seconds, chosen_lease, wait_args
from .._core.lock import Acquired, Hold, Status
from .._core.requests import Operation
from .._core.rwlock_redisson import RedissonRwKeys
from ..errors import InvalidArgumentError
from .lockbase import AcquirePlan, LockBase, not_acquired
from .state import next_request_id


class RwSideBase(LockBase):
    """One side (read or write) of a read-write lock: a ``LockBase`` whose holds are kept in
    the client's hold table under the side's label (``"<name> (read)"``), renewed by the
    client's watchdog with ``rw_renew``, and taken and released with the ``rw_*`` scripts."""

    _side: str = core.READ

    def _init_side(self, layout: LayoutName) -> None:
        """After ``LockBase.__init__`` validated the name, lease and replicas: this side's
        keys (the hold table label ``"<name> (read)"``) instead of the plain lock's, in
        redlease's layout or Redisson's (``layout`` as checked by ``options.layout``)."""
        keys = RedissonRwKeys if layout == "redisson" else core.RwKeys
        try:
            self._rw: core.RwLayout = keys.for_name(self._keys.name, self._state.pubsub)
        except ValueError as exc:  # braces that Redisson's key names would move to another slot
            raise InvalidArgumentError(str(exc)) from None
        self._keys = self._rw.side_keys(self._side)

    @property
    def _line(self) -> Hashable | None:
        """No local line: each waiter of a side goes to the server (readers share a hold,
        and a writer's place in line holds new readers back)."""
        return None

    @property
    def rw_name(self) -> str:
        """The name of the read-write lock this side belongs to."""
        return self._rw.name

    def _plan_acquire(
        self, owner: str, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> AcquirePlan:
        blocking, wait = wait_args(blocking, timeout)
        chosen = chosen_lease(lease, self._lease)

        def acquire(held: int) -> Operation[Acquired | None]:
            return core.acquire(
                self._rw,
                self._side,
                owner,
                held=held,
                lease=self._state.watchdog_timeout if chosen is None else chosen,
                blocking=blocking,
                timeout=wait,
                wait_id=next_request_id(),
                # a re-entry joins only the hold with this token (never a stale copy)
                token=(self._token(owner) or 0) if held else 0,
                on_gone=lambda: gone.append(True),
            )

        gone: list[bool] = []
        op = self._settled_first(owner, acquire)
        return AcquirePlan(owner=owner, lease=chosen, op=op, started=time.monotonic(), gone=gone)

    def _release_op(self, owner: str, hold: Hold) -> Operation[int]:
        assert hold.release_id is not None
        return core.release(
            self._rw,
            self._side,
            owner,
            held=hold.count,
            request_id=hold.release_id,
            token=hold.token,
            unsure=hold.unsure,
        )

    def _not_owned(self, owner: str) -> str:
        return (
            f"read-write lock {self._rw.name!r}: owner {owner} holds no {self._side} "
            "lock: nothing to release"
        )

    def _status_op(self, owner: str) -> Operation[Status]:
        status = yield from core.status(self._rw, owner)
        return status.side(self._side)

    def _force_release_op(self) -> Operation[bool]:
        return core.force_release(self._rw, self._side)

    @property
    def _wait_channel(self) -> str:
        return self._rw.channel

    def _not_acquired(self, timeout: Seconds | None, blocking: bool = True) -> str:
        return f"{self._side} lock of {self.rw_name!r} {not_acquired(blocking, timeout)}"
