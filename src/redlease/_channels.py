"""Who waits on which unlock channel, and whom a message wakes: shared by both subscribers.

No I/O and no locking here; the sync subscriber calls it under its mutex, the asyncio one from
its loop. Events are ``threading.Event`` or ``asyncio.Event`` (both have ``set``/``is_set``).

A release by redlease publishes the owner field of the waiter whose turn it is, then "0": the
first wakes that waiter only and the "0" after it is ignored. A "0" alone (a Redisson release,
or a redlease one with nobody in line) wakes one local waiter, the one that has waited longest
(as Redisson releases one permit per unlock message). A woken waiter that leaves without taking
its turn passes the wake on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Event(Protocol):
    def set(self) -> None: ...
    def is_set(self) -> bool: ...
    def clear(self) -> None: ...


class Waiter:
    """One waiting caller: the channel it listens on and its wake-up flag."""

    __slots__ = ("channel", "event", "owner")

    def __init__(self, channel: str, owner: str, event: Any) -> None:
        self.channel = channel
        self.owner = owner
        self.event: Any = event


class Entry:
    __slots__ = ("confirmed", "idle_since", "rewake", "skip_unlock", "waiters")

    def __init__(self, confirmed: Any) -> None:
        self.waiters: dict[Waiter, None] = {}  # insertion order: longest waiting first
        self.confirmed: Any = confirmed
        self.idle_since: float | None = None
        self.rewake = False  # wake every waiter once re-subscribed after a reconnect
        self.skip_unlock = False  # the next "0" follows a targeted wake-up: ignore it


class ChannelTable:
    def __init__(self, new_event: Callable[[], Any]) -> None:
        self._new_event = new_event
        self.entries: dict[str, Entry] = {}

    def add(self, waiter: Waiter) -> tuple[Entry, bool]:
        """Register ``waiter``; the flag says the channel is new and needs a SUBSCRIBE."""
        entry = self.entries.get(waiter.channel)
        new = entry is None
        if entry is None:
            entry = self.entries[waiter.channel] = Entry(self._new_event())
        entry.waiters[waiter] = None
        entry.idle_since = None
        return entry, new

    def add_if_live(self, waiter: Waiter) -> bool:
        """Register ``waiter`` only if its channel is already subscribed and confirmed."""
        entry = self.entries.get(waiter.channel)
        if entry is None or not entry.confirmed.is_set():
            return False
        entry.waiters[waiter] = None
        entry.idle_since = None
        return True

    def remove(self, waiter: Waiter, now: float) -> None:
        entry = self.entries.get(waiter.channel)
        if entry is None or waiter not in entry.waiters:
            return
        del entry.waiters[waiter]
        if waiter.event.is_set():
            self._wake_one(entry)  # it was woken but leaves: pass the turn on
        if not entry.waiters:
            entry.idle_since = now

    def on_message(self, channel: str, payload: str) -> None:
        entry = self.entries.get(channel)
        if entry is None:
            return
        if payload == "0":
            if entry.skip_unlock:
                entry.skip_unlock = False
            else:
                self._wake_one(entry)
        elif ":" in payload:  # the owner field of the waiter whose turn it is
            entry.skip_unlock = True
            for waiter in entry.waiters:
                if waiter.owner == payload:
                    waiter.event.set()
                    break
        else:  # another Redisson message (a read-write lock's "1"): everyone re-checks
            for waiter in entry.waiters:
                waiter.event.set()

    @staticmethod
    def _wake_one(entry: Entry) -> None:
        for waiter in entry.waiters:
            if not waiter.event.is_set():
                waiter.event.set()
                return

    def on_subscribed(self, channel: str) -> None:
        entry = self.entries.get(channel)
        if entry is None:
            return
        entry.confirmed.set()
        if entry.rewake:
            entry.rewake = False
            for waiter in entry.waiters:
                waiter.event.set()

    def resubscribe(self) -> list[str]:
        """After a reconnect: forget idle channels, return the ones to subscribe again."""
        for channel in [ch for ch, e in self.entries.items() if not e.waiters]:
            del self.entries[channel]
        for entry in self.entries.values():
            entry.rewake = True
        return list(self.entries)

    def disconnected(self) -> None:
        for entry in self.entries.values():
            entry.confirmed.clear()

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


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
