"""Frozen values handed to users."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    """A hold just acquired: what ``with lock.hold(...) as lease`` hands back."""

    name: str
    """The lock's name."""
    owner: str
    """The owner's id (this thread's or task's, unique across processes and hosts)."""
    hold_count: int
    """The owner's holds on the lock, this one included (more than 1: a re-entry)."""
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
    """The lock's name."""
    locked: bool
    """Whether anyone holds it."""
    owned: bool
    """Whether the calling thread (or task) holds it."""
    hold_count: int
    """The calling thread's (or task's) holds on it."""
    ttl: float | None
    """Seconds left on the lease; ``None`` when free."""
    holders: dict[str, int]
    """Each holder's owner id and hold count (several for a read lock)."""
    fencing_token: int | None
    """The token of the current hold (``None`` when free or held by a Redisson client)."""
    waiters: int
    """Waiters in line on the server (blocking acquires of redlease clients)."""
    local_waiters: int
    """Threads or tasks of this client waiting for the lock now."""


@dataclass(frozen=True)
class EvictionPolicy:
    """What a server does with lock keys when memory runs short, as a client read it at its
    first use (``CONFIG GET maxmemory*``, else ``INFO memory``)."""

    address: str
    """The server (``host:port``; a cluster master's node name)."""
    policy: str | None
    """``maxmemory-policy`` (``noeviction``, ``volatile-lru``, ...); ``None`` when the client's
    user may run neither ``CONFIG GET`` nor ``INFO``."""
    maxmemory: int | None
    """``maxmemory`` in bytes (0: no limit); ``None`` when not known."""
    evictable: bool | None
    """Whether a held lock's key may be evicted: true under a ``volatile-*`` or ``allkeys-*``
    policy with a memory limit; false under ``noeviction`` or with no limit
    (``maxmemory 0``); ``None`` when not known."""
    source: str | None
    """Where it was read: ``"config"``, ``"info"``, or ``None``."""
