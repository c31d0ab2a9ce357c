"""Owner identity and the client's hold table: who holds what, as both shells see it.

Nothing here blocks or awaits; each shell adds only its own I/O around it.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from .._core.keys import LockKeys, PubSub
from .._core.lock import Acquired, Hold, HoldTable
from .._core.requests import Call, Replication
from .._core.watchdog import RenewalPolicy
from ..errors import LeaseLostError, LossCause
from ..events import Listeners, LockEvent
from . import fork
from .channels import Lost

log = logging.getLogger("redlease")

# --- owner identity -----------------------------------------------------------------------
# A hold belongs to "<client-id>:<owner-id>", as in Redisson. The client id is random and is
# minted again in a forked child; owner ids come from a process-wide counter, so neither a
# recycled thread ident nor a recycled id(task) can ever make two owners look the same.

_owner_ids = itertools.count(1)


@fork.in_child
def _fresh_owner_ids() -> None:
    global _owner_ids
    _owner_ids = itertools.count(1)


def next_owner_id() -> int:
    return next(_owner_ids)


_request_ids = itertools.count(1)
_request_prefix = os.urandom(8).hex()


@fork.in_child
def _fresh_request_ids() -> None:
    global _request_ids, _request_prefix
    _request_ids = itertools.count(1)
    _request_prefix = os.urandom(8).hex()


def next_request_id() -> str:
    """The id of one call (a release, an acquire's wait), kept for its retries: 64 random
    bits per process (drawn again in a forked child) and a counter. Receipts of a lock are
    shared by every owner of its name, so an id must never be minted twice in any process on
    any host: a per-process counter alone repeats in every worker."""
    return f"{_request_prefix}{next(_request_ids):x}"


class ThreadOwners:
    """A fresh owner id for each thread (sync side), never reused."""

    def __init__(self) -> None:
        self._local = threading.local()

    def current(self) -> int:
        owner: fork.PerProcess[int] | None = getattr(self._local, "owner", None)
        if owner is None:
            owner = self._local.owner = fork.PerProcess(next_owner_id)
        return owner.get()  # a new one in a forked child


class TaskOwners:
    """A fresh owner id for each asyncio task (async side), never reused."""

    def __init__(self) -> None:
        self._ids: fork.PerProcess[weakref.WeakKeyDictionary[Any, int]] = fork.PerProcess(
            weakref.WeakKeyDictionary
        )

    def current(self, task: Any) -> int:
        ids = self._ids.get()  # none of the parent's in a forked child
        owner = ids.get(task)
        if owner is None:
            owner = ids[task] = next_owner_id()
        return owner


# --- the client's state ---------------------------------------------------------------------


class RenewalSource(Protocol):
    """Leases other than lock holds that the client's one watchdog renews (lease permits)."""

    def renewal_calls(self, lease: float) -> list[tuple[Any, Call]]:
        """The calls to send this round, each with what it renews."""
        ...

    def renewal_done(self, batch: Any, reply: Any, sent_at: float) -> None: ...

    def renewal_failed(self, batch: Any, exc: Exception) -> None: ...


RenewalJob = tuple[Callable[[Any, float], None], Callable[[Exception], None], Call]
"""A renewal call with what to do with its reply (and when it was sent), or its error."""


HANDOFF_WINDOW = 1.0
"""Default seconds of the first lease of a waiter handed a released lock whose lease the
watchdog renews (a waiter with a lease of its own is handed the lock with that lease)."""


class ClientState:
    """A client's id and confirmed holds, safe to touch from any thread.

    Local state changes only after the server confirmed (``granted``, ``released``); a lost
    lease is remembered per owner until that owner's next release raises it.
    """

    def __init__(
        self, watchdog_timeout: float, handoff_window: float, replication: Replication | None
    ) -> None:
        self.watchdog_timeout = watchdog_timeout
        self.handover_ms = round(handoff_window * 1000)
        self.replication = replication
        self.mutex = threading.Lock()
        self._forked = False  # set in a forked child until check_fork() tells it
        fork.in_child(self._fresh_after_fork)
        self.id = str(uuid.uuid4())
        self.holds = HoldTable()
        self._lost: dict[tuple[str, str], LeaseLostError] = {}
        self.listeners = Listeners()
        self.renewal_sources: list[RenewalSource] = []
        self.pubsub = PubSub()
        """How this client's primitives publish and listen (shared by all their keys)."""
        self.renew_soon: Callable[[], None] = lambda: None
        """Wakes the watchdog to look again at when it must next renew (set by the watchdog)."""
        self.watchdog_wakes_at = 0.0
        """When the watchdog plans to wake next (monotonic; set by the watchdog)."""
        self._check_now = False  # the watchdog is to renew at once (see check_holds_now)
        self._late_warned_at: float | None = None

    def add_renewal_source(self, source: RenewalSource) -> None:
        """Have the client's one watchdog renew ``source``'s leases too."""
        with self.mutex:
            if source not in self.renewal_sources:
                self.renewal_sources.append(source)

    def _fresh_after_fork(self) -> None:
        """In a forked child (``fork.in_child``): a fresh mutex (a parent's thread may have
        held it), a new client id, none of the parent's holds, lost leases or renewals."""
        self.mutex = threading.Lock()
        self.id = str(uuid.uuid4())
        self.holds = HoldTable()
        self._lost = {}
        self.renewal_sources = []
        self._forked = True

    def check_fork(self) -> bool:
        """True once in a forked child, to the first caller: the shell then drops what
        it kept of the parent's (its watchdog, its subscriber)."""
        if not self._forked:
            return False
        with self.mutex:
            forked, self._forked = self._forked, False
        return forked

    def owner(self, owner_id: int) -> str:
        return f"{self.id}:{owner_id}"

    def count(self, name: str, owner: str) -> int:
        with self.mutex:
            return self.holds.count(name, owner)

    def granted(
        self,
        keys: LockKeys,
        owner: str,
        acquired: Acquired,
        lease: float | None,
        listener: Callable[[LeaseLostError], None] | None,
        started: float,
    ) -> Hold:
        with self.mutex:
            self._lost.pop((keys.name, owner), None)
            old = self.holds.get(keys.name, owner)
            gone = old if old is not None and acquired.count == 1 else None
            hold = self.holds.granted(keys, owner, acquired, lease)
            hold.releasing, hold.release_id = False, None  # a re-entry ends a failed release
            if listener is not None and listener not in hold.listeners:
                hold.listeners.append(listener)
            short = lease is None and acquired.count == 1 and acquired.ttl < self.watchdog_timeout
            if short:
                # a hand-over's short first lease: renewed within a third of it, and counted
                # lost (should renewals fail) when it would run out, not a watchdog lease later
                hold.renewed_at = acquired.requested_at + acquired.ttl - self.watchdog_timeout
                hold.renew_by = acquired.requested_at + acquired.ttl / 3
                short = hold.renew_by < self.watchdog_wakes_at  # else it wakes in time anyway
        if gone is not None:
            self._found_gone(gone)
        if short:
            self.renew_soon()
        wait = time.monotonic() - started
        log.debug(
            "acquired lock %r owner %s count %d after %.3f s",
            keys.name,
            owner,
            acquired.count,
            wait,
            extra={"lock": keys.name, "owner": owner},
        )
        if self.listeners:
            self.listeners.send(
                LockEvent(
                    "acquired",
                    keys.name,
                    owner,
                    wait=wait,
                    hold_count=acquired.count,
                    fencing_token=acquired.token,
                )
            )
        return hold

    def acquire_failed(self, name: str, owner: str, started: float, *, gone: bool) -> None:
        """Not acquired. ``gone``: a reply showed the owner's hold gone on the server, so
        its record goes too (a re-entry given back as too late keeps the outer hold)."""
        if gone:
            with self.mutex:
                dropped = self.holds.drop(name, owner)
            if dropped is not None:
                self._found_gone(dropped)
        wait = time.monotonic() - started
        log.debug(
            "lock %r not acquired by owner %s after %.3f s",
            name,
            owner,
            wait,
            extra={"lock": name, "owner": owner},
        )
        if self.listeners:
            self.listeners.send(LockEvent("acquire_failed", name, owner, wait=wait))

    def _found_gone(self, hold: Hold) -> None:
        """An acquire found ``hold`` gone on the server (its record is already replaced or
        dropped). An explicit lease that ran out is how such a hold ends (Redisson's
        ``lock(leaseTime)``); a hold the watchdog renewed was lost, which its listeners are
        told and the owner's next release that finds nothing raises."""
        if not hold.watched or hold.releasing:
            return
        error = lost_error(hold, "found gone by a later acquire", self.loss_cause(hold))
        self.lease_lost(hold, error, dropped=True)

    def maybe_reentered(self, name: str, owner: str) -> None:
        """An acquire failed with an unknown outcome: if it was a re-entry, the server may
        count one hold more than we do, which the next release gives back too."""
        with self.mutex:
            hold = self.holds.get(name, owner)
            if hold is not None:
                hold.unsure = True

    def begin_release(self, name: str, owner: str) -> Hold | None:
        """The hold about to be released (marked so the watchdog leaves a final one alone)."""
        with self.mutex:
            hold = self.holds.get(name, owner)
            if hold is not None and hold.count == 1:
                hold.releasing = True
            return hold

    def released(self, hold: Hold, remaining: int) -> None:
        name, owner = hold.keys.name, hold.owner
        with self.mutex:
            self.holds.released(name, owner, remaining)
        held = time.monotonic() - hold.acquired_at
        log.debug(
            "released lock %r owner %s remaining %d after %.3f s",
            name,
            owner,
            remaining,
            held,
            extra={"lock": name, "owner": owner},
        )
        if self.listeners:
            self.listeners.send(
                LockEvent(
                    "released",
                    name,
                    owner,
                    held=held,
                    hold_count=remaining,
                    fencing_token=hold.token,
                )
            )

    def owner_ended(self, owner: str) -> list[Hold]:
        """The task of ``owner`` ended holding: each of its holds is forgotten here, so the
        watchdog renews it no more and it runs out with its lease (not given back: work the
        task left running, or a fencing token it handed on, may still rely on it, as after a
        crash of its holder), and reported (a warning, an ``owner_ended`` event). Its
        holds."""
        with self.mutex:
            ended = [h for h in self.holds.holds() if h.owner == owner and not h.releasing]
            for hold in ended:
                self.holds.drop(hold.keys.name, owner, hold.epoch)
        for hold in ended:
            renewed = hold.watched
            log.warning(
                "lock %r: owner %s ended holding it (%d hold%s, fencing token %d): %s",
                hold.keys.name,
                owner,
                hold.count,
                "" if hold.count == 1 else "s",
                hold.token,
                "no longer renewed, it runs out within its lease"
                if renewed
                else "it runs out with its lease",
                extra={"lock": hold.keys.name, "owner": owner},
            )
            if self.listeners:
                self.listeners.send(
                    LockEvent(
                        "owner_ended",
                        hold.keys.name,
                        owner,
                        held=time.monotonic() - hold.acquired_at,
                        hold_count=hold.count,
                        fencing_token=hold.token,
                    )
                )
        return ended

    def peek_lost(self, name: str, owner: str) -> bool:
        with self.mutex:
            return (name, owner) in self._lost

    def take_lost(self, name: str, owner: str) -> LeaseLostError | None:
        with self.mutex:
            return self._lost.pop((name, owner), None)

    def lease_lost(self, hold: Hold, error: LeaseLostError, *, dropped: bool = False) -> None:
        """Record that ``hold`` is gone on the server and tell its listeners (``dropped``:
        its record was already taken out of the table)."""
        with self.mutex:
            if not dropped and self.holds.drop(hold.keys.name, hold.owner, hold.epoch) is None:
                return  # released or re-acquired meanwhile: not a loss
            self._lost[(hold.keys.name, hold.owner)] = error
        log.warning("%s", error, extra={"lock": hold.keys.name, "owner": hold.owner})
        self._send_lost(hold, error)
        for listener in hold.listeners:
            try:
                listener(error)
            except Exception:
                log.exception("lease-lost callback for lock %r failed", hold.keys.name)

    def _send_lost(self, hold: Hold, error: LeaseLostError) -> None:
        """Tell the listeners ``hold`` was lost (a ``lease_lost`` event with its cause)."""
        if self.listeners:
            self.listeners.send(
                LockEvent(
                    "lease_lost",
                    hold.keys.name,
                    hold.owner,
                    held=time.monotonic() - hold.acquired_at,
                    fencing_token=hold.token,
                    error=error,
                    cause=error.cause,
                )
            )

    def lost_at_release(self, hold: Hold, error: LeaseLostError) -> None:
        """A release found ``hold`` gone on the server (the release raises ``error``): its
        record goes, and the listeners hear of the loss (``lease_lost``) unless they already
        did; ``error.cause`` is set from what the client can tell (or was told: a loss
        reported while the release was on its way, a forced release's message)."""
        key = (hold.keys.name, hold.owner)
        with self.mutex:
            gone = self.holds.drop(hold.keys.name, hold.owner, hold.epoch) is None
            told = self._lost.pop(key, None) if gone else None  # this release raises it now
        if told is not None and error.cause == "unknown":
            error.cause = told.cause
        if error.cause == "unknown":
            error.cause = self.loss_cause(hold)
        if gone:
            return  # already reported lost (or re-acquired meanwhile)
        self._send_lost(hold, error)

    def loss_cause(self, hold: Hold, now: float | None = None) -> LossCause:
        """Why ``hold`` is gone, as far as the client can tell at ``now``: ``expired`` when
        its lease had certainly run out (a watched hold not renewed for a whole
        ``watchdog_timeout``; an explicit lease past its end), else ``unknown``."""
        now = time.monotonic() if now is None else now
        leases = [lease for lease in hold.leases if lease is not None]
        lease = self.watchdog_timeout if hold.watched or not leases else max(leases)
        return "expired" if now - hold.renewed_at >= lease else "unknown"

    def late_round(self, late: float, lease: float, why: str) -> None:
        """The watchdog began a round ``late`` seconds after it was due: a WARNING, at most
        one a minute (the process is starved: a lease may run out while held)."""
        now = time.monotonic()
        if self._late_warned_at is not None and now - self._late_warned_at < 60:
            return
        self._late_warned_at = now
        log.warning(
            "lease renewals started %.2f s late (%s); with watchdog_timeout=%g s a hold is "
            "renewed every %.3g s and lost if not renewed within %g s: keep CPU-bound work "
            "off the event loop (or in fewer threads), or raise watchdog_timeout",
            late,
            why,
            lease,
            lease / 3,
            lease,
        )

    def watchdog_wake(self, next_round: float) -> float:
        """When the watchdog must wake next: at its next round, or sooner for a hold whose
        short first lease is due (recorded, so that a hold due even sooner kicks it), or now
        when the holds are to be checked at once (``check_holds_now``)."""
        with self.mutex:
            due = self.holds.renew_due()
            wake = next_round if due is None else min(next_round, due)
            if self._check_now:
                self._check_now = False
                wake = min(wake, time.monotonic())
            self.watchdog_wakes_at = wake
        return wake

    # --- what the subscriber tells of the holds (``channels.Holders``) ------------------

    def held_channels(self) -> set[str]:
        """The channels where this client hears that a hold of its was force-released: its
        own channel of each lock one of its owners holds with a lease the watchdog renews."""
        with self.mutex:
            return {
                h.keys.holder(h.owner)
                for h in self.holds.holds()
                if h.watched and h.keys.holder_prefix
            }

    def forced(self, notice: Lost) -> None:
        """A force release's message: the hold of ``notice.owner`` with ``notice.token`` is
        gone. Only the hold with that very token is lost (tokens are unique per hold), so a
        message that arrives late, about an earlier hold of the owner, or a second time, finds
        no such hold and changes nothing; a hold being released is left to its release."""
        with self.mutex:
            hold = next(
                (
                    h
                    for h in self.holds.holds()
                    if h.owner == notice.owner
                    and h.token == notice.token
                    and h.keys.holder_prefix
                    and h.keys.holder(h.owner) == notice.channel
                ),
                None,
            )
            if hold is None or hold.releasing:
                return
        self.lease_lost(hold, lost_error(hold, "force-released", "forced"))

    def check_holds_now(self) -> None:
        """Have the watchdog renew every hold at once, not at its next round: a channel a hold
        listens on was subscribed again (a reconnection: a force release meanwhile went
        unheard, a restarted server may have lost the holds)."""
        with self.mutex:
            self._check_now = True
        self.renew_soon()

    def renewal_jobs(self, policy: RenewalPolicy, *, by_slot: bool) -> list[RenewalJob]:
        """A round's renewal calls: the watched holds' (batched), then each other source's."""
        with self.mutex:
            holds = self.holds.watched()
            sources = list(self.renewal_sources)
        jobs: list[RenewalJob] = [
            (
                functools.partial(self.renewal_done, batch),
                functools.partial(self.renewal_failed, batch, policy),
                call,
            )
            for batch, call in policy.calls(holds, by_slot=by_slot)
        ]
        for source in sources:
            jobs.extend(
                (
                    functools.partial(source.renewal_done, handle),
                    functools.partial(source.renewal_failed, handle),
                    call,
                )
                for handle, call in source.renewal_calls(policy.timeout)
            )
        return jobs

    def renewal_done(self, batch: list[Hold], reply: list[Any], sent_at: float) -> None:
        """Apply a renewal reply: renewed holds count from ``sent_at``; gone ones are lost."""
        for hold, renewed in zip(batch, reply, strict=True):
            if int(renewed) == 1:
                hold.renewed_at, hold.renew_by = sent_at, None
            elif not hold.releasing:
                # 2: the server's fencing counter is below the hold's token (it lost data);
                # else expired if it had run out by the reply
                cause = "server_lost" if int(renewed) == 2 else self.loss_cause(hold)
                self.lease_lost(hold, lost_error(hold, "the watchdog found it gone", cause))

    def renewal_failed(self, batch: list[Hold], policy: RenewalPolicy, exc: Exception) -> None:
        """A renewal round could not reach the server: holds past a whole lease are lost."""
        log.warning("lease renewal of %d locks failed: %s", len(batch), exc)
        now = time.monotonic()
        for hold in batch:
            if self.listeners:
                self.listeners.send(
                    LockEvent("renewal_failed", hold.keys.name, hold.owner, error=exc)
                )
            if policy.expired(hold.renewed_at, now):
                self.lease_lost(hold, lost_error(hold, "not renewed for a whole lease", "expired"))

    def forget(self, hold: Hold) -> None:
        with self.mutex:
            self.holds.drop(hold.keys.name, hold.owner, hold.epoch)

    def clear(self) -> None:
        with self.mutex:
            self.holds.clear()
            self._lost.clear()


def lost_error(hold: Hold, why: str, cause: LossCause = "unknown") -> LeaseLostError:
    return LeaseLostError(
        f"lock {hold.keys.name!r}: lease of owner {hold.owner} lost ({why})",
        name=hold.keys.name,
        owner=hold.owner,
        cause=cause,
    )
