"""The part of ``RedlockLock`` and ``AsyncRedlockLock`` (and their clients) that does no I/O:
arguments, masters, local record of holds, lease-loss bookkeeping."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .._core import arguments
from .._core import redlock as core
from .._core.arguments import Seconds, chosen_lease, optional_seconds, wait_args
from .._core.keys import LockKeys
from .._core.lock import Acquired, Hold
from .._core.log import log
from .._core.watchdog import RenewalPolicy
from .._redis.errors import unavailable
from ..errors import (
    InvalidArgumentError,
    LeaseLostError,
    NotOwnedError,
    QuorumError,
    ServerUnavailableError,
)
from .clientbase import StateViews
from .keep import check_last_hold, keep_ms
from .state import ClientState, lost_error, next_request_id

S = TypeVar("S")


class MasterClient(Protocol, Generic[S]):
    """What a Redlock fan-out (``_asyncio/fanout.py``, ``_threads/fanout.py``) uses of a
    master's client (the shell's ``AsyncClient`` or ``Client``, made by the Redlock client),
    ``S`` its engine's ``Subscriber``: an engine does not import its shell."""

    address: str
    redis: Any
    _subscriber: S | None
    _owns_redis: bool

    def close(self) -> Any: ...

    def _owner(self) -> str: ...

    def _subscriber_started(self) -> S: ...


Late = dict[int, tuple[Any, int]]
"""An operation's masters that did not answer in time: the connection each call went on and
how many replies are still to come on it. The operation's next call to such a master (the
give-back of a late acquire) is sent on that connection, so the master runs it after the late
call: sent on another connection it could arrive first, find nothing to give back, and the late
acquire would then leave a hold there for a whole lease. Dropped when the operation ends (what
was sent is still delivered, in order).

What this relies on: a master runs one connection's commands in the order they were written
(TCP delivers them in order; Redis runs a client's commands one after another), and a fan-out
never loses track of a call it wrote: the call is in its round's table from before the write
until its reply is read, or the round gives up on it and puts its connection here (a read that
times out or is cancelled leaves the connection open and in step). The one way around it is a
late call's connection that broke: the next call then goes on a new connection (the late call,
if it reached the master's side before the break was seen, is normally run long before a new
connection's set-up completes, but nothing orders the two)."""


def check_masters(addresses: Sequence[str]) -> tuple[str, ...]:
    """Refuse an empty list and a master given twice (two votes from one server would make a
    false majority)."""
    if not addresses:
        raise InvalidArgumentError("a Redlock needs at least one master (three or five are usual)")
    seen: set[str] = set()
    for address in addresses:
        if address in seen:
            raise InvalidArgumentError(f"master {address} is given twice")
        seen.add(address)
    return tuple(addresses)


def apply_renewals(
    state: ClientState, policy: RenewalPolicy, renewals: list[core.Renewal], now: float
) -> None:
    """Record a renewal round: renewed holds count from when it was sent; a hold that no
    majority has, or that was not renewed on a majority for a whole lease, is lost."""
    for renewal in renewals:
        hold = renewal.hold
        if renewal.renewed:
            hold.renewed_at = renewal.sent_at
        elif hold.releasing:
            continue
        elif renewal.renewed is False:
            error = lost_error(hold, "no majority of masters has it any more")
            error.cause = state.loss_cause(hold)
            state.lease_lost(hold, error)
        elif policy.expired(hold.renewed_at, now):
            state.lease_lost(
                hold, lost_error(hold, "not renewed on a majority for a whole lease", "expired")
            )


def renewal_failed(
    state: ClientState, policy: RenewalPolicy, holds: list[Hold], exc: Exception, now: float
) -> None:
    """A renewal round broke off (an unexpected error): holds past a whole lease are lost."""
    log.warning("Redlock lease renewal failed: %s", exc)
    for hold in holds:
        if not hold.releasing and policy.expired(hold.renewed_at, now):
            state.lease_lost(
                hold, lost_error(hold, "not renewed on a majority for a whole lease", "expired")
            )


class RedlockClientBase(StateViews):
    """What both Redlock clients share that does no I/O: their masters, state and queries."""

    addresses: tuple[str, ...]
    master_timeout: float
    _masters: Sequence[Any]  # each shell's masters, each with an ``address``
    _state: ClientState

    @property
    def address(self) -> str:
        """The masters' addresses, comma-separated."""
        return ",".join(self.addresses)

    @property
    def quorum(self) -> int:
        """How many masters make a majority."""
        return core.quorum(len(self._masters))

    def _late(
        self, i: int, name: str | None, what: str, *, sent: bool = True
    ) -> ServerUnavailableError:
        """Master ``i`` did not answer in time; ``sent``: the call went out (it may run)."""
        ms = round(self.master_timeout * 1000)
        address = self._masters[i].address
        about = f" for lock {name!r}" if name else ""
        kind = core.NotAnswered if sent else ServerUnavailableError
        return kind(
            f"redis server {address} {what} within {ms} ms{about}", address=address, name=name
        )

    def _broken(self, i: int, name: str | None, exc: BaseException) -> ServerUnavailableError:
        """The connection to master ``i`` broke after its call was written (it may have run)."""
        error = unavailable(exc, self._masters[i].address, name)
        return core.NotAnswered(str(error), address=error.address, name=name)


@dataclass(frozen=True)
class AcquirePlan:
    owner: str
    lease: float | None
    op: core.RedlockOperation[Acquired | None]
    started: float


@dataclass(frozen=True)
class ReleasePlan:
    owner: str
    hold: Hold
    op: core.RedlockOperation[core.Released]


class RedlockLockBase:
    """Shared by both shells; each shell supplies the I/O and the owner of the caller."""

    def __init__(
        self,
        state: ClientState,
        masters: tuple[str, ...],
        master_timeout: float,
        name: str,
        *,
        lease: Seconds | None,
        on_lease_lost: Callable[[LeaseLostError], None] | None,
    ) -> None:
        self._state = state
        self._masters = masters
        self._master_timeout = master_timeout
        self._keys = LockKeys.for_name(arguments.name(name, "lock"))
        self._lease = optional_seconds(lease, "lease")
        self._on_lease_lost = on_lease_lost

    @property
    def name(self) -> str:
        """The lock's name, as given (the same on every master)."""
        return self._keys.name

    def _plan_acquire(
        self, owner: str, blocking: bool, timeout: Seconds | None, lease: Seconds | None
    ) -> AcquirePlan:
        blocking, wait = wait_args(blocking, timeout)
        chosen = chosen_lease(lease, self._lease)
        op = core.acquire(
            self._keys,
            owner,
            self._masters,
            held=self._state.count(self.name, owner),
            lease=self._state.watchdog_timeout if chosen is None else chosen,
            blocking=blocking,
            timeout=wait,
            master_timeout=self._master_timeout,
            wait_id=next_request_id(),  # this call's, reused by its every attempt
            on_unsure=self._give_back_unsure,
        )
        return AcquirePlan(owner=owner, lease=chosen, op=op, started=time.monotonic())

    def _give_back_unsure(self, masters: list[str]) -> None:
        log.warning(
            "lock %r: giving back an attempt that was not acquired was not confirmed by %s; "
            "what it made there may stay taken until its lease runs out",
            self.name,
            ", ".join(masters),
        )

    def _acquired(self, plan: AcquirePlan, result: Acquired | None) -> bool:
        """Record a grant (after a majority confirmed it in time)."""
        if result is None:
            return False
        self._state.granted(
            self._keys, plan.owner, result, plan.lease, self._on_lease_lost, plan.started
        )
        return True

    def _plan_release(self, owner: str, keep_for: Seconds | None = None) -> ReleasePlan:
        keep = keep_ms(keep_for)  # checked before anything is sent
        if keep:
            check_last_hold(self._state, self.name, owner)
        hold = self._state.begin_release(self.name, owner)
        if hold is None:
            lost = self._state.take_lost(self.name, owner)
            if lost is not None:
                raise lost
            raise NotOwnedError(
                f"lock {self.name!r} is not held by owner {owner}: nothing to release",
                name=self.name,
                owner=owner,
            )
        if hold.release_id is None:
            # kept while the outcome is unknown: the same release sent again is recognised
            hold.release_id = next_request_id()
        op = core.release(
            self._keys,
            owner,
            self._masters,
            held=hold.count,
            request_id=hold.release_id,
            master_timeout=self._master_timeout,
            keep_ms=keep,
        )
        return ReleasePlan(owner=owner, hold=hold, op=op)

    def _released(self, plan: ReleasePlan, result: core.Released) -> None:
        plan.hold.release_id = None
        self._state.released(plan.hold, result.remaining)
        if result.unconfirmed:
            where = "; ".join(f"{m}: {why}" for m, why in result.unconfirmed.items())
            log.warning(
                "lock %r released on a majority; not confirmed by %s (a hold left there "
                "expires with its lease)",
                self.name,
                where,
            )

    def _release_failed(self, plan: ReleasePlan, exc: BaseException) -> None:
        if isinstance(exc, LeaseLostError):
            self._state.lost_at_release(plan.hold, exc)  # no majority has it
        elif isinstance(exc, QuorumError) and plan.hold.count == 1:
            # a final release that reached too few masters: stop renewing it; the masters not
            # reached keep it until its lease runs out (the error says which)
            self._state.forget(plan.hold)
        # else the outcome is unknown: keep the hold, still marked as being released (the
        # watchdog leaves it alone), so that a retry is safe

    def _lease_lost(self, owner: str) -> bool:
        return self._state.peek_lost(self.name, owner)

    def _where(self) -> str:
        return ",".join(self._masters)
