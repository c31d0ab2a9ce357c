"""``release(keep_for=...)`` of ``Lock``, ``RedlockLock`` and their asyncio twins, the part that
does no I/O: the argument, and the plan of a final release that keeps the lock taken (see
``_core.keep``)."""

from __future__ import annotations

import math

from .._core import keep as core
from .._core import lock as lockcore
from .._core.arguments import Seconds, non_negative_seconds
from .._core.requests import Operation
from ..errors import InvalidArgumentError, NotOwnedError
from .lockbase import LockBase, ReleasePlan
from .state import ClientState, next_request_id


def keep_ms(keep_for: Seconds | None) -> int:
    """``keep_for`` in milliseconds (at least 1), or 0 for a plain release (``None`` or 0)."""
    if keep_for is None:
        return 0
    keep = non_negative_seconds(keep_for, "keep_for")
    return max(1, math.ceil(keep * 1000)) if keep else 0


def check_last_hold(state: ClientState, name: str, owner: str) -> None:
    """Refuse to keep a lock that ``owner`` holds more than once: only its last release can
    keep it taken (checked before anything is sent)."""
    with state.mutex:
        hold = state.holds.get(name, owner)
        if hold is not None and hold.count > 1:
            raise InvalidArgumentError(
                f"keep_for: owner {owner} holds lock {name!r} {hold.count} times; only "
                "its last release can keep the lock taken"
            )


def plan_keep(lock: LockBase, owner: str, keep_for: Seconds) -> ReleasePlan | None:
    """The plan of ``owner``'s final release of ``lock`` that keeps it taken ``keep_for``
    seconds; ``None`` when ``keep_for`` is 0 (a plain release). Checked before anything is
    sent: only the last hold of a lock or fair lock in the redlease layout can be kept."""
    keep = keep_ms(keep_for)
    if keep == 0:
        return None
    if lock._layout is not lockcore.REDLEASE or type(lock)._release_op is not (
        LockBase._release_op
    ):
        raise InvalidArgumentError(
            f"keep_for: lock {lock.name!r} cannot be kept (only a lock or a fair lock in the "
            "redlease layout can)"
        )
    state = lock._state
    check_last_hold(state, lock.name, owner)
    hold = state.begin_release(lock.name, owner)
    if hold is None:
        lost = state.take_lost(lock.name, owner)
        if lost is not None:
            raise lost
        raise NotOwnedError(lock._not_owned(owner), name=lock.name, owner=owner)
    if hold.release_id is None:
        hold.release_id = next_request_id()
    request_id = hold.release_id

    def op() -> Operation[int]:
        return core.release_keep(
            hold.keys,
            owner,
            request_id=request_id,
            token=hold.token,
            keep_ms=keep,
            unsure=hold.unsure,
        )

    return ReleasePlan(owner=owner, hold=hold, op=op(), again=op)
