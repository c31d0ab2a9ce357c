"""The client's record of the lease permits it holds (``PermitTable``): renewed by the
watchdog, released once, reported lost; and the undos of abandoned requests still to send."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError, LeaseLostError, LossCause
from . import receipts
from .keys import LeaseSemaphoreKeys
from .lease_semaphore import Granted, ManyReleased, renew_call
from .requests import Call
from .semaphore import LOST, RELEASED, RELEASED_BEFORE, SEMAPHORE_UNDO, new_request_id

BATCH = 256
"""Permits of one semaphore renewed by one script call."""


@dataclass
class Permit:
    """A lease permit this client holds: ``watched`` ones are renewed by the client."""

    keys: LeaseSemaphoreKeys
    permit_id: str
    watched: bool
    renewed_at: float
    listeners: list[Callable[[LeaseLostError], None]] = field(default_factory=list)
    releasing: bool = False
    """Set from when its release is sent until that release's outcome is known (it may have
    run even if its reply never came), so that renewal neither renews it nor calls it lost."""
    lease_left: float | None = None
    """The lease the server said was left at the grant, from ``renewed_at`` (a try retried
    after a lost reply finds its permit granted earlier, with less left than was asked);
    ``None`` once renewed (then it has at least the renewal's lease)."""


def lost_error(permit: Permit, why: str, cause: LossCause = "unknown") -> LeaseLostError:
    return LeaseLostError(
        f"lease semaphore {permit.keys.name!r}: permit {permit.permit_id} lost ({why})",
        name=permit.keys.name,
        owner=permit.permit_id,
        cause=cause,
    )


@dataclass(frozen=True, eq=False)
class PendingUndo:
    """An undo (or give-back) of an abandoned request that could not reach the server:
    retried until ``until``, ``receipts.WINDOWS.unsure_for`` after the request's first send."""

    call: Call
    name: str
    since: float
    """When the request it undoes was first sent with its outcome unknown (client clock)."""
    until: float

    @property
    def counting(self) -> bool:
        """A counting semaphore's undo (its permits have no lease: taken, they stay taken for
        good); else a lease semaphore's give-back (they come back when their lease ends)."""
        return self.call.script is SEMAPHORE_UNDO


def pending_undo(call: Call, name: str, since: float) -> PendingUndo:
    """The undo ``call`` of a request first sent at ``since``: sent within its window."""
    return PendingUndo(call=call, name=name, since=since, until=since + receipts.WINDOWS.unsure_for)


def undo_settled(pending: PendingUndo, reply: Any, now: float) -> bool:
    """Whether ``reply`` (read at ``now``) to ``pending`` tells for sure that nothing of the
    request it undoes stays taken. A counting semaphore's undo that found the grant's receipt
    gave the permits back; one that found none proves the acquire never ran (or was undone
    already) only while that receipt would still be there: read later, it cannot tell, and the
    permits may stay taken for good. A lease give-back always tells (a permit stays in the
    leases for as long as it is held)."""
    if not pending.counting or int(reply[0]) == 1:
        return True
    return now - pending.since <= receipts.WINDOWS.conclusive_for


class PermitTable:
    """Permits the server granted to this client, by id; the ones found lost, until their
    release reports it; the request ids of releases whose outcome is unknown, so that a
    retried release is the same request; and undos still to be sent. Not thread-safe by
    itself: the sync shell holds a mutex around it.

    Its renewal interface (``calls``, ``renewed``, ``renewal_failed``) is what a client-wide
    watchdog needs from any primitive whose holds it renews.
    """

    def __init__(self) -> None:
        self._permits: dict[str, Permit] = {}
        self._lost: dict[str, LeaseLostError] = {}
        self._releases: dict[str, tuple[str, float]] = {}  # permit -> (request id, sent at)
        self._undos: list[PendingUndo] = []

    def __len__(self) -> int:
        return len(self._permits)

    def get(self, permit: str) -> Permit | None:
        return self._permits.get(permit)

    def granted(
        self,
        keys: LeaseSemaphoreKeys,
        granted: Granted,
        *,
        watched: bool,
        listener: Callable[[LeaseLostError], None] | None,
    ) -> Permit:
        record = Permit(
            keys=keys,
            permit_id=granted.permit_id,
            watched=watched,
            renewed_at=granted.requested_at,
            listeners=[listener] if listener is not None else [],
            lease_left=granted.ttl,
        )
        self._permits[granted.permit_id] = record
        self._lost.pop(granted.permit_id, None)
        return record

    def begin_release(self, permit: str, now: float) -> str:
        """Mark ``permit`` as being released; returns the request id to send: that of an
        earlier release of it whose outcome is unknown (a retry must be recognised as the same
        release), else a new one. Until ``released`` it is neither renewed nor reported lost."""
        return self.begin_releases([permit], now)[0]

    def begin_releases(self, permits: Sequence[str], now: float) -> list[str]:
        """``begin_release`` for several permits given back together: their request ids."""
        starting = set(permits)
        for stale, (_, sent_at) in list(self._releases.items()):
            if now - sent_at > receipts.WINDOWS.unsure_for and stale not in starting:
                del self._releases[stale]  # too old to be recognised: resolved by its lease
                record = self._permits.get(stale)
                if record is not None and record.releasing:
                    del self._permits[stale]
        request_ids = []
        for permit in permits:
            record = self._permits.get(permit)
            if record is not None:
                record.releasing = True
            request_id, _ = self._releases.setdefault(permit, (new_request_id(), now))
            request_ids.append(request_id)
        return request_ids

    def release_refused(self, permit: str) -> None:
        """A release that the server refused (it changed nothing): ``permit`` is held still,
        renewed again, and its next release is a new request."""
        self._releases.pop(permit, None)
        record = self._permits.get(permit)
        if record is not None:
            record.releasing = False

    def lease_set(self, permit: str, held: bool, sent_at: float) -> bool:
        """Its lease was set to a length of the caller's choosing (``update_lease_time``): a
        held permit is no longer renewed by the client; one not held is forgotten. Returns
        whether it was this client's."""
        if not held:
            self._lost.pop(permit, None)
            return self.released(permit) is not None
        record = self._permits.get(permit)
        if record is not None:
            record.watched = False
            record.renewed_at = sent_at
        return record is not None

    def released(self, permit: str) -> Permit | None:
        """Forget a permit given back (or found gone), once its release's outcome is known;
        returns its record, if it was ours."""
        self._lost.pop(permit, None)
        self._releases.pop(permit, None)
        return self._permits.pop(permit, None)

    def take_lost(self, permit: str) -> LeaseLostError | None:
        return self._lost.pop(permit, None)

    def lost(self, record: Permit, error: LeaseLostError) -> bool:
        """Record that ``record`` is gone on the server; ``False`` if it was released meanwhile."""
        if self._permits.get(record.permit_id) is not record:
            return False
        del self._permits[record.permit_id]
        self._lost[record.permit_id] = error
        return True

    def watched(self) -> list[Permit]:
        return [p for p in self._permits.values() if p.watched and not p.releasing]

    def clear(self) -> None:
        self._permits.clear()
        self._lost.clear()
        self._releases.clear()
        self._undos.clear()

    def undo_later(self, call: Call, name: str, since: float) -> PendingUndo:
        """Keep an undo that could not be sent now, for the watchdog to retry within the
        window of its request, first sent at ``since``."""
        return self.keep_undo(pending_undo(call, name, since))

    def keep_undo(self, pending: PendingUndo) -> PendingUndo:
        """``undo_later`` for an undo already made."""
        self._undos.append(pending)
        return pending

    def undo_round(self, now: float) -> tuple[list[tuple[PendingUndo, Call]], list[PendingUndo]]:
        """The undos to retry this round, and those dropped now: past their window, they could
        no longer tell whether their request ran (its permits may stay taken)."""
        expired = [u for u in self._undos if now > u.until]
        self._undos = [u for u in self._undos if now <= u.until]
        return [(u, u.call) for u in self._undos], expired

    def undo_done(self, pending: PendingUndo) -> None:
        self._undos = [u for u in self._undos if u is not pending]

    @property
    def undos_pending(self) -> int:
        """Undos still to be sent (0: every abandoned request of this client is resolved)."""
        return len(self._undos)

    @staticmethod
    def calls(permits: Iterable[Permit], lease: float) -> list[tuple[list[Permit], Call]]:
        """Renewal calls: one per semaphore (its keys share a slot), at most ``BATCH`` each."""
        groups: dict[str, list[Permit]] = {}
        for record in permits:
            groups.setdefault(record.keys.name, []).append(record)
        out = []
        for group in groups.values():
            for start in range(0, len(group), BATCH):
                batch = group[start : start + BATCH]
                ids = [p.permit_id for p in batch]
                out.append((batch, renew_call(batch[0].keys, ids, lease)))
        return out

    def renewed(
        self, batch: Sequence[Permit], reply: Sequence[Any], sent_at: float
    ) -> list[tuple[Permit, LeaseLostError]]:
        """Apply a renewal reply; returns the permits found gone (now recorded as lost)."""
        gone = []
        for record, ok in zip(batch, reply, strict=True):
            if int(ok):
                record.renewed_at, record.lease_left = sent_at, None
            elif not record.releasing:
                error = lost_error(record, "renewal found it gone")
                if self.lost(record, error):
                    gone.append((record, error))
        return gone

    def renewal_failed(
        self, batch: Sequence[Permit], now: float, lease: float
    ) -> list[tuple[Permit, LeaseLostError]]:
        """A renewal could not reach the server: permits not renewed for a whole lease are
        certainly gone; returns them (now recorded as lost)."""
        gone = []
        for record in batch:
            left = lease if record.lease_left is None else min(lease, record.lease_left)
            if not record.releasing and now - record.renewed_at >= left:
                error = lost_error(record, "not renewed for a whole lease", "expired")
                if self.lost(record, error):
                    gone.append((record, error))
        return gone


def finish_release_many(
    table: PermitTable, keys: LeaseSemaphoreKeys, permits: Sequence[str], done: ManyReleased
) -> Exception | None:
    """Apply a several-permit release's known outcome to the client's record; the error it
    reports, if any: ``InvalidArgumentError`` when an id is not a held permit, else
    ``LeaseLostError`` when a lease ran out (the other permits stay held, and are still
    renewed, as none was given back)."""
    unknown, lost = [], []
    for permit, state in zip(permits, done.states, strict=True):
        if done.code != RELEASED and state == RELEASED:
            table.release_refused(permit)  # still held
            continue
        was_lost = table.take_lost(permit)
        ours = table.released(permit) is not None
        if state in (RELEASED, RELEASED_BEFORE):
            continue
        if state == LOST or ours or was_lost is not None:
            lost.append(permit)
        else:
            unknown.append(permit)
    if done.code == RELEASED:
        return None
    what = f"lease semaphore {keys.name!r}: release_many"
    if unknown:
        also = f"; lost (their lease ran out): {', '.join(lost)}" if lost else ""
        return InvalidArgumentError(
            f"{what}: permit_ids {', '.join(unknown)} are not held permits (never granted, "
            f"already released, or their lease ran out){also}; none was given back"
        )
    return LeaseLostError(
        f"{what}: permits {', '.join(lost)} lost (their lease ran out); none was given back",
        name=keys.name,
        owner=lost[0],
    )
