"""The read-write lock as pure operations: many readers or one writer, reentrant on both sides.

Not Redisson's RReadWriteLock layout (that one keeps a mode field and per-reader timeout keys
whose names the scripts build); redlease and Redisson clients do not exclude each other on it.
Every key below shares the lock name's cluster hash slot:

- ``redlease:rw:{name}``: the writer's hold, a hash {writer, count, deadline, token};
- ``redlease:rw-readers:{name}``: read hold counts, a hash {owner field -> count};
- ``redlease:rw-leases:{name}``: reader leases, a zset {owner field -> lease end, ms}, so a
  reader that is not renewed (it crashed) lapses by itself, whatever the other readers do;
- ``redlease:rw-tokens:{name}``: the fencing token of each reader's hold;
- ``redlease:rw-line:{name}`` and ``redlease:rw-places:{name}``: the writers waiting, by arrival,
  each with a place that lapses unless its waiter re-checks in time;
- ``redlease:rw-fence:{name}``: the last fencing token handed out (never expires).

Deadlines are the server's clock (``TIME``). Policy: writer preference. While a writer has a
live place in line, new readers wait (a reader's re-entry and the writer's own downgrade do
not), and a freed lock goes to the first writer in line; readers go when the line is empty.
So a stream of readers cannot starve a writer; a stream of writers can delay readers.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import LeaseLostError, LockUpgradeError, ReplicaError, ServerUnavailableError
from .backoff import LateGrants, Outage
from .fair import first_hold_undo
from .keys import CLASSIC, PubSub, same_slot_key
from .lock import OUTAGE_TOLERANCE, Acquired, GoneHold, Status, drift, grant_undo, to_ms
from .requests import Call, Operation, Replication, Sleep, Subscribe, WaitWake
from .scripts import Script
from .watchdog import OwnRenewalKeys

READ = "read"
WRITE = "write"
SIDES = (READ, WRITE)

RW_READ_ACQUIRE = Script.load("rw_read_acquire")
RW_WRITE_ACQUIRE = Script.load("rw_write_acquire")
RW_READ_RELEASE = Script.load("rw_read_release")
RW_WRITE_RELEASE = Script.load("rw_write_release")
RW_LEAVE = Script.load("rw_leave")
RW_RENEW = Script.load("rw_renew")
RW_STATUS = Script.load("rw_status")
RW_FORCE_RELEASE = Script.load("rw_force_release")

SCRIPTS = (
    RW_READ_ACQUIRE,
    RW_WRITE_ACQUIRE,
    RW_READ_RELEASE,
    RW_WRITE_RELEASE,
    RW_LEAVE,
    RW_RENEW,
    RW_STATUS,
    RW_FORCE_RELEASE,
)

# reply codes (first element of the scripts' replies)
GRANTED = 1
HELD = 0
LOST = -1
UPGRADE = -2
RELEASED = 1

WAKE_ALL = "1"
"""Published when every waiter should re-check (a freed write lock with nobody in line)."""

RECHECK = 2.0
"""A waiter re-checks at least this often: it keeps a writer's place in line alive, and
bounds the cost of a lost wake-up."""

PLACE_MS = 4 * int(RECHECK * 1000)
"""How long a waiting writer's place lasts without a re-check. A writer that died while
waiting holds back new readers for at most this long."""

RECEIPT_MS = 30_000
"""How long a final release stays recognisable to a retry (a literal in the release scripts)."""


# --- keys -----------------------------------------------------------------------------------


class RwLayout(Protocol):
    """What the operations below need of a read-write lock's keys: its names, and the script
    calls of its data layout (redlease's ``RwKeys``, or Redisson's, ``RedissonRwKeys``)."""

    @property
    def name(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def pubsub(self) -> PubSub: ...
    def label(self, side: str) -> str: ...
    def side_keys(self, side: str) -> OwnRenewalKeys: ...
    def acquire_call(
        self,
        side: str,
        owner: str,
        held: int,
        lease: float,
        join_line: bool,
        wait_id: str,
        *,
        token: int = 0,
    ) -> Call: ...
    def release_call(
        self, side: str, owner: str, held: int, *, request_id: str, token: int, unsure: bool = False
    ) -> Call: ...
    def leave_call(
        self, side: str, owner: str, wait_id: str, *, give_back: bool = True
    ) -> Call | None: ...
    def force_release_call(self, side: str) -> Call: ...
    def status_call(self, owner: str) -> Call: ...
    def parse_status(self, owner: str, reply: Sequence[Any]) -> RwStatus: ...


class RwNames:
    """What both layouts name alike: each side's label and release receipts (the keys are
    redlease's own in both, in the lock's slot)."""

    name: str
    receipt_prefix: str

    def receipt(self, side: str, owner: str) -> str:
        """The key that remembers ``owner``'s last final release on ``side`` (for safe
        retries): one per side, so that a final release of one side never hides a retried
        release of the other."""
        return f"{self.receipt_prefix}{side}:{owner}"

    def label(self, side: str) -> str:
        """How one side's holds are named in the client's hold table, events and logs."""
        return f"{self.name} ({side})"


@dataclass(frozen=True)
class RwKeys(RwNames):
    """The keys and channel of one read-write lock (all in the name's hash slot)."""

    name: str
    writer: str
    readers: str
    leases: str
    tokens: str
    line: str
    places: str
    fence: str
    channel: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    """How releases publish on ``channel`` (the client's; see ``PubSub``)."""
    holder_prefix: str = field(default="", kw_only=True)
    """Prefix of each client's own channel where its holds hear of a force release."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> RwKeys:
        return cls(
            name=name,
            writer=same_slot_key(name, "redlease:rw:"),
            readers=same_slot_key(name, "redlease:rw-readers:"),
            leases=same_slot_key(name, "redlease:rw-leases:"),
            tokens=same_slot_key(name, "redlease:rw-tokens:"),
            line=same_slot_key(name, "redlease:rw-line:"),
            places=same_slot_key(name, "redlease:rw-places:"),
            fence=same_slot_key(name, "redlease:rw-fence:"),
            channel=same_slot_key(name, "redlease:rw-channel:"),
            receipt_prefix=same_slot_key(name, "redlease:rw-released:", ":"),
            pubsub=pubsub,
            holder_prefix=rw_holder_prefix(name),
        )

    def acquire_call(
        self,
        side: str,
        owner: str,
        held: int,
        lease: float,
        join_line: bool,
        wait_id: str,
        *,
        token: int = 0,
    ) -> Call:
        return acquire_call(self, side, owner, held, lease, join_line, wait_id, token=token)

    def release_call(
        self, side: str, owner: str, held: int, *, request_id: str, token: int, unsure: bool = False
    ) -> Call:
        return release_call(
            self, side, owner, held, request_id=request_id, token=token, unsure=unsure
        )

    def leave_call(
        self, side: str, owner: str, wait_id: str, *, give_back: bool = True
    ) -> Call | None:
        """A writer leaves the line (only writers wait in line); with ``give_back`` either
        side gives back a first hold made for the call ``wait_id`` (``None``: nothing to do)."""
        if side == READ and not give_back:
            return None
        return leave_call(self, side, owner, wait_id)

    def force_release_call(self, side: str) -> Call:
        return Call(
            RW_FORCE_RELEASE,
            (self.writer, self.readers, self.leases, self.tokens, self.channel),
            (side, self.pubsub.command, self.holder_prefix),
        )

    def status_call(self, owner: str) -> Call:
        return Call(
            RW_STATUS,
            (self.writer, self.readers, self.leases, self.tokens, self.places),
            (owner,),
        )

    def parse_status(self, owner: str, reply: Sequence[Any]) -> RwStatus:
        return parse_status(reply)

    def side_keys(self, side: str) -> SideKeys:
        """The keys of one side's holds in the client's hold table (renewed by ``rw_renew``)."""
        return SideKeys(
            name=self.label(side),
            channel=self.channel,
            line=self.line,
            places=self.places,
            fence=self.fence,
            receipt_prefix=f"{self.receipt_prefix}{side}:",
            rw=self,
            side=side,
            pubsub=self.pubsub,
            holder_prefix=self.holder_prefix,
        )


def rw_holder_prefix(name: str) -> str:
    """Prefix of the channels where a read-write lock's holders hear of a force release
    (one per client, in the lock's slot; both layouts, both sides)."""
    return same_slot_key(name, "redlease:rw-holder:", ":")


@dataclass(frozen=True)
class SideKeys(OwnRenewalKeys):
    """One side of a read-write lock, as the client's hold table and watchdog see it: ``name``
    is the side's label, and the watchdog renews its holds with ``rw_renew``."""

    rw: RwKeys
    side: str

    def renew_call(
        self,
        owners: Sequence[str],
        lease_ms: int,
        replication: Replication | None,
        *,
        tokens: Sequence[int],
    ) -> Call:
        rw = self.rw
        return Call(
            RW_RENEW,
            (rw.writer, rw.readers, rw.leases, rw.tokens),
            (lease_ms, self.side, *owners, *tokens),
            replication=replication,
        )


# --- acquire --------------------------------------------------------------------------------


def upgrade_error(keys: RwLayout, owner: str) -> LockUpgradeError:
    """The write side asked for by an owner that the server says holds a read hold."""
    return LockUpgradeError(
        f"read-write lock {keys.name!r}: owner {owner} holds the read lock and asked for the "
        "write lock, which would wait for its own read hold forever; release the read lock "
        "first (the other way round, taking the read lock while writing, is allowed)",
        name=keys.label(WRITE),
        owner=owner,
    )


def release_undo(
    keys: RwLayout, side: str, owner: str, held: int, wait_id: str
) -> Callable[[Any], Call | None]:
    """What gives back the hold that an acquire try made for a caller who no longer wants
    it (it was cancelled with the reply on its way). A first hold goes back by the call's
    wait id (the leave call), so that a give-back delivered late never frees a hold that a
    later call of the owner was granted meanwhile; a re-entry's, by its count and the token
    the grant reported (the hold it joined)."""
    if held == 0:
        give_back = keys.leave_call(side, owner, wait_id, give_back=True)
        assert give_back is not None  # (a layout always has one to give a hold back)
        return first_hold_undo(give_back)
    return grant_undo(
        held,
        lambda count, token: keys.release_call(
            side, owner, count, request_id=uuid.uuid4().hex, token=token
        ),
    )


def acquire_call(
    keys: RwKeys,
    side: str,
    owner: str,
    held: int,
    lease: float,
    join_line: bool,
    wait_id: str,
    *,
    token: int = 0,
) -> Call:
    """One try of the acquire call ``wait_id``; ``token``: the token of the hold a re-entry
    joins (the server counts it on no other hold of the owner field; ignored when ``held`` is
    0). If the caller is cancelled after the server granted it, the undo gives the hold back."""
    undo = release_undo(keys, side, owner, held, wait_id)

    if side == READ:
        return Call(
            RW_READ_ACQUIRE,
            (keys.writer, keys.readers, keys.leases, keys.tokens, keys.places, keys.fence),
            (to_ms(lease), owner, held, wait_id, token),
            undo=undo,
        )
    return Call(
        RW_WRITE_ACQUIRE,
        (
            keys.writer,
            keys.readers,
            keys.leases,
            keys.tokens,
            keys.line,
            keys.places,
            keys.fence,
        ),
        (to_ms(lease), owner, held, PLACE_MS if join_line else 0, wait_id, token),
        undo=undo,
    )


def release_call(
    keys: RwKeys,
    side: str,
    owner: str,
    held: int,
    *,
    request_id: str,
    token: int,
    unsure: bool = False,
) -> Call:
    """The release script call of ``side``; ``token``: the owner's hold's (the release acts
    on no other hold of the owner field); ``unsure``: the owner's last re-entry on that side
    may have landed unseen (its count may be one more), and that hold goes too."""
    args = (owner, held, request_id, keys.pubsub.command, int(unsure), token)
    if side == READ:
        return Call(
            RW_READ_RELEASE,
            (
                keys.writer,
                keys.readers,
                keys.leases,
                keys.tokens,
                keys.line,
                keys.places,
                keys.channel,
                keys.receipt(READ, owner),
            ),
            args,
        )
    return Call(
        RW_WRITE_RELEASE,
        (
            keys.writer,
            keys.leases,
            keys.line,
            keys.places,
            keys.channel,
            keys.receipt(WRITE, owner),
        ),
        args,
    )


def leave_call(keys: RwKeys, side: str, owner: str, wait_id: str) -> Call:
    """The acquire call ``wait_id`` on ``side`` gives up: a writer leaves the line (and wakes
    whom its place held back), and a first hold made for that call goes back."""
    return Call(
        RW_LEAVE,
        (
            keys.writer,
            keys.readers,
            keys.leases,
            keys.tokens,
            keys.line,
            keys.places,
            keys.channel,
        ),
        (owner, keys.pubsub.command, side, wait_id),
    )


def _lost(keys: RwLayout, side: str, owner: str, what: str) -> LeaseLostError:
    return LeaseLostError(
        f"read-write lock {keys.name!r}: the {side} hold of owner {owner} {what}",
        name=keys.label(side),
        owner=owner,
    )


def acquire(
    keys: RwLayout,
    side: str,
    owner: str,
    *,
    held: int,
    lease: float,
    blocking: bool,
    timeout: float | None,
    wait_id: str,
    token: int = 0,
    clock: Callable[[], float] = time.monotonic,
    on_gone: Callable[[], None] = lambda: None,
) -> Operation[Acquired | None]:
    """Take a hold on ``side``; ``None`` when not acquired (``timeout`` ran out, or held and
    not ``blocking``).

    ``held`` is the caller's hold count on that side. A first write hold asked for by an
    owner that the server says reads raises ``LockUpgradeError`` at once (it would wait for
    itself); the server decides, since a read hold known locally may be gone (its lease ran
    out, or it was force-released). An owner whose hold on the side is gone on the server
    takes it afresh, as Redisson does; the caller learns it from the count (1) of the hold it
    gets. A blocking writer takes a place in line; readers do not queue.
    Success needs lease time left by the local clock, counted from before the request was
    sent, minus the drift allowance; a grant that arrives too late is given back. Every wait
    is bounded by the blocking holder's lease, ``RECHECK`` and our own deadline. A waiter
    rides out a server outage of up to ``OUTAGE_TOLERANCE``. Giving up leaves the line.

    ``wait_id`` is unique to this call (its tries reuse it): a first hold the server makes
    records it, and a first try finds an existing hold of the owner its own retry only if it
    was made for this call (any other is re-leased to this call). A call that gives up after a
    reply it could not read gives back only a hold made for it, never one that a later call
    of the owner was granted meanwhile. A grant is trusted for the lease left on the server
    when that is shorter than ``lease`` (a retry that finds its own grant).

    ``token`` is the fencing token of the hold a re-entry joins (``held > 0``): the server
    counts the re-entry only on that hold, never on another hold of the same owner field (a
    stale copy after a failover); when it is not there, the acquire goes on as a first one.
    """
    deadline = None if timeout is None else clock() + timeout
    # what giving up sends: leave the line, give back a first hold made for this call
    leave = keys.leave_call(side, owner, wait_id, give_back=True)
    # what running out of time sends (the last reply was not a grant): leave the line only
    out_of_time = keys.leave_call(side, owner, wait_id, give_back=False)
    # (side == WRITE: only a writer has a place in line, which a release may name its turn)
    wait = wait_id if side == WRITE else ""
    subscribed = bool(blocking and (yield Subscribe(keys.channel, owner, leave, True, wait=wait)))
    outage = Outage(clock, deadline, OUTAGE_TOLERANCE)
    gone = GoneHold(on_gone)
    late = LateGrants()  # grants in a row that came too late, and the pause after them
    while True:
        sent_at = clock()
        try:
            reply = yield keys.acquire_call(
                side, owner, held, lease, blocking, wait_id, token=token
            )
        except ReplicaError as exc:
            # not confirmed by enough replicas: a failover could lose it, so give it back
            reply = exc.reply
            if isinstance(reply, list) and int(reply[0]) == GRANTED and reply[1] == held + 1:
                yield keys.release_call(
                    side, owner, held + 1, request_id=uuid.uuid4().hex, token=int(reply[3])
                )
            raise
        except ServerUnavailableError:
            pause = outage.failed(listening=subscribed)
            if pause is None:
                if held == 0 and leave is not None:
                    # a grant whose reply was lost must not hold the side for a whole lease:
                    # give back a first hold made for this call, if any (never another's)
                    with contextlib.suppress(ServerUnavailableError):
                        yield leave
                raise
            yield Sleep(pause)
            continue
        outage.ended()
        code, count, ms = int(reply[0]), int(reply[1]), int(reply[2])
        if code == GRANTED:
            # the lease left on the server: less than asked when a retry finds its own grant
            left = lease if ms < 0 else min(lease, ms / 1000)
            if clock() - sent_at < left - drift(left):
                return Acquired(count=count, ttl=left, requested_at=sent_at, token=int(reply[3]))
            yield keys.release_call(
                side, owner, count, request_id=uuid.uuid4().hex, token=int(reply[3])
            )
            ms = 0
            late.came()
        elif code == LOST:
            if count == 0:
                token = 0  # (the hold there, if any, is not the caller's: a first acquire now)
            held = gone.follow(count, lambda: _lost(keys, side, owner, "keeps changing its count"))
            continue
        elif code == UPGRADE:
            raise upgrade_error(keys, owner)
        if not blocking:
            return None
        remaining = math.inf if deadline is None else deadline - clock()
        if remaining <= 0:
            if out_of_time is not None:
                yield out_of_time
            return None
        if not subscribed:
            # Subscribe, then try again at once: a wake-up between our try and the
            # subscription would otherwise go unheard until the next re-check.
            yield Subscribe(keys.channel, owner, leave, wait=wait)
            subscribed = True
            continue
        if code == GRANTED:  # it came too late: pause before the next try (see lock.acquire)
            if late.must_sleep:
                yield Sleep(late.pause(remaining))
                continue
            hint = late.pause()
        else:
            late.reset()
            hint = RECHECK if ms < 0 else ms / 1000
        yield WaitWake(max(0.0, min(remaining, hint, RECHECK)))


def release(
    keys: RwLayout,
    side: str,
    owner: str,
    *,
    held: int,
    request_id: str,
    token: int,
    unsure: bool = False,
) -> Operation[int]:
    """Release one hold on ``side``; returns how many holds on that side the owner keeps.
    ``token``: the owner's hold's (another hold of the owner field, a stale copy after a
    failover, is not released: ``LeaseLostError``). ``unsure``: a re-entry whose outcome is
    unknown may have counted one hold more, which goes too (the caller was told that acquire
    failed)."""
    reply = yield keys.release_call(
        side, owner, held, request_id=request_id, token=token, unsure=unsure
    )
    code, remaining = int(reply[0]), int(reply[1])
    if code != RELEASED:
        raise _lost(keys, side, owner, "is gone (its lease ran out or it was force-released)")
    return remaining


def force_release(keys: RwLayout, side: str) -> Operation[bool]:
    """Drop every hold on ``side``, whoever has it; ``True`` if one was live."""
    reply = yield keys.force_release_call(side)
    return bool(int(reply))


# --- status ---------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class RwStatus:
    """A read-write lock as the server sees it: live holds only."""

    writer: str | None
    write_count: int
    write_ttl: float | None
    write_token: int | None
    readers: dict[str, int]
    read_ttl: float | None
    """The longest reader lease left (``None``: no reader)."""
    read_token: int | None
    """The token of the asking owner's read hold (``None``: it reads not)."""
    waiters: int
    """Writers with a live place in line."""

    def side(self, side: str) -> Status:
        """One side, as a plain lock's status (``holders``: owner field -> hold count)."""
        if side == WRITE:
            if self.writer is None:
                return Status(ttl=None, holders={}, waiters=self.waiters)
            return Status(
                ttl=self.write_ttl,
                holders={self.writer: self.write_count},
                waiters=self.waiters,
                token=self.write_token,
            )
        if not self.readers:
            return Status(ttl=None, holders={}, waiters=self.waiters)
        return Status(
            ttl=self.read_ttl,
            holders=dict(self.readers),
            waiters=self.waiters,
            token=self.read_token,
        )


def parse_status(reply: Sequence[Any]) -> RwStatus:
    writer, write_ms = _text(reply[0]), int(reply[2])
    read_token, read_ms = int(reply[5]), int(reply[6])
    pairs = reply[7:]
    readers = {_text(pairs[i]): int(pairs[i + 1]) for i in range(0, len(pairs), 2)}
    return RwStatus(
        writer=writer or None,
        write_count=int(reply[1]) if writer else 0,
        write_ttl=write_ms / 1000 if writer else None,
        write_token=int(reply[3]) if writer else None,
        readers=readers,
        read_ttl=read_ms / 1000 if readers and read_ms >= 0 else None,
        read_token=read_token or None,
        waiters=int(reply[4]),
    )


def status(keys: RwLayout, owner: str) -> Operation[RwStatus]:
    reply = yield keys.status_call(owner)
    return keys.parse_status(owner, reply)
