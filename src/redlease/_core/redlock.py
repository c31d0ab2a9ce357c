"""Redlock: one lock on N independent masters, held while a majority granted it in time.

The single-master scripts run unchanged on every master (same keys, same owner field); this
module decides from their replies: the quorum (``N // 2 + 1``), the validity left
(``lease - elapsed - drift``), what to give back after a failed attempt, when a lease is lost.
Operations yield ``Fanout`` requests, which a shell performs on all masters at once, waiting for
each master at most the per-master timeout, and hands back one outcome per master.

Per-master wait lines are not used: each master would order waiters by its own clock and
arrival, so reservations on different masters could go to different waiters and split the
vote. Contenders that split the vote give back what they got and retry after a random back-off,
as the Redis "Distributed Locks" page prescribes; a majority holder's release still wakes
waiters by pub/sub.
"""

from __future__ import annotations

import math
import os
import random as _random
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import LeaseLostError, QuorumError, ServerUnavailableError
from . import codes, keep, lock
from .backoff import MIN_PAUSE, full_jitter
from .keys import LockKeys
from .lock import MIN_WAIT, OUTAGE_TOLERANCE, RECHECK, Acquired, Hold, Status, drift, release_call
from .requests import Call, Sleep, WaitWake
from .watchdog import RenewalPolicy

T = TypeVar("T")

MASTER_TIMEOUT = 0.1
"""Default per-master timeout (seconds): how long any fan-out waits for one master. Keep it far
below the leases you use; the Redis page suggests 5-50 ms for a 10 s lease."""

OUTAGE_GRACE = 1.0
"""An unbounded acquire that has not yet seen the lock held retries this long through an
outage (a majority not answering in time, or validity spent) before it raises: a moment's
slowness is ridden out, a majority that is down is reported promptly."""

BACKOFF_BASE = 0.01
BACKOFF_CAP = 0.5
"""Random back-off after a split vote or an outage: uniform in ``[0, min(cap, base * 2**n))``."""


class NotAnswered(ServerUnavailableError):
    """A call that went out to a master and was not answered (in time, or at all: the
    connection broke after it was written): it may have run there, or may still run."""


def request_id() -> str:
    """A unique id for a release request (makes a retried release recognisable)."""
    return os.urandom(16).hex()


def quorum(masters: int) -> int:
    """How many masters make a majority."""
    return masters // 2 + 1


def validity(ttl: float, elapsed: float, lease: float) -> float:
    """Seconds a majority grant can be relied on: the TTL a majority holds, minus the time the
    acquisition took, minus the clock-drift allowance for the lease (1% + 2 ms)."""
    return ttl - elapsed - drift(lease)


def majority_value(values: Sequence[float], masters: int) -> float:
    """The largest value that at least a majority of ``masters`` reach (missing ones count 0)."""
    ranked = sorted(values, reverse=True)
    need = quorum(masters)
    return ranked[need - 1] if len(ranked) >= need else 0.0


# --- requests -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fanout:
    """Run ``calls[i]`` on master ``i`` (``None``: nothing there), on all masters at once, and
    wait for each master at most ``timeout`` seconds from when the request is sent.

    Reply: a list with one entry per master: the script's reply, ``None`` where no call was
    made, or the exception the master failed with (``ServerUnavailableError`` when it could not
    be reached or did not answer in time; a server error otherwise).

    ``on_cancel`` (asyncio): when the caller is cancelled while the calls are out, let them
    land (bounded by ``timeout``) and then run these calls, so that nothing stays granted.
    """

    calls: tuple[Call | None, ...]
    timeout: float
    on_cancel: tuple[Call | None, ...] | None = None


@dataclass(frozen=True)
class Listen:
    """Listen on ``channel`` for ``owner`` on the masters numbered in ``masters``; reply: on how
    many masters the operation now listens. With ``only_if_live`` only where the master's
    subscriber connection already listens there (no round trip); otherwise subscribe, waiting
    for confirmations no longer than the per-master timeout. A wake-up from any master wakes
    the operation."""

    channel: str
    owner: str
    masters: tuple[int, ...]
    only_if_live: bool = False


RedlockRequest = Fanout | Listen | WaitWake | Sleep
RedlockOperation = Generator[RedlockRequest, Any, T]


# --- describing outcomes ----------------------------------------------------------------------


def _failed(reply: Any) -> bool:
    return isinstance(reply, BaseException)


def _sent(reply: Any) -> bool:
    """Whether a failed call may have run: it went out and was not answered."""
    return isinstance(reply, NotAnswered)


def _why(exc: BaseException) -> str:
    # an unavailable server's message already says so ("redis server ... unavailable ...")
    return str(exc) if isinstance(exc, ServerUnavailableError) else f"error: {exc}"


def _labels(masters: Sequence[str]) -> list[str]:
    """Addresses as dict keys; a repeated one gets ``#index`` (RedlockClient refuses them)."""
    seen: set[str] = set()
    out = []
    for i, address in enumerate(masters):
        label = address if address not in seen else f"{address}#{i}"
        seen.add(label)
        out.append(label)
    return out


def quorum_error(
    message: str,
    keys: LockKeys,
    owner: str | None,
    masters: Sequence[str],
    replies: Sequence[Any],
    describe: Callable[[Any], str],
) -> QuorumError:
    """A ``QuorumError`` carrying what each master answered (``describe`` turns a reply into
    words; failures are described by their exception)."""
    outcomes: dict[str, str] = {}
    errors: dict[str, BaseException] = {}
    for label, reply in zip(_labels(masters), replies, strict=True):
        if reply is None:
            outcomes[label] = "not asked"
        elif _failed(reply):
            outcomes[label] = _why(reply)
            errors[label] = reply
        else:
            outcomes[label] = describe(reply)
    detail = "; ".join(f"{label}: {what}" for label, what in outcomes.items())
    return QuorumError(
        f"{message} ({detail})",
        name=keys.name,
        owner=owner,
        quorum=quorum(len(masters)),
        outcomes=outcomes,
        errors=errors,
    )


def _describe_acquire(reply: Any) -> str:
    code = int(reply[0])
    if code == codes.GRANTED:
        return "granted"
    if code == codes.LOST:
        return "the caller's hold is gone"
    ttl = int(reply[2])
    return "held by another owner" + (f" ({ttl} ms left)" if ttl >= 0 else "")


def _describe_release(reply: Any) -> str:
    return "released" if int(reply[0]) == codes.RELEASED else "not held by the caller"


def _describe_answer(reply: Any) -> str:
    return "answered"


# --- acquire --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """One acquisition attempt, master by master: TTLs (ms) where granted and where held by
    another owner, masters where the caller's hold is gone, masters that failed."""

    granted: dict[int, int]
    held: dict[int, int]
    lost: tuple[int, ...]
    failed: tuple[int, ...]

    @property
    def answered(self) -> tuple[int, ...]:
        return tuple(sorted([*self.granted, *self.held, *self.lost]))


def tally(replies: Sequence[Any]) -> Tally:
    """Sort the replies of ``lock_acquire.lua`` (one per master) by outcome."""
    granted: dict[int, int] = {}
    held: dict[int, int] = {}
    lost: list[int] = []
    failed: list[int] = []
    for i, reply in enumerate(replies):
        if reply is None or _failed(reply):
            failed.append(i)
            continue
        code = int(reply[0])
        if code == codes.GRANTED:
            granted[i] = int(reply[2])
        elif code == codes.LOST:
            lost.append(i)
        else:
            held[i] = int(reply[2])
    return Tally(granted, held, tuple(lost), tuple(failed))


def granted_validity(counted: Tally, masters: int, lease: float, elapsed: float) -> float:
    """The validity of a grant: the lease a majority of masters has, each master's being the
    lease asked or the TTL it reported if shorter (a retry finds what is left of its earlier
    grant; a longer lease there, as a re-entry may find, is not counted on), minus elapsed
    time and drift. Not positive: unusable."""
    ttls = [lease if ttl < 0 else min(lease, ttl / 1000) for ttl in counted.granted.values()]
    return validity(majority_value(ttls, masters), elapsed, lease)


def acquire_call(
    keys: LockKeys, owner: str, held: int, lease: float, wait_id: str | None = None
) -> Call:
    """The single-master acquire script call, without a place in line: exactly what a
    non-blocking ``lock.acquire`` sends first (so the two cannot drift apart). ``wait_id``
    names the acquire call (its retries reuse it; a fresh random one when not given): a
    master takes a hold of the owner as this call's retry only if it was made for this very
    call (see ``lock_acquire.lua``)."""
    wait_id = wait_id or request_id()
    call = next(
        lock.acquire(
            keys, owner, held=held, lease=lease, blocking=False, timeout=None, wait_id=wait_id
        )
    )
    assert isinstance(call, Call)
    return call


def acquire(
    keys: LockKeys,
    owner: str,
    masters: Sequence[str],
    *,
    held: int,
    lease: float,
    blocking: bool,
    timeout: float | None,
    master_timeout: float,
    wait_id: str,
    on_unsure: Callable[[list[str]], None] = lambda masters: None,
    clock: Callable[[], float] = time.monotonic,
    random: Callable[[], float] = _random.random,
) -> RedlockOperation[Acquired | None]:
    """Try on every master at once; success needs a majority of grants and validity left.

    Otherwise give back what was granted (on every master that granted or did not answer),
    then, while allowed: wait for a wake-up when a majority holds it elsewhere, or sleep a
    random back-off after a split vote, an outage or a spent validity, and try again.

    ``None`` when not acquired: a non-blocking try found it held, or ``timeout`` ran out (a
    bounded wait never raises ``QuorumError``). ``QuorumError`` when a non-blocking try could
    not get a majority to answer in time, and when an unbounded wait meets an outage (fewer
    than a majority answering, or validity spent) that lasts ``OUTAGE_GRACE`` before it has
    seen the lock held, or ``OUTAGE_TOLERANCE`` after. ``LeaseLostError`` when a re-entry
    finds the caller's hold gone on a majority. The ``Acquired.ttl`` is the validity time; the
    token is 0 (Redlock hands out no fencing token).

    ``wait_id`` is unique to this acquire call (across processes) and every attempt of it sends
    it: a master takes an existing hold of the owner as an attempt's retry only if that hold
    was made for this call; a hold made for another call is re-leased to this one.
    ``on_unsure`` is called with the masters where a give-back was not confirmed (it failed or
    did not answer in time) although the attempt may have been granted there: what it made
    there may stay taken until its lease runs out.
    """
    n = len(masters)
    need = quorum(n)
    everyone = tuple(range(n))
    deadline = None if timeout is None else clock() + timeout
    if blocking:
        yield Listen(keys.channel, owner, everyone, only_if_live=True)
    subscribed = False
    seen_held = False
    outage_since: float | None = None
    backoffs = 0
    while True:
        give_back = release_call(keys, owner, held + 1, request_id=request_id(), token=0)
        call = acquire_call(keys, owner, held, lease, wait_id)
        sent_at = clock()
        replies = yield Fanout((call,) * n, master_timeout, on_cancel=(give_back,) * n)
        elapsed = clock() - sent_at
        counted = tally(replies)
        if len(counted.granted) >= need:
            valid = granted_validity(counted, n, lease, elapsed)
            if valid > 0:
                return Acquired(count=held + 1, ttl=valid, requested_at=sent_at, token=0)
        # not usable: give back wherever it may have been granted (a late master included)
        maybe = {*counted.granted, *counted.failed}
        back = tuple(give_back if i in maybe else None for i in everyone)
        if any(back):
            answers = yield Fanout(back, master_timeout, on_cancel=back)
            # granted there, or sent and not answered: a give-back not confirmed leaves it
            taken = {*counted.granted, *(i for i in counted.failed if _sent(replies[i]))}
            labels = _labels(masters)
            unsure = [labels[i] for i in sorted(taken) if _failed(answers[i])]
            if unsure:
                on_unsure(unsure)
        if held and len(counted.lost) > n - need:
            raise LeaseLostError(
                f"lock {keys.name!r}: the hold of owner {owner} is gone on "
                f"{len(counted.lost)} of {n} masters",
                name=keys.name,
                owner=owner,
            )
        slow = len(counted.granted) >= need
        contended = not slow and bool(counted.held) and len(counted.answered) >= need
        if not blocking:
            if contended:
                return None
            raise _not_acquired(keys, owner, masters, replies, lease, elapsed)
        now = clock()
        if contended:
            seen_held, outage_since = True, None
        elif outage_since is None:
            outage_since = now
        if deadline is None:
            remaining = math.inf
            tolerance = OUTAGE_TOLERANCE if seen_held else OUTAGE_GRACE
            if outage_since is not None and now - outage_since >= tolerance:
                raise _not_acquired(keys, owner, masters, replies, lease, elapsed)
        else:
            remaining = deadline - now
            if remaining <= 0:
                return None
        if contended and len(counted.held) >= need:
            # a majority holds it elsewhere: its release wakes us (a hint: waits are bounded)
            if not subscribed:
                subscribed = True
                yield Listen(keys.channel, owner, counted.answered)
                continue  # try at once: a release before the subscription went unheard
            ttls = [ttl for ttl in counted.held.values() if ttl >= 0]
            holder_left = max(MIN_WAIT, min(ttls) / 1000) if ttls else RECHECK
            yield WaitWake(min(remaining, holder_left, RECHECK))
        else:
            backoffs += 1
            # never a retry with no pause (a draw of 0, or a lease spent by every round trip)
            pause = full_jitter(
                backoffs, base=BACKOFF_BASE, cap=BACKOFF_CAP, random=random, floor=MIN_PAUSE
            )
            yield Sleep(min(remaining, pause))


def _not_acquired(
    keys: LockKeys,
    owner: str,
    masters: Sequence[str],
    replies: Sequence[Any],
    lease: float,
    elapsed: float,
) -> QuorumError:
    n = len(masters)
    granted = len(tally(replies).granted)
    if granted >= quorum(n):
        why = (
            f"granted by {granted} of {n} masters but its validity was spent "
            f"({elapsed * 1000:.0f} ms elapsed of a {lease * 1000:.0f} ms lease)"
        )
    else:
        why = f"granted by {granted} of {n} masters, {quorum(n)} needed"
    return quorum_error(
        f"lock {keys.name!r} not acquired: {why}", keys, owner, masters, replies, _describe_acquire
    )


# --- release --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Released:
    """A release confirmed by a majority: holds the owner keeps, and the masters that did not
    confirm it (address -> why), where the hold lasts until its lease runs out."""

    remaining: int
    unconfirmed: dict[str, str]


def release(
    keys: LockKeys,
    owner: str,
    masters: Sequence[str],
    *,
    held: int,
    request_id: str,
    master_timeout: float,
    keep_ms: int = 0,
) -> RedlockOperation[Released]:
    """Release one hold on every master at once, whatever some of them answer.

    ``keep_ms`` (the last hold only): each master keeps the lock taken, by no one, that many
    milliseconds (``lock_release_keep.lua``, as ``Lock.release(keep_for=)`` on one master).
    The outcome is judged as a plain release's: released (kept) on a majority is a success,
    and as any other owner needs a majority, which meets one kept master at least, nobody
    takes the lock until a majority of the kept slots ran out (``keep_ms`` less the clock
    drift from when the release was sent); a master that did not confirm keeps the owner's
    hold there until its lease runs out.

    ``LeaseLostError`` when a majority no longer has the hold; ``QuorumError`` (with each
    master's outcome) when fewer than a majority confirmed and the rest could not be reached.
    """
    n = len(masters)
    need = quorum(n)
    if keep_ms:
        assert held == 1, "only the last hold keeps the lock"
        call = keep.release_keep_call(keys, owner, request_id=request_id, token=0, keep_ms=keep_ms)
    else:
        call = release_call(keys, owner, held, request_id=request_id, token=0)
    replies = yield Fanout((call,) * n, master_timeout)
    released: list[int] = []
    failed: list[int] = []
    for i, reply in enumerate(replies):
        if _failed(reply):
            failed.append(i)
        elif int(reply[0]) == codes.RELEASED:
            released.append(i)
    if len(released) >= need:
        unconfirmed: dict[str, str] = {}
        if len(released) < n:
            labels = _labels(masters)
            for i, reply in enumerate(replies):
                if i not in released:
                    why = _why(reply) if _failed(reply) else _describe_release(reply)
                    unconfirmed[labels[i]] = why
        return Released(remaining=held - 1, unconfirmed=unconfirmed)
    if len(released) + len(failed) < need:
        raise LeaseLostError(
            f"lock {keys.name!r}: owner {owner} no longer holds it on a majority of masters "
            "(its lease expired, a master lost it, or it was force-released)",
            name=keys.name,
            owner=owner,
        )
    raise quorum_error(
        f"lock {keys.name!r}: release confirmed by {len(released)} of {n} masters, {need} needed;"
        " the others keep the hold until its lease runs out",
        keys,
        owner,
        masters,
        replies,
        _describe_release,
    )


# --- renewal --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Renewal:
    """What one renewal round found for a hold: ``True`` renewed on a majority, ``False`` gone
    from so many masters that no majority has it, ``None`` undecided (masters unreachable)."""

    hold: Hold
    renewed: bool | None
    sent_at: float


def renew(
    holds: Sequence[Hold],
    policy: RenewalPolicy,
    masters: Sequence[str],
    *,
    master_timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> RedlockOperation[list[Renewal]]:
    """Extend every hold's lease on every master (batched as on one master) and count, hold by
    hold, the masters that renewed it."""
    n = len(masters)
    need = quorum(n)
    out: list[Renewal] = []
    for batch, call in policy.calls(holds):
        sent_at = clock()
        replies = yield Fanout((call,) * n, master_timeout)
        for j, hold in enumerate(batch):
            answers = [int(r[j]) for r in replies if not _failed(r)]
            renewed = sum(1 for a in answers if a == 1)
            gone = len(answers) - renewed
            verdict = True if renewed >= need else False if gone > n - need else None
            out.append(Renewal(hold, verdict, sent_at))
    return out


# --- queries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MajorityStatus:
    """A lock as a majority of masters sees it: owners that hold it on a majority (with the
    hold count a majority agrees on) and the TTL a majority still has (``None`` when free);
    ``kept_by``: the owner whose ``release(keep_for=)`` keeps it taken, by no one, on a
    majority (``None``: not kept), with ``ttl`` what a majority of those slots has left."""

    ttl: float | None
    holders: dict[str, int]
    kept_by: str | None = None

    @property
    def locked(self) -> bool:
        return bool(self.holders) or self.kept_by is not None


def _decode_status(keys: LockKeys, reply: Any) -> Status:
    """Decode one master's ``lock_status.lua`` reply with the single-master decoder."""
    op = lock.status(keys)
    next(op)
    try:
        op.send(reply)
    except StopIteration as stop:
        decoded: Status = stop.value
        return decoded
    raise AssertionError("lock.status wanted more than one reply")


def combine_status(statuses: Sequence[Status | None], masters: int) -> MajorityStatus:
    """Merge per-master statuses (``None``: no answer) into what a majority says."""
    owners = {owner for s in statuses if s is not None for owner in s.holders}
    holders: dict[str, int] = {}
    ttl: float | None = None
    for owner in sorted(owners):
        counts = [s.holders.get(owner, 0) if s is not None else 0 for s in statuses]
        count = int(majority_value(counts, masters))
        if count <= 0:
            continue
        holders[owner] = count
        ttls = [
            s.ttl for s in statuses if s is not None and s.ttl is not None and owner in s.holders
        ]
        owner_ttl = majority_value(ttls, masters)
        ttl = owner_ttl if ttl is None else max(ttl, owner_ttl)
    if holders:
        return MajorityStatus(ttl=ttl, holders=holders)
    for owner in sorted({s.kept_by for s in statuses if s is not None and s.kept_by}):
        kept = [s.ttl for s in statuses if s is not None and s.kept_by == owner and s.ttl]
        if len(kept) >= quorum(masters):
            return MajorityStatus(ttl=majority_value(kept, masters), holders={}, kept_by=owner)
    return MajorityStatus(ttl=None, holders={})


def status(
    keys: LockKeys, masters: Sequence[str], *, master_timeout: float
) -> RedlockOperation[MajorityStatus]:
    """Ask every master; ``QuorumError`` when fewer than a majority answer."""
    n = len(masters)
    call = next(lock.status(keys))
    assert isinstance(call, Call)
    replies = yield Fanout((call,) * n, master_timeout)
    statuses = [None if _failed(r) else _decode_status(keys, r) for r in replies]
    answered = sum(1 for s in statuses if s is not None)
    if answered < quorum(n):
        raise quorum_error(
            f"lock {keys.name!r}: status answered by {answered} of {n} masters",
            keys,
            None,
            masters,
            replies,
            _describe_answer,
        )
    return combine_status(statuses, n)


def force_release(
    keys: LockKeys, masters: Sequence[str], *, master_timeout: float
) -> RedlockOperation[bool]:
    """Delete the lock on every master whoever holds it; ``True`` if any master had it.
    ``QuorumError`` when fewer than a majority could be reached."""
    n = len(masters)
    call = next(lock.force_release(keys))
    assert isinstance(call, Call)
    replies = yield Fanout((call,) * n, master_timeout)
    answered = [r for r in replies if not _failed(r)]
    if len(answered) < quorum(n):
        raise quorum_error(
            f"lock {keys.name!r}: force-release reached {len(answered)} of {n} masters",
            keys,
            None,
            masters,
            replies,
            lambda r: "deleted" if int(r) else "was free",
        )
    return any(int(r) == 1 for r in answered)
