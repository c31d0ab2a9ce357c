"""The reentrant lock's operations and its local record of holds."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import InvalidArgumentError, LeaseLostError, ReplicaError, ServerUnavailableError
from . import codes, scripts
from .backoff import LateGrants, Outage
from .keys import FENCE_FIELD, OWN_FIELDS, UNLOCK_MESSAGE, LockKeys, PubSub, kept_by
from .requests import Call, Handed, Operation, Replication, Sleep, Subscribe, WaitWake

RECEIPT_MS = 30_000
"""How long a final release stays recognisable to a retry (a literal in lock_release.lua)."""

RECHECK = 5.0
"""A waiter re-checks at least this often, whatever the holder's TTL: it keeps its place in
line alive and bounds the cost of a lost wake-up or a waiter that died on its turn."""

PLACE_MS = 4 * int(RECHECK * 1000)
"""How long a semaphore's or latch's waiter's registration (in its ``waiters`` key) lasts
without a re-check (then it lapses: a dead waiter is never counted for longer). A place in a
lock's line needs none: a place goes when its turn comes, and a dead client's when a free
lock meets it."""

OUTAGE_TOLERANCE = 10.0
"""A waiter rides out a server outage (restart, failover) for this long before it raises."""

TURN_OF_ANOTHER = -2
"""The TTL a fair lock's acquire answers when the lock is free but another waiter's turn."""

OUTSIDERS_TURN_MS = 10
"""How long a free lock is left to clients outside the line (Redisson's waiters, woken by
"0", which take it within a round trip) after a release that would have handed it on for the
second time in a row while such clients listen: they get their turn, and the line moves on
when none takes it (``lock_release.lua``; redlease callers meanwhile see "another's turn")."""

TURN_WAIT = 0.02
"""First pause before looking again at a free fair lock that is another waiter's turn."""

MIN_WAIT = 0.001
"""The shortest wait between two tries (a TTL of 0 ms must not make a waiter spin)."""

MAX_CORRECTIONS = 3
"""How many times one acquire follows the server's count after a LOST reply."""


def drift(lease: float) -> float:
    """Clock-drift allowance for a lease (the Redlock rule: 1% plus 2 ms)."""
    return lease * 0.01 + 0.002


def to_ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class GoneHold:
    """How one acquire call follows LOST replies (the caller's hold is gone or smaller on the
    server): it goes on from the server's count, at most ``MAX_CORRECTIONS`` times, and calls
    ``on_gone`` when the hold is gone entirely."""

    def __init__(self, on_gone: Callable[[], None]) -> None:
        self._left = MAX_CORRECTIONS
        self._on_gone = on_gone

    def follow(self, count: int, error: Callable[[], LeaseLostError]) -> int:
        """The count to go on from; ``error()`` is raised once the count keeps changing."""
        if self._left == 0:
            raise error()
        self._left -= 1
        if count == 0:
            self._on_gone()
        return count


@dataclass(frozen=True)
class Acquired:
    """A granted acquisition: the owner's hold count now and the lease left on the key."""

    count: int
    ttl: float
    requested_at: float
    token: int


def grant_undo(held: int, give_back: Callable[[int, int], Call]) -> Callable[[Any], Call | None]:
    """An acquire call's ``undo``: the hold it made (``give_back(count, token)``; 0 for a
    reply without a token), if it made one."""

    def undo(reply: Any) -> Call | None:
        code, count = int(reply[0]), int(reply[1])
        if code == codes.GRANTED and count == held + 1:
            return give_back(count, int(reply[3]) if len(reply) > 3 else 0)
        return None

    return undo


def _acquire_call(
    keys: LockKeys,
    owner: str,
    held: int,
    lease: float,
    join_line: bool,
    wait_id: str,
    fair: bool = False,
    handover: bool = False,
    token: int = 0,
) -> Call:
    undo = grant_undo(
        held,
        lambda count, granted: release_call(
            keys, owner, count, request_id=uuid.uuid4().hex, token=granted
        ),
    )
    return Call(
        scripts.LOCK_ACQUIRE,
        (keys.name, keys.line, keys.places, keys.fence),
        (
            to_ms(lease),
            owner,
            held,
            int(join_line),
            int(fair),
            place_lease(lease, handover),
            wait_id,
            keys.handover_prefix,
            keys.pubsub.command,
            token,
        ),
        undo=undo,
    )


def place_lease(lease: float, handover: bool) -> str:
    """How a release hands the lock to a waiter's place in line: "w<ms>", with the releaser's
    hand-over window as first lease, which the watchdog lengthens to ``lease``, or "<ms>", with
    the waiter's own fixed lease."""
    return f"w{to_ms(lease)}" if handover else str(to_ms(lease))


def release_call(
    keys: LockKeys,
    owner: str,
    held: int,
    *,
    request_id: str,
    token: int,
    handover_ms: int = 0,
    unsure: bool = False,
    quiet: bool = False,
) -> Call:
    """The release script call; ``token``: the owner's hold's (the release acts on no other
    hold; 0: not known, as a Redlock owner's on each master); ``handover_ms`` hands a freed
    lock to the first waiter; ``unsure``: the owner's last re-entry may have landed unseen
    (its count may be one more); ``quiet``: publish nothing (a spin lock's release: no
    PUBLISH needed; never with ``handover_ms``)."""
    return Call(
        scripts.LOCK_RELEASE,
        (keys.name, keys.channel, keys.receipts, keys.line, keys.places, keys.fence),
        (
            owner,
            held,
            request_id,
            handover_ms,
            keys.pubsub.command,
            keys.handover_prefix,
            int(unsure),
            OUTSIDERS_TURN_MS if handover_ms > 0 else 0,
            token,
            int(quiet),
        ),
    )


def leave_call(keys: LockKeys, owner: str, wait_id: str, place: str) -> Call:
    """The acquire call ``wait_id`` gives up: leave the line (``place``: its place's hand-over
    lease), and give back a hold made for that call (a hand-over, a grant whose reply was
    lost)."""
    return Call(
        scripts.LOCK_LEAVE,
        (keys.name, keys.channel, keys.line, keys.receipts),
        (owner, keys.pubsub.command, wait_id, place),
    )


class Layout:
    """Which keys a reentrant lock uses and how its operations reach them: the calls that
    ``acquire``, ``release``, ``status`` and ``force_release`` send, and where a waiter
    listens. This one is redlease's own: Redisson's RLock hash and unlock channel, plus a
    line of redlease's own (see ``lock_acquire.lua``). ``fair.RedissonFairLayout`` runs the
    same operations on Redisson's ``RedissonFairLock`` keys instead."""

    def keys(self, name: str, pubsub: PubSub) -> LockKeys:
        return LockKeys.for_name(name, pubsub)

    def acquire_call(
        self,
        keys: LockKeys,
        owner: str,
        *,
        held: int,
        lease: float,
        join_line: bool,
        wait_id: str,
        timeout: float | None,
        fair: bool,
        handover: bool,
        token: int = 0,
    ) -> Call:
        """One try (its ``undo`` gives back a hold it made); ``join_line``: take a place in line
        if the lock cannot be had; ``timeout``: the whole acquire's, as the caller gave it;
        ``token``: the token of the hold a re-entry joins (0 on a first acquire)."""
        return _acquire_call(
            keys, owner, held, lease, join_line, wait_id, fair=fair, handover=handover, token=token
        )

    def release_call(
        self,
        keys: LockKeys,
        owner: str,
        held: int,
        *,
        request_id: str,
        token: int,
        handover_ms: int = 0,
        unsure: bool = False,
        quiet: bool = False,
    ) -> Call:
        return release_call(
            keys,
            owner,
            held,
            request_id=request_id,
            token=token,
            handover_ms=handover_ms,
            unsure=unsure,
            quiet=quiet,
        )

    def leave_call(
        self, keys: LockKeys, owner: str, wait_id: str, timeout: float | None, place: str
    ) -> Call:
        """Give up the wait ``wait_id`` (``place``: its place's hand-over lease)."""
        return leave_call(keys, owner, wait_id, place)

    def listen(self, keys: LockKeys, owner: str) -> tuple[str, str | None]:
        """The channels a waiter listens on: the lock's, and one of its own (or ``None``)."""
        return keys.channel, keys.handover(owner)

    def status_call(self, keys: LockKeys) -> Call:
        return Call(scripts.LOCK_STATUS, (keys.name, keys.line), ())

    def force_release_call(self, keys: LockKeys) -> Call:
        return Call(
            scripts.LOCK_FORCE_RELEASE,
            (keys.name, keys.channel, keys.receipts),
            (UNLOCK_MESSAGE, keys.pubsub.command, keys.holder_prefix),
        )


REDLEASE = Layout()
"""redlease's own layout (the default)."""


class Listening:
    """How ``acquire``'s waiter waits between two tries: this one, the lock's, listens for a
    release (pub/sub) and takes a place in the lock's line; ``spin.Backoff`` sleeps instead.

    ``start`` runs before the first try of a blocking call. After each try that did not get
    the lock and left the caller time, ``ready`` answers whether to try again at once (the
    waiter just began to listen), else ``pause`` waits (given the holder's lease left,
    ``hint``, and the caller's time left) and answers what woke the waiter (a ``Handed``
    grant, or anything else for a plain re-check). ``listening``: the waiter waits for the
    lock (an outage is then ridden out, up to ``OUTAGE_TOLERANCE``)."""

    in_line = True
    """A blocking try takes a place in the lock's line, which the waiter leaves at its end."""

    def __init__(self, subscribe: Subscribe) -> None:
        self._subscribe = subscribe
        self.listening = False

    def start(self) -> Operation[None]:
        # Listening before the first try costs nothing when the channel is already
        # subscribed, and spares a waiter the subscribe-then-retry round trips.
        self.listening = bool((yield dataclasses.replace(self._subscribe, only_if_live=True)))

    def ready(self) -> Operation[bool]:
        if self.listening:
            return False
        # Subscribe, then try again at once: a release between our try and the
        # subscription would otherwise go unheard until the TTL ran out.
        yield self._subscribe  # listens, or raises
        self.listening = True
        return True

    def pause(self, hint: float, remaining: float) -> Operation[Any]:
        return (yield WaitWake(min(remaining, hint, RECHECK)))


class WaitStep(Protocol):
    """What ``acquire`` needs of a way to wait (``Listening``, ``spin.Backoff``)."""

    in_line: bool
    listening: bool

    def start(self) -> Operation[None]: ...

    def ready(self) -> Operation[bool]: ...

    def pause(self, hint: float, remaining: float) -> Operation[Any]: ...


def acquire(
    keys: LockKeys,
    owner: str,
    *,
    held: int,
    lease: float,
    blocking: bool,
    timeout: float | None,
    wait_id: str,
    token: int = 0,
    fair: bool = False,
    handover: bool = False,
    handover_ms: int = 0,
    clock: Callable[[], float] = time.monotonic,
    on_gone: Callable[[], None] = lambda: None,
    layout: Layout = REDLEASE,
    wait: Callable[[Subscribe], WaitStep] = Listening,
) -> Operation[Acquired | None]:
    """Try, and while allowed wait for a wake-up and try again; ``None`` when not acquired.

    A blocking caller that finds the lock held takes a place in line (server side, by arrival);
    a release hands the lock to the first waiter and wakes only that one. A ``fair``
    lock also keeps a newcomer from taking a free lock ahead of a live waiter in line.
    With ``handover`` (a lease the watchdog renews) the hand-over's first lease is the
    releaser's hand-over window; without, the caller's own ``lease``. The wake-up carries the
    grant and no further request is needed (the lease counts from before our last request,
    which the hand-over followed).
    Success needs lease time left by the local clock, counted from before the request was
    sent, minus the drift allowance; a grant that arrives too late is given back.
    A wake-up is only a hint: every wait is bounded by the holder's TTL, ``RECHECK`` and our
    own deadline. A waiter rides out a server outage of up to ``OUTAGE_TOLERANCE``; a retried
    request never counts a second hold. Giving up leaves the line.

    ``token`` is the fencing token of the hold a re-entry joins (``held > 0``): the server
    counts the re-entry only on that hold, never on another hold of the same owner field (a
    stale copy after a failover); when it is not there, the acquire goes on as a first one.
    ``wait_id`` is unique to this call: the server records it in the caller's place in line
    and in a hold it makes for the call, and a hand-over message echoes it, so a message that
    arrives late (after this call got the lock by its own re-check, or gave up) is never taken
    for a grant by a later call. Nor is a hand-over made before this call's last request
    (its lease may have run out although the local check, counted from before that request,
    passes) or one this call gave back: a grant is taken only with a token above every
    token and fence counter this call saw in a reply. An owner whose hold is gone on the
    server (its lease ran out, or it was force-released) takes the lock afresh, as Redisson
    does; ``on_gone`` is called when a reply shows that. ``layout`` builds the calls and
    names the channels (redlease's own, or Redisson's fair lock's: ``fair.py``).

    A hand-over that comes after this call gave up (its leave was lost: a frozen link) is
    given back by the shell at once, as a release of the hold with the hand-over's token
    (only that hold: never one the owner has since, whose token differs) that hands the lock
    on to the next in line (``handover_ms``: the window, as the client's releases use it).

    ``wait`` makes the waiter's way to wait from the subscription it would make: the lock's
    (``Listening``), or a spin lock's pauses (``spin.Backoff``: no line, no subscription).
    """
    deadline = None if timeout is None else clock() + timeout
    leave = layout.leave_call(keys, owner, wait_id, timeout, place_lease(lease, handover))

    def grant_back(handed: Handed) -> Call:
        return layout.release_call(
            keys,
            owner,
            1,
            request_id=uuid.uuid4().hex,
            token=handed.token,
            handover_ms=handover_ms,
        )

    gone = GoneHold(on_gone)
    seen = 0  # the highest token or fence counter a reply of this call carried
    turn_wait = TURN_WAIT  # back-off while a free fair lock is another waiter's turn
    late = LateGrants()  # grants in a row that came too late, and the pause after them
    # We listen on the lock's channel and on our own: where a release hands it over to us.
    channel, private = layout.listen(keys, owner)
    waiter = wait(Subscribe(channel, owner, leave, False, private, wait_id, grant_back))
    if blocking:
        yield from waiter.start()
    join_line = blocking and waiter.in_line
    outage = Outage(clock, deadline, OUTAGE_TOLERANCE)
    while True:
        sent_at = clock()
        try:
            reply = yield layout.acquire_call(
                keys,
                owner,
                held=held,
                lease=lease,
                join_line=join_line,
                wait_id=wait_id,
                timeout=timeout,
                fair=fair,
                handover=handover,
                token=token,
            )
        except ReplicaError as exc:
            # not confirmed by enough replicas: a failover could lose it, so give it back
            reply = exc.reply
            if isinstance(reply, list) and int(reply[0]) == codes.GRANTED and reply[1] == held + 1:
                yield layout.release_call(
                    keys, owner, held + 1, request_id=uuid.uuid4().hex, token=int(reply[3])
                )
            raise
        except ServerUnavailableError:
            pause = outage.failed(listening=waiter.listening)
            if pause is None:
                if held == 0:
                    # a grant whose reply was lost must not hold the lock for a whole lease:
                    # give back a hold made for this call, if the server can be reached
                    with contextlib.suppress(ServerUnavailableError):
                        yield leave
                raise
            yield Sleep(pause)
            continue
        outage.ended()
        code, count, ttl_ms = int(reply[0]), int(reply[1]), int(reply[2])
        seen = max(seen, int(reply[3]))
        if code == codes.GRANTED:
            # the lease left on the key: less than asked when a retry finds a hand-over
            left = lease if ttl_ms < 0 else min(lease, ttl_ms / 1000)
            if clock() - sent_at < left - drift(left):
                return Acquired(
                    count=count, ttl=ttl_ms / 1000, requested_at=sent_at, token=int(reply[3])
                )
            yield layout.release_call(
                keys, owner, count, request_id=uuid.uuid4().hex, token=int(reply[3])
            )
            ttl_ms = 0
            late.came()
        elif code == codes.LOST:
            if count == 0:
                token = 0  # (the hold there, if any, is not the caller's: a first acquire now)
            held = gone.follow(
                count,
                lambda: LeaseLostError(
                    f"lock {keys.name!r}: owner {owner}'s hold count keeps changing",
                    name=keys.name,
                    owner=owner,
                ),
            )
            continue
        if not blocking:
            return None
        remaining = math.inf if deadline is None else deadline - clock()
        if remaining <= 0:
            if waiter.in_line:
                yield leave
            return None
        if (yield from waiter.ready()):
            continue
        if code == codes.GRANTED:  # it came too late: pause before the next try
            if late.must_sleep:
                yield Sleep(late.pause(remaining))
                continue
            holder_left = late.pause()
        elif ttl_ms == TURN_OF_ANOTHER:
            # a free fair lock that the first waiter in line is about to take: look again
            # soon (it has a new lease then), backing off should that waiter be dead
            holder_left, turn_wait = turn_wait, min(RECHECK, turn_wait * 2)
        else:
            holder_left = RECHECK if ttl_ms < 0 else max(MIN_WAIT, ttl_ms / 1000)
            turn_wait = TURN_WAIT
        if code != codes.GRANTED:
            late.reset()
        woken = yield from waiter.pause(holder_left, remaining)
        if isinstance(woken, Handed) and woken.wait == wait_id and woken.token > seen and not held:
            ttl = woken.lease_ms / 1000
            if clock() - sent_at < ttl - drift(ttl):
                return Acquired(count=1, ttl=ttl, requested_at=sent_at, token=woken.token)
            # too little of it left to be sure: the next try finds it ours, with its TTL


def release(
    keys: LockKeys,
    owner: str,
    *,
    held: int,
    request_id: str,
    token: int,
    handover_ms: int = 0,
    unsure: bool = False,
    layout: Layout = REDLEASE,
    quiet: bool = False,
) -> Operation[int]:
    """Release one hold; returns how many holds the owner keeps (0: the lock is free).
    ``unsure``: a re-entry whose outcome is unknown may have counted one hold more, which
    goes too (the caller was told that acquire failed). ``quiet``: the release publishes
    nothing (a spin lock's)."""
    reply = yield layout.release_call(
        keys,
        owner,
        held,
        request_id=request_id,
        token=token,
        handover_ms=handover_ms,
        unsure=unsure,
        quiet=quiet,
    )
    code, remaining = int(reply[0]), int(reply[1])
    if code != codes.RELEASED:
        raise LeaseLostError(
            f"lock {keys.name!r}: owner {owner} no longer holds it "
            "(its lease expired or it was force-released)",
            name=keys.name,
            owner=owner,
        )
    return remaining


def force_release(keys: LockKeys, layout: Layout = REDLEASE) -> Operation[bool]:
    reply = yield layout.force_release_call(keys)
    return bool(int(reply))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Status:
    """What the server says about a lock: TTL (seconds; ``None`` when free), holders and how
    many waiters are in line; ``kept_by``: the owner whose ``release(keep_for=)`` keeps it
    taken, by no one, until its TTL runs out (``None``: not kept)."""

    ttl: float | None
    holders: dict[str, int]
    waiters: int = 0
    token: int | None = None
    kept_by: str | None = None

    @property
    def locked(self) -> bool:
        return self.ttl is not None


def status(keys: LockKeys, layout: Layout = REDLEASE) -> Operation[Status]:
    reply = yield layout.status_call(keys)
    ttl_ms, waiters = int(reply[0]), int(reply[1])
    pairs = reply[2:]
    fields = {_text(pairs[i]): pairs[i + 1] for i in range(0, len(pairs), 2)}
    token = fields.get(FENCE_FIELD)
    # the fencing token and the other redlease fields are not holders, nor is a kept lock's
    kept = min((o for o in map(kept_by, fields) if o is not None), default=None)
    try:
        holders = {
            k: int(v)
            for k, v in fields.items()
            if not k.startswith(OWN_FIELDS) and kept_by(k) is None
        }
    except ValueError:
        raise InvalidArgumentError(f"key {keys.name!r} is a hash but not a lock") from None
    if ttl_ms == -2 or not (holders or kept):
        return Status(ttl=None, holders={}, waiters=waiters)
    ttl = math.inf if ttl_ms == -1 else ttl_ms / 1000
    return Status(
        ttl=ttl,
        holders=holders,
        waiters=waiters,
        token=None if token is None else int(token),
        kept_by=None if holders else kept,
    )


# --- the local record of holds -------------------------------------------------------------


@dataclass
class Hold:
    """One owner's holds on one lock: a lease per hold (``None``: renewed by the watchdog)."""

    keys: LockKeys
    owner: str
    epoch: int
    renewed_at: float
    token: int
    acquired_at: float = 0.0
    """When the first of these holds was granted (monotonic clock)."""
    leases: list[float | None] = field(default_factory=list)
    replication: Replication | None = None
    """Replica acknowledgements its renewals wait for."""
    release_id: str | None = None
    """The request id of a release whose outcome is unknown (a retry must reuse it)."""
    unsure: bool = False
    """A re-entry failed with an unknown outcome: the server may count one hold more."""
    releasing: bool = False
    """Set while the final release is on the wire, so the watchdog does not call it lost."""
    listeners: list[Callable[[LeaseLostError], None]] = field(default_factory=list)
    renew_by: float | None = None
    """When the watchdog must renew it, if sooner than its round (a hand-over's short lease)."""

    @property
    def count(self) -> int:
        return len(self.leases)

    @property
    def watched(self) -> bool:
        return any(lease is None for lease in self.leases)


class HoldTable:
    """Holds that the server confirmed, by (lock name, owner). Not thread-safe by itself."""

    def __init__(self) -> None:
        self._holds: dict[tuple[str, str], Hold] = {}
        self._epochs = itertools.count(1)

    def get(self, name: str, owner: str) -> Hold | None:
        return self._holds.get((name, owner))

    def count(self, name: str, owner: str) -> int:
        hold = self._holds.get((name, owner))
        return hold.count if hold else 0

    def granted(self, keys: LockKeys, owner: str, acquired: Acquired, lease: float | None) -> Hold:
        """Record a grant; a first hold (count 1) replaces a record the server no longer has."""
        count = acquired.count
        hold = self._holds.get((keys.name, owner))
        if hold is None or count == 1:
            hold = Hold(
                keys=keys,
                owner=owner,
                epoch=next(self._epochs),
                renewed_at=acquired.requested_at,
                token=acquired.token,
                acquired_at=acquired.requested_at,
            )
            self._holds[(keys.name, owner)] = hold
        hold.leases.append(lease)
        del hold.leases[: max(0, hold.count - count)]  # the server's count is the truth
        hold.unsure = False
        return hold

    def released(self, name: str, owner: str, remaining: int) -> None:
        hold = self._holds.get((name, owner))
        if hold is None:
            return
        hold.leases.pop()
        del hold.leases[: max(0, hold.count - remaining)]  # the server's count is the truth
        if not hold.leases:
            del self._holds[(name, owner)]

    def drop(self, name: str, owner: str, epoch: int | None = None) -> Hold | None:
        """Forget a hold (lost or given up); with ``epoch``, only that acquisition episode."""
        hold = self._holds.get((name, owner))
        if hold is None or (epoch is not None and hold.epoch != epoch):
            return None
        del self._holds[(name, owner)]
        return hold

    def watched(self) -> list[Hold]:
        return [h for h in self._holds.values() if h.watched and not h.releasing]

    def renew_due(self) -> float | None:
        """The earliest ``renew_by`` of the watched holds (``None``: none is due early)."""
        due = [h.renew_by for h in self.watched() if h.renew_by is not None]
        return min(due) if due else None

    def holds(self) -> list[Hold]:
        return list(self._holds.values())

    def clear(self) -> None:
        self._holds.clear()
