"""Frozen values handed to users."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    """A hold just acquired: what ``with lock.hold(...) as lease`` hands back."""

    name: str
    owner: str
    hold_count: int
    lease: float | None
    """Seconds the hold lasts unless renewed; ``None`` when the watchdog renews it."""
    ttl: float
    """Seconds left on the key when the server granted the hold."""
    fencing_token: int
    """Strictly greater than every token handed out before for this lock name; a re-entry
    keeps the token of the hold it joins. Pass it to the resource you protect."""


@dataclass(frozen=True)
class LockStatistics:
    """A lock as the server and this client see it, read in one round trip."""

    name: str
    locked: bool
    owned: bool
    hold_count: int
    ttl: float | None
    holders: dict[str, int]
    fencing_token: int | None
    """The token of the current hold (``None`` when free or held by a Redisson client)."""
    waiters: int
    """Waiters in line on the server (blocking acquires of redlease clients)."""
    local_waiters: int
    """Threads or tasks of this client waiting for the lock now."""
