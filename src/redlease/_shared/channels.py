"""Who waits on which unlock channel, and whom a message wakes: shared by both subscribers.

No I/O and no locking here; the sync subscriber calls it under its mutex, the asyncio one from
its loop. Events are ``threading.Event`` or ``asyncio.Event`` (both have ``set``/``is_set``).

A lock's waiter listens on two channels: the lock's unlock channel and its client's own
channel for that lock. A release by redlease publishes, on the client's own channel, the owner
field of the waiter whose turn it is, which wakes that waiter only ("<owner field> <token>
<lease ms> <wait id>": the lock was handed outright to that owner's acquire call with that
wait id; a later call of the same owner takes such a message, arriving late, for a mere
wake-up); no other process hears it. A "0" on the
unlock channel (a Redisson release, or a redlease one with nobody in line) wakes one local
waiter, the one that has waited longest (as Redisson releases one permit per unlock message).
A woken waiter that leaves without taking its turn passes the wake on.

A wait that is over without the lock (it timed out, was cancelled, or failed) but whose leave
the server may not have run yet (it is on the wire, or it failed: a frozen link) is
``abandon``-ed here: its waiter goes, and its place is remembered (``Abandoned``, at most
``ABANDONED_KEPT``) on the channel where its turn would be told, until its leave is confirmed.
A message that comes there for it, a turn nobody waits for (a lock handed to that wait id, a
read-write lock's writer named, a "0" on a Redisson fair waiter's own channel with nobody
listening), is handed back to the subscriber as that ``Abandoned``, whose ``give_back`` the
client sends at once: the lock goes on to the next in line, not a whole lease later. A
message for an owner of the client that waits again is that waiter's (a hint: its next try
takes over what was made for the old wait).

A client also listens on its own holder channel of each lock one of its owners holds (with a
lease the watchdog renews; ``LockKeys.holder``), ``held`` here: a force release publishes there
"lost <owner field> <token>" for each holder (``lock_force_release.lua``), which the table
hands back to the subscriber as a ``Lost`` notice; the client acts on it only for its hold of
that owner with that fencing token (a late or repeated message changes nothing). The subscriber
subscribes the channels of the client's holds itself, every ``HOLDS_CHECK`` (no round trip, no
wake-up of another thread on the acquire's path; a hold shorter than that usually costs
nothing), so a force release before its hold's subscription is confirmed is found by the
watchdog's next round, as before; after every re-subscription (a reconnection, a slot that
moved) the subscriber has the watchdog check the holds at once, so a loss meanwhile is found
then, not a round later.

``Links`` keeps which connection each channel is subscribed on: with classic pub/sub one
connection (to any node: a cluster forwards every message to every node), with sharded pub/sub
one per master that owns a channel's slot, so at most one per master whatever the number of
channels. A channel whose connection failed, or whose slot moved away, is subscribed again
where its slot lives now, and its waiters re-check once it is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .._core.requests import Handed

LATCH_CHANNEL_PREFIX = "redisson_countdownlatch__channel__"
"""A count-down latch's channel: there "0" (Redisson's zero-count message) opens the latch, so
it wakes every waiter, not one."""


class Event(Protocol):
    def set(self) -> None: ...
    def is_set(self) -> bool: ...
    def clear(self) -> None: ...


class Waiter:
    """One waiting caller: the channels it listens on (the primitive's, and for a lock its
    client's own), its wake-up flag, and the hand-over a wake-up brought (if any)."""

    __slots__ = ("channels", "event", "handed", "owner")

    def __init__(self, channel: str, owner: str, event: Any, private: str | None = None) -> None:
        self.channels = (channel,) if private is None else (channel, private)
        self.owner = owner
        self.event: Any = event
        self.handed: Handed | None = None

    @property
    def channel(self) -> str:
        """The primitive's channel (the first of ``channels``)."""
        return self.channels[0]

    def woken(self, woken: bool) -> Handed | bool:
        """Consume a wake-up: the hand-over it brought, else whether there was one."""
        self.event.clear()
        handed, self.handed = self.handed, None
        return handed if woken and handed is not None else woken


LOST_PREFIX = "lost "
"""A force release's message to a holder's client: ``"lost <owner field> <token>"``."""


@dataclass(frozen=True)
class Lost:
    """A message saying that ``owner``'s hold with fencing ``token`` was force-released; it
    came on ``channel`` (the holder's client's own channel of the lock)."""

    channel: str
    owner: str
    token: int


def lost_notice(channel: str, payload: str) -> Lost | None:
    """The ``Lost`` notice ``payload`` carries, or ``None`` (another message, or a malformed
    one: a notice without a token is never acted on)."""
    if not payload.startswith(LOST_PREFIX):
        return None
    owner, _, token = payload[len(LOST_PREFIX) :].partition(" ")
    if ":" not in owner or not token.isdigit() or int(token) <= 0:
        return None
    return Lost(channel, owner, int(token))


ABANDONED_KEPT = 64
"""At most this many abandoned waits are remembered per client (the oldest is forgotten: a
turn that comes to it then costs what it cost before, the lease or the place's life)."""


@dataclass(frozen=True)
class Abandoned:
    """A wait of ``owner`` (``wait``: its wait id) that is over without the lock while its
    place may still be in line; ``give_back(handed)`` sends what hands its turn on at once
    (``handed``: the hand-over that came for it, or ``None`` for a mere turn)."""

    channel: str
    owner: str
    wait: str
    give_back: Callable[[Handed | None], None]

    def given_back(self, handed: Handed | None) -> Orphan:
        return Orphan(self, handed)


@dataclass(frozen=True)
class Orphan:
    """A turn that came for an abandoned wait (``handed``: the hand-over, if it was one):
    the subscriber calls ``give_back`` (outside its locks)."""

    wait: Abandoned
    handed: Handed | None

    def give_back(self) -> None:
        self.wait.give_back(self.handed)


class Holders(Protocol):
    """What the subscriber tells the client about its holds (``ClientState`` is one)."""

    def forced(self, notice: Lost) -> None:
        """A force release's message arrived (called outside the subscriber's locks)."""
        ...

    def check_holds_now(self) -> None:
        """A channel a hold listens on is (again) subscribed: check the holds at once."""
        ...

    def held_channels(self) -> set[str]:
        """The channels the client's holds listen on now."""
        ...


class Entry:
    __slots__ = (
        "_confirmation",
        "_new_event",
        "abandoned",
        "held",
        "idle_since",
        "is_confirmed",
        "refusal",
        "rewake",
        "waiters",
    )

    def __init__(self, new_event: Callable[[], Any]) -> None:
        self.waiters: dict[Waiter, None] = {}  # insertion order: longest waiting first
        self.is_confirmed = False  # the server confirmed the subscription (or refused it)
        self._new_event = new_event
        self._confirmation: Any = None  # made for a caller that waits for is_confirmed
        self.refusal: BaseException | None = None  # the server refused the subscription
        self.idle_since: float | None = None
        self.rewake = False  # wake every waiter once re-subscribed after a reconnect
        self.held = 0  # 1: a hold of this client listens here
        self.abandoned: dict[tuple[str, str], Abandoned] = {}  # (owner, wait id) -> its place

    @property
    def idle(self) -> bool:
        """Nobody waits, holds or has a place in line here."""
        return not self.waiters and not self.held and not self.abandoned

    def confirmation(self) -> Any:
        """An event set while ``is_confirmed`` (made at the first call, under the table's
        mutex: a channel only the client's holds listen on never needs one, and a thread's
        event costs about 1.2 KB, per hold)."""
        if self._confirmation is None:
            self._confirmation = self._new_event()
            if self.is_confirmed:
                self._confirmation.set()
        return self._confirmation

    def confirm(self) -> None:
        self.is_confirmed = True
        if self._confirmation is not None:
            self._confirmation.set()

    def unconfirm(self) -> None:
        self.is_confirmed = False
        if self._confirmation is not None:
            self._confirmation.clear()


class ChannelTable:
    def __init__(self, new_event: Callable[[], Any]) -> None:
        self._new_event = new_event
        self.entries: dict[str, Entry] = {}
        self._abandoned: dict[Abandoned, None] = {}  # every entry's, oldest first

    def add(self, waiter: Waiter) -> tuple[list[Entry], list[str]]:
        """Register ``waiter`` on its channels: their entries, each with the event its
        caller waits on for the subscription (``Entry.confirmation``), and the channels that
        are new (each needs a SUBSCRIBE)."""
        entries, new = [], []
        for channel in waiter.channels:
            entry = self.entries.get(channel)
            if entry is None:
                entry = self.entries[channel] = Entry(self._new_event)
                new.append(channel)
            entry.confirmation()
            entry.waiters[waiter] = None
            entry.idle_since = None
            entries.append(entry)
        return entries, new

    def add_if_live(self, channel: str, owner: str, private: str | None) -> Waiter | None:
        """A waiter on ``channel`` (and ``private``), registered, only if all its channels are
        already subscribed and confirmed; its wake-up flag is made only then (an uncontended
        acquire asks at every call, and most often nothing listens there yet)."""
        entries = [self.entries.get(channel)]
        if private is not None:
            entries.append(self.entries.get(private))
        if not all(
            entry is not None and entry.is_confirmed and entry.refusal is None for entry in entries
        ):
            return None
        waiter = Waiter(channel, owner, self._new_event(), private)
        for entry in entries:
            assert entry is not None
            entry.waiters[waiter] = None
            entry.idle_since = None
        return waiter

    def remove(self, waiter: Waiter, now: float) -> None:
        for channel in waiter.channels:
            entry = self.entries.get(channel)
            if entry is None or waiter not in entry.waiters:
                continue
            del entry.waiters[waiter]
            if waiter.event.is_set():
                self._wake_one(entry)  # it was woken but leaves: pass the turn on
            if entry.idle:
                entry.idle_since = now

    def abandon(
        self, record: Abandoned, waiter: Waiter | None, now: float
    ) -> tuple[Orphan | None, list[str]]:
        """``record``'s wait is over without the lock, and its leave is about to be sent:
        remove its ``waiter`` (if it had one listening), and remember its place on
        ``record.channel`` until ``left``. Returns an ``Orphan`` to give back now if a
        hand-over for that very wait already came (after its last wake-up was consumed), and
        the channels new to the table (each needs a SUBSCRIBE: the wait never listened)."""
        handed = None
        if waiter is not None:
            handed, waiter.handed = waiter.handed, None
            self.remove(waiter, now)
        if handed is not None and handed.wait == record.wait:
            return record.given_back(handed), []
        new = []
        entry = self.entries.get(record.channel)
        if entry is None:
            entry = self.entries[record.channel] = Entry(self._new_event)
            new.append(record.channel)
        key = (record.owner, record.wait)
        old = entry.abandoned.pop(key, None)
        if old is not None:
            self._abandoned.pop(old, None)
        entry.abandoned[key] = record
        entry.idle_since = None
        self._abandoned[record] = None
        while len(self._abandoned) > ABANDONED_KEPT:
            self.left(next(iter(self._abandoned)), now)
        return None, new

    def left(self, record: Abandoned, now: float) -> None:
        """``record``'s leave was confirmed (or its turn given back, or it is forgotten):
        its place is gone."""
        self._abandoned.pop(record, None)
        entry = self.entries.get(record.channel)
        if entry is None or entry.abandoned.get((record.owner, record.wait)) is not record:
            return
        del entry.abandoned[(record.owner, record.wait)]
        if entry.idle:
            entry.idle_since = now

    def _orphans(
        self, entry: Entry, owner: str | None, handed: Handed | None, now: float
    ) -> list[Lost | Orphan]:
        """The abandoned places on ``entry`` that a turn for ``owner`` (``None``: for whoever
        listens there; with ``handed``, for that wait id only) came to. Each is forgotten
        here (a second copy of the message finds none) and given back by the caller."""
        found = [
            record
            for (who, wait), record in entry.abandoned.items()
            if (owner is None or who == owner) and (handed is None or wait == handed.wait)
        ]
        for record in found:
            self.left(record, now)
        return [record.given_back(handed) for record in found]

    def reconcile_holds(self, wanted: set[str], now: float) -> list[str]:
        """Listen for the holds on exactly ``wanted`` (the channels of the client's holds
        now): returns the channels new to the table (each needs a SUBSCRIBE); a channel no
        hold needs any more goes idle unless a waiter is on it."""
        new = []
        for channel in wanted:
            entry = self.entries.get(channel)
            if entry is None:
                entry = self.entries[channel] = Entry(self._new_event)
                new.append(channel)
            entry.held = 1
            entry.idle_since = None
        for channel, entry in self.entries.items():
            if entry.held and channel not in wanted:
                entry.held = 0
                if entry.idle:
                    entry.idle_since = now
        return new

    def on_message(self, channel: str, payload: str, now: float) -> list[Lost | Orphan]:
        """Wake whom ``payload`` is for; a force release's message, and a turn that came to
        an abandoned wait, are handed back instead."""
        entry = self.entries.get(channel)
        if entry is None:
            return []
        if payload.startswith(LOST_PREFIX):
            notice = lost_notice(channel, payload) if entry.held else None
            return [] if notice is None else [notice]
        if payload == "0" and not channel.startswith(LATCH_CHANNEL_PREFIX):
            if not self._wake_one(entry) and entry.abandoned and not entry.waiters:
                # a waiter's own channel (Redisson's fair lock) with nobody on it any more
                return self._orphans(entry, None, None, now)
        elif ":" in payload:  # the owner field of the waiter whose turn it is
            owner, _, grant = payload.partition(" ")
            for waiter in entry.waiters:
                if waiter.owner == owner:
                    waiter.handed = handed(grant)
                    waiter.event.set()
                    return []
            if entry.abandoned:
                # nobody of that owner waits: a turn for a wait that is over
                given = handed(grant)
                if given is not None or not grant:
                    return self._orphans(entry, owner, given, now)
        else:  # another Redisson message (a read-write lock's "1", a latch's "0", which
            # opens it for everyone): everyone re-checks
            for waiter in entry.waiters:
                waiter.event.set()
        return []

    @staticmethod
    def _wake_one(entry: Entry) -> bool:
        """Wake the longest-waiting waiter not woken yet; whether there was one."""
        for waiter in entry.waiters:
            if not waiter.event.is_set():
                waiter.event.set()
                return True
        return False

    def on_subscribed(self, channel: str) -> bool:
        """``channel``'s subscription is confirmed; whether it was subscribed again (after a
        reconnection, or its slot moved) and a hold listens there: the holds are then to be
        checked at once (a force release meanwhile went unheard, a restarted server may have
        lost them)."""
        entry = self.entries.get(channel)
        if entry is None:
            return False
        entry.refusal = None
        entry.confirm()
        again = entry.rewake
        if again:
            entry.rewake = False
            for waiter in entry.waiters:
                waiter.event.set()
        return again and entry.held > 0

    def on_refused(self, channel: str, error: BaseException) -> None:
        """The server refused to subscribe ``channel`` for good (the user lacks the
        permission): whoever waits for the subscription is told at once, not after the
        subscription timeout (the subscriber keeps trying, in case the ACL changes)."""
        entry = self.entries.get(channel)
        if entry is None:
            return
        entry.refusal = error
        entry.confirm()

    def lost(self, channel: str) -> bool:
        """``channel``'s subscription is gone (its connection failed, its slot moved): an idle
        channel is forgotten; otherwise its waiters re-check once it is subscribed again.
        Returns whether it is still wanted."""
        entry = self.entries.get(channel)
        if entry is None:
            return False
        if entry.idle:
            del self.entries[channel]
            return False
        entry.unconfirm()
        entry.refusal = None
        entry.rewake = True
        return True

    def drop_idle(self, now: float, linger: float) -> list[str]:
        """Forget channels idle for ``linger`` seconds; return them (to UNSUBSCRIBE)."""
        idle = [
            ch
            for ch, e in self.entries.items()
            if e.idle_since is not None and now - e.idle_since >= linger
        ]
        for channel in idle:
            del self.entries[channel]
        return idle

    def waiting(self, channel: str) -> int:
        entry = self.entries.get(channel)
        return len(entry.waiters) if entry else 0


def handed(grant: str) -> Handed | None:
    """``"<token> <lease ms> <wait id>"`` of a hand-over message (``None`` for a bare
    wake-up)."""
    token, lease_ms, wait = [*grant.split(" ", 2), "", ""][:3]
    if not (token.isdigit() and lease_ms.isdigit() and wait):
        return None
    return Handed(int(token), int(lease_ms), wait)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Kinds:
    """The commands and the reply kinds of one pub/sub flavour."""

    subscribe: str
    unsubscribe: str
    message: str
    subscribed: str
    unsubscribed: str


CLASSIC = Kinds("SUBSCRIBE", "UNSUBSCRIBE", "message", "subscribe", "unsubscribe")
SHARDED = Kinds("SSUBSCRIBE", "SUNSUBSCRIBE", "smessage", "ssubscribe", "sunsubscribe")


class Links:
    """Which connection ("link", named by a key: the node's ``host:port``, or ``ANY_NODE``)
    each subscribed channel is on, and the (un)subscriptions each link has sent and not had
    answered yet: a connection answers its commands in order, so an error reply (``MOVED``)
    belongs to the oldest one, and an unsubscription that answers none was the server's own
    (the slot moved away).

    No I/O and no locking: the sync subscriber calls it under its mutex, the asyncio one from
    its loop. Channels come and go with the ``ChannelTable``: one that nobody waits on any more
    is never subscribed again.
    """

    def __init__(self, table: ChannelTable) -> None:
        self._table = table
        self.placed: dict[str, str] = {}
        """Channel -> the link its subscription was sent on."""
        self.channels: dict[str, set[str]] = {}
        """Link -> the channels subscribed on it."""
        self.sent: dict[str, deque[tuple[bool, str]]] = {}
        """Link -> (subscribe?, channel) of each command not answered yet, oldest first."""
        self._unplaced: dict[str, None] = {}  # wanted, subscribed nowhere (in arrival order)

    def want(self, channel: str) -> None:
        """A channel new to the table: it needs a subscription."""
        if channel not in self.placed:
            self._unplaced[channel] = None

    def pending(self) -> list[str]:
        """The channels to subscribe now (forgetting those nobody waits on any more)."""
        for channel in [ch for ch in self._unplaced if ch not in self._table.entries]:
            del self._unplaced[channel]
        return list(self._unplaced)

    def place(self, channel: str, link: str) -> None:
        """A subscription to ``channel`` is being sent on ``link``."""
        self._unplaced.pop(channel, None)
        old = self.placed.get(channel)
        if old is not None and old != link:
            self.channels[old].discard(channel)
        self.placed[channel] = link
        self.channels.setdefault(link, set()).add(channel)
        self.sent.setdefault(link, deque()).append((True, channel))

    def drop(self, channel: str) -> str | None:
        """``channel`` went idle: the link to unsubscribe it on (``None``: none)."""
        self._unplaced.pop(channel, None)
        link = self.placed.pop(channel, None)
        if link is not None:
            self.channels[link].discard(channel)
            self.sent.setdefault(link, deque()).append((False, channel))
        return link

    def confirmed(self, link: str, channel: str) -> bool:
        """``link`` confirmed a subscription to ``channel``; whether a hold listens there
        (see ``ChannelTable.on_subscribed``)."""
        self._answered(link, (True, channel))
        if self.placed.get(channel) == link:
            return self._table.on_subscribed(channel)
        return False

    def unsubscribed(self, link: str, channel: str) -> bool:
        """``link`` says ``channel`` is unsubscribed; ``True`` when that was not our doing
        but the server's (the slot moved): the channel is then to be subscribed again."""
        if self._answered(link, (False, channel)):
            return False
        if self.placed.get(channel) != link:
            return False
        self._unplace(channel)
        return True

    def refused(self, link: str) -> str | None:
        """``link`` answered its oldest command with an error (``MOVED``, ``CLUSTERDOWN``):
        the channel whose subscription failed, now to be subscribed again (else ``None``)."""
        awaiting = self.sent.get(link)
        if not awaiting:
            return None
        subscribe, channel = awaiting.popleft()
        if subscribe and self.placed.get(channel) == link:
            self._unplace(channel)
            return channel
        return None

    def lost(self, link: str) -> list[str]:
        """``link``'s connection failed: its channels that are still wanted, now to be
        subscribed again (their waiters re-check once they are)."""
        self.sent.pop(link, None)
        wanted = []
        for channel in sorted(self.channels.pop(link, set())):
            if self.placed.get(channel) == link:
                del self.placed[channel]
                if self._table.lost(channel):
                    self._unplaced[channel] = None
                    wanted.append(channel)
        return wanted

    def idle(self) -> list[str]:
        """Links with no channel on them and no command awaiting an answer."""
        return [
            link
            for link, channels in self.channels.items()
            if not channels and not self.sent.get(link)
        ]

    def forget(self, link: str) -> None:
        """``link`` was closed (idle)."""
        self.channels.pop(link, None)
        self.sent.pop(link, None)

    def _answered(self, link: str, command: tuple[bool, str]) -> bool:
        awaiting = self.sent.get(link)
        if awaiting and awaiting[0] == command:
            awaiting.popleft()
            return True
        if awaiting and command in awaiting:  # out of step (a server push taken for an answer)
            awaiting.remove(command)
            return True
        return False

    def _unplace(self, channel: str) -> None:
        link = self.placed.pop(channel)
        self.channels[link].discard(channel)
        if self._table.lost(channel):
            self._unplaced[channel] = None


LINGER = 2.0
"""Seconds a channel stays subscribed after its last waiter left."""

HOLDS_CHECK = 0.25
"""Seconds between two looks of the subscriber at the client's holds (to listen for force
releases on their channels, and stop listening for the holds gone)."""

SUBSCRIBE_TIMEOUT = 10.0
"""Seconds a subscription may take to be confirmed before the waiter gives up on it."""


def wake_everyone(table: ChannelTable) -> None:
    """Set every waiter's wake-up and every channel's confirmation (the client closes)."""
    for entry in table.entries.values():
        entry.confirm()
        for waiter in entry.waiters:
            waiter.event.set()
