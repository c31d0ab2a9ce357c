"""The I/O requests that core operations yield, and that each shell knows how to perform."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .scripts import Script

T = TypeVar("T")


@dataclass(frozen=True)
class Replication:
    """Wait after every lock write until ``replicas`` replicas acknowledged it (``WAIT``), for
    at most ``timeout_ms``; a shortfall is thrown into the operation as ``ReplicaError``."""

    replicas: int
    timeout_ms: int


@dataclass(frozen=True)
class Call:
    """Run ``script`` (EVALSHA, reloading it if the server lost its cache); reply: its result.

    When the server cannot be reached the shell throws ``ServerUnavailableError`` into the
    operation at this point, so the operation decides whether to retry.

    ``undo`` maps the reply to a call that takes the effect back, for a caller cancelled after
    the request was sent: the shell waits for the reply and runs the undo before giving up.
    """

    script: Script
    keys: tuple[str, ...]
    args: tuple[str | int | bytes, ...]
    undo: Callable[[Any], Call | None] | None = None
    replication: Replication | None = None
    """Replica acknowledgements this call waits for (else the operation's)."""


@dataclass(frozen=True)
class Subscribe:
    """Listen on ``channel`` for ``owner`` from now on; reply: whether it listens now.

    With ``only_if_live`` it listens only if the client's connection is already subscribed
    (no round trip); otherwise it subscribes and waits for the server's confirmation. If the
    operation is abandoned (an error, a cancellation) after this, the shell runs ``leave`` to
    take the owner out of the line.

    ``wait``, the acquire call's wait id, names its place in a line where a release gives
    the waiter its turn (a lock's hand-over, a read-write lock's first writer, a Redisson fair
    lock's first waiter): once the wait is over without the lock, a turn that still comes to
    that place is given back at once, not kept for a lease that nobody uses. The shell sends
    ``grant_back(handed)`` for a hand-over (the lock was handed to the place), else ``leave``
    again."""

    channel: str
    owner: str
    leave: Call | None = None
    only_if_live: bool = False
    private: str | None = None
    """A channel of the owner's client's own to listen on as well (a lock's hand-overs)."""
    wait: str = ""
    grant_back: Callable[[Handed], Call] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class WaitWake:
    """Wait up to ``timeout`` seconds for a message on the subscribed channel; reply: woken?
    (a ``Handed`` when the message handed the lock to the waiter)."""

    timeout: float


@dataclass(frozen=True)
class Handed:
    """A release handed the lock to a waiter: its fencing token, the lease it was given, and
    the wait id of the acquire call it was made for (only that call may take it)."""

    token: int
    lease_ms: int
    wait: str


@dataclass(frozen=True)
class Sleep:
    """Pause for ``seconds`` (a back-off); reply: ``None``."""

    seconds: float


Request = Call | Subscribe | WaitWake | Sleep
Operation = Generator[Request, Any, T]
