"""The part of ``Lock`` and ``AsyncLock`` that does no I/O: arguments, owner, local state."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from .._core import arguments
from .._core import lock as core
from .._core.arguments import (
    Seconds,
    chosen_lease,
    optional_seconds,
    replication,
    wait_args,
)
from .._core.fair import REDISSON_FAIR
from .._core.keys import hash_slot
from .._core.requests import Operation
from ..errors import (
    InvalidArgumentError,
    LeaseLostError,
    NotOwnedError,
    RedleaseError,
    ReplicaError,
    ServerUnavailableError,
)
from ..stats import HolderInfo, Lease, LockStatistics
from .state import HANDOFF_WINDOW, ClientState, next_request_id

T = TypeVar("T")


def fair_layout(value: object) -> core.Layout:
    """A fair lock's layout by name: ``"redlease"`` (its own line) or ``"redisson"``
    (Redisson's ``RedissonFairLock`` keys); anything else raises ``InvalidArgumentError``."""
    return REDISSON_FAIR if arguments.layout(value) == "redisson" else core.REDLEASE


def not_acquired(blocking: bool, timeout: Seconds | None) -> str:
    """How a bounded acquire failed, for its ``LockTimeoutError``: within its timeout, or in
    its single try (``blocking=False`` or ``timeout=0``)."""
    if not blocking or timeout == 0:
        return "not acquired in its single try (blocking=False or timeout=0)"
    return f"not acquired within {timeout} s"


@dataclass(frozen=True)
class AcquirePlan:
    owner: str
    lease: float | None
    op: Operation[core.Acquired | None]
    started: float
    gone: list[bool] = field(default_factory=list)
    """Set (non-empty) when a reply showed the owner's hold gone on the server."""


@dataclass(frozen=True)
class ReleasePlan:
    owner: str
    hold: core.Hold
    op: Operation[int]
    again: Callable[[], Operation[int]] | None = None
    """``op`` made anew, with the same request id (``None``: a release that settles an
    earlier one first, not to be made anew): how a cancelled release learns its outcome."""


class LockBase:
    """Shared by both shells; each shell supplies the I/O and the owner of the caller."""

    _fair = False
    """A fair lock never lets a newcomer take a free lock ahead of a live waiter in line."""

    _quiet = False
    """A release publishes nothing and hands nothing over (a spin lock's: no PUBLISH)."""

    def __init__(
        self,
        state: ClientState,
        name: str,
        *,
        lease: Seconds | None,
        on_lease_lost: Callable[[LeaseLostError], None] | None,
        replicas: int | None,
        cluster: bool = False,
        layout: core.Layout = core.REDLEASE,
    ) -> None:
        self._state = state
        self._layout = layout
        try:
            self._keys = layout.keys(arguments.name(name, "lock"), state.pubsub)
        except InvalidArgumentError:
            raise
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        if cluster and hash_slot(self._keys.channel) != hash_slot(name):
            raise InvalidArgumentError(
                f"lock name {name!r}: on a cluster a name's braces must form a hash tag "
                "('{tag}...'), or Redisson's unlock channel for it would hash elsewhere"
            )
        self._lease = optional_seconds(lease, "lease")
        self._on_lease_lost = on_lease_lost
        self._replication = state.replication
        if replicas is not None:
            timeout = state.replication.timeout_ms / 1000 if state.replication else 1.0
            self._replication = replication(replicas, timeout)

    @property
    def name(self) -> str:
        """The lock's name, as given (the server's keys are made from it)."""
        return self._keys.name

    def _plan_acquire(
        self, owner: str, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> AcquirePlan:
        blocking, wait = wait_args(blocking, timeout)
        chosen = chosen_lease(lease, self._lease)

        def acquire(held: int) -> Operation[core.Acquired | None]:
            return core.acquire(
                self._keys,
                owner,
                held=held,
                lease=self._state.watchdog_timeout if chosen is None else chosen,
                blocking=blocking,
                timeout=wait,
                wait_id=next_request_id(),
                token=(self._token(owner) or 0) if held else 0,
                fair=self._fair,
                handover=chosen is None,  # the watchdog lengthens a hand-over's short lease
                # a hand-over that comes after the wait ended goes on to the next in line
                handover_ms=self._state.handover_ms or round(HANDOFF_WINDOW * 1000),
                on_gone=lambda: gone.append(True),
                layout=self._layout,
            )

        gone: list[bool] = []
        op = self._settled_first(owner, acquire)
        return AcquirePlan(owner=owner, lease=chosen, op=op, started=time.monotonic(), gone=gone)

    @property
    def _line(self) -> Hashable | None:
        """The key of the client's local line for this lock (its name and layout: a lock
        and a fair lock of one name share it, as they share the keys), or ``None`` for a
        lock whose waiters go to the server each on their own."""
        return (self.name, self._layout)

    def _line_for(
        self, owner: str, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> tuple[Hashable, float | None] | None:
        """The local line this acquire waits in and how long it may wait there, after the
        arguments are checked; ``None`` when it goes straight to the server: a try
        (``blocking=False``), or an owner that already holds the lock (a re-entry must
        never wait behind its own client's waiters). ``timeout=0`` is a try."""
        blocking, wait = wait_args(blocking, timeout)
        chosen_lease(lease, self._lease)
        line = self._line
        if not blocking or line is None or self._state.count(self.name, owner):
            return None
        return line, wait

    def _plan_head(
        self, owner: str, wait: float | None, lease: Seconds | None, started: float
    ) -> AcquirePlan:
        """The acquire of the head of the local line: with what is left of ``wait`` (a
        single try when nothing is), its wait counted from when it joined the line."""
        left = None if wait is None else wait - (time.monotonic() - started)
        if left is not None and left <= 0:
            plan = self._plan_acquire(owner, False, None, lease)
        else:
            plan = self._plan_acquire(owner, True, left, lease)
        return dataclasses.replace(plan, started=started)

    def _settled_first(self, owner: str, then: Callable[[int], Operation[T]]) -> Operation[T]:
        """Re-send first a release of the owner's whose outcome is unknown (same request id:
        the server recognises one it already ran), so that ``then(held)`` starts from the
        count the server has; an unknown outcome is settled by the next call."""
        with self._state.mutex:
            hold = self._state.holds.get(self.name, owner)
        if hold is not None and hold.release_id is not None:
            plan = ReleasePlan(owner=owner, hold=hold, op=self._release_op(owner, hold))
            try:
                remaining = yield from plan.op
            except LeaseLostError:
                self._state.forget(hold)  # it is gone on the server anyway
            else:
                self._released(plan, remaining)
        return (yield from then(self._state.count(self.name, owner)))

    def _acquire_raised(self, plan: AcquirePlan, exc: BaseException) -> None:
        """The acquire raised: unless the server answered (a ``RedleaseError`` other than
        unavailability), a re-entry may have been counted with its reply lost."""
        if isinstance(exc, ServerUnavailableError) or not isinstance(exc, RedleaseError):
            self._state.maybe_reentered(self.name, plan.owner)

    def _acquired(self, plan: AcquirePlan, result: core.Acquired | None) -> Lease | None:
        """Record a grant (after the server confirmed it) and describe it."""
        if result is None:
            self._state.acquire_failed(self.name, plan.owner, plan.started, gone=bool(plan.gone))
            return None
        hold = self._state.granted(
            self._keys, plan.owner, result, plan.lease, self._on_lease_lost, plan.started
        )
        hold.replication = self._replication
        return Lease(
            name=self.name,
            owner=plan.owner,
            hold_count=result.count,
            lease=plan.lease,
            ttl=result.ttl,
            fencing_token=result.token,
        )

    def _plan_release(self, owner: str, *, retry: bool = True) -> ReleasePlan:
        """Plan the release of one hold. A release whose outcome is unknown (it raised
        ``ServerUnavailableError``) keeps its request id, so that the server recognises it
        if it already ran. A ``release()`` call after it (``retry``) is that release sent
        again; a ``with`` block's exit is not (the failed one was an inner block's): it
        settles that release first, then releases the block's own hold."""
        hold = self._state.begin_release(self.name, owner)
        if hold is None:
            lost = self._state.take_lost(self.name, owner)
            if lost is not None:
                raise lost
            raise NotOwnedError(self._not_owned(owner), name=self.name, owner=owner)
        if hold.release_id is not None and not retry:
            return ReleasePlan(
                owner=owner,
                hold=hold,
                op=self._settled_first(owner, lambda _held: self._plan_release(owner).op),
            )
        if hold.release_id is None:
            hold.release_id = next_request_id()
        return ReleasePlan(
            owner=owner,
            hold=hold,
            op=self._release_op(owner, hold),
            again=lambda: self._release_op(owner, hold),
        )

    def _released(self, plan: ReleasePlan, remaining: int) -> None:
        plan.hold.release_id = None
        plan.hold.unsure = False
        self._state.released(plan.hold, remaining)

    def _release_failed(self, plan: ReleasePlan, exc: BaseException) -> None:
        if isinstance(exc, ReplicaError) and isinstance(exc.reply, list):
            # done on the master, just not confirmed by enough replicas
            self._released(plan, int(exc.reply[1]))
        elif isinstance(exc, LeaseLostError):
            self._state.lost_at_release(plan.hold, exc)  # the server no longer has it
        # else the outcome is unknown (no reply): keep the hold, still marked as being released
        # so the watchdog does not call it lost, with its request id, so a retry is safe

    # --- what a kind of lock changes (the read-write lock's sides override these) ---------

    def _release_op(self, owner: str, hold: core.Hold) -> Operation[int]:
        """Release one of ``hold``'s holds, with its request id (kept until the outcome is
        known) and whether a re-entry may have been counted unseen."""
        assert hold.release_id is not None
        return core.release(
            self._keys,
            owner,
            held=hold.count,
            request_id=hold.release_id,
            token=hold.token,
            # a fair lock always hands over to the first waiter in line
            handover_ms=0
            if self._quiet
            else self._state.handover_ms or (round(HANDOFF_WINDOW * 1000) if self._fair else 0),
            unsure=hold.unsure,
            layout=self._layout,
            quiet=self._quiet,
        )

    def _not_owned(self, owner: str) -> str:
        return f"lock {self.name!r} is not held by owner {owner}: nothing to release"

    def _status_op(self, owner: str) -> Operation[core.Status]:
        return core.status(self._keys, self._layout)

    def _force_release_op(self) -> Operation[bool]:
        return core.force_release(self._keys, self._layout)

    @property
    def _wait_channel(self) -> str:
        return self._keys.channel

    def _not_acquired(self, timeout: Seconds | None, blocking: bool = True) -> str:
        return f"lock {self.name!r} {not_acquired(blocking, timeout)}"

    def _statistics(
        self,
        owner: str,
        status: core.Status,
        local_waiters: int,
        holder_info: dict[str, HolderInfo] | None = None,
    ) -> LockStatistics:
        count = status.holders.get(owner, 0)
        return LockStatistics(
            name=self.name,
            locked=status.locked,
            owned=count > 0,
            hold_count=count,
            ttl=status.ttl,
            holders=dict(status.holders),
            fencing_token=status.token,
            waiters=status.waiters,
            local_waiters=local_waiters,
            holder_info=holder_info or {},
            kept_by=status.kept_by,
        )

    def _token(self, owner: str) -> int | None:
        with self._state.mutex:
            hold = self._state.holds.get(self.name, owner)
            return hold.token if hold else None

    def _hold_channel(self, owner: str) -> str | None:
        """The channel where ``owner``'s client hears that its hold was force-released (its
        own channel of this lock: ``LockKeys.holder``), or ``None`` (no such channel)."""
        return self._keys.holder(owner) if self._keys.holder_prefix else None

    def _lease_lost(self, owner: str) -> bool:
        return self._state.peek_lost(self.name, owner)
