"""Frozen values handed to users: a hold's ``Lease``, and each primitive's statistics."""

from __future__ import annotations

from dataclasses import dataclass, field


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
class HolderInfo:
    """Who a holder is: what its client recorded on the server at its first use (see
    ``Client(holder_info=...)``). Every field is ``None`` when not known (a client that wrote
    no record, such as Redisson, or a record that expired)."""

    host: str | None = None
    """The holder's host name (``socket.gethostname()``)."""
    pid: int | None = None
    """The holder's process id on that host."""
    process: str | None = None
    """The process name as ``ps`` shows it (``/proc/self/comm`` on Linux)."""
    info: str | None = None
    """The client's description (``holder_info=``; ``redlease run``: its command), passwords
    masked."""

    def as_json(self) -> dict[str, str | int | None]:
        """The record as ``redlease status --json`` and ``list --json`` show it."""
        return {"host": self.host, "pid": self.pid, "process": self.process, "info": self.info}


@dataclass(frozen=True)
class LockStatistics:
    """A lock as the server and this client see it, read in one round trip."""

    name: str
    """The lock's name."""
    locked: bool
    """Whether anyone holds it, or it is kept taken after a release (``kept_by``)."""
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
    holder_info: dict[str, HolderInfo] = field(default_factory=dict)
    """Who each holder in ``holders`` (and the owner in ``kept_by``) is: its host, pid,
    process and description, from the record its client keeps on the server (read in a
    second round trip when the lock is held; a ``HolderInfo`` of ``None`` fields when its
    client wrote none, e.g. Redisson)."""
    kept_by: str | None = None
    """The owner whose ``release(keep_for=)`` keeps the lock taken: ``locked`` is true,
    ``holders`` is empty (nobody holds it, nobody can take it) and ``ttl`` is what is left
    of the time kept; ``force_release()`` frees it at once. ``None`` when not kept."""


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


@dataclass(frozen=True)
class SemaphoreStatistics:
    """A semaphore as the server and this client see it, read in one round trip."""

    name: str
    """The semaphore's name."""
    permits: int | None
    """Total permits: set plus added (``None``: never set, or set by a Redisson client)."""
    available: int
    """Permits free now (a lease semaphore counts run-out leases as free)."""
    holders: int | None
    """Permits taken now (``None`` when the total is unknown)."""
    waiters: int
    """Callers of every client waiting for permits now (registrations kept on the server)."""
    local_waiters: int
    """Threads or tasks of this client waiting now."""
    ttl: float | None
    """Counting semaphore: the key's expiry (``None``: none). Lease semaphore: seconds until
    the soonest held permit's lease ends (``None``: none held)."""


@dataclass(frozen=True)
class LatchStatistics:
    """A latch as the server and this client see it, read in one round trip."""

    name: str
    """The latch's name."""
    count: int
    """0: open."""
    waiters: int
    """Callers of every client waiting now (registrations kept on the server)."""
    local_waiters: int
    """Threads or tasks of this client waiting now."""
    ttl: float | None
    """The latch key's expiry (``None``: none, or open)."""
