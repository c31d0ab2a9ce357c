"""The whole exception hierarchy.

Every error is a ``RedleaseError`` and also the builtin it resembles, so ``except TimeoutError``
and ``except ConnectionError`` work as users expect. Lock errors carry the lock name and owner.
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "ClientClosedError",
    "InvalidArgumentError",
    "LeaseLostError",
    "LockTimeoutError",
    "LockUpgradeError",
    "NotOwnedError",
    "PermissionDeniedError",
    "QuorumError",
    "RedleaseError",
    "ReplicaError",
    "ServerError",
    "ServerUnavailableError",
    "StaleTokenError",
    "WrongTypeError",
]


class RedleaseError(Exception):
    """Base class of every error redlease raises."""


class InvalidArgumentError(RedleaseError, ValueError):
    """An argument was out of range or of the wrong kind (empty name, lease <= 0, ...)."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type (a URL that is not a str, a client that is not a redis
    client): an ``InvalidArgumentError`` that is also the ``TypeError`` Python code expects."""


class WrongTypeError(InvalidArgumentError):
    """A key the call would use holds something else (a string, a list, a hash that is not a
    lock, ...): nothing was written or deleted. ``name`` is the key, ``key_type`` its type."""

    def __init__(self, message: str, *, name: str | None = None, key_type: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.key_type = key_type


class PermissionDeniedError(RedleaseError, PermissionError):
    """The server refused a command to the client's user (an ACL without it). ``command``
    names the command (``publish``, ``subscribe``, ``evalsha``, ...)."""

    def __init__(self, message: str, *, command: str = "", name: str | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.name = name


class ServerError(RedleaseError, RuntimeError):
    """The server answered with an error redlease did not expect (the original is the
    ``__cause__``)."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


class ClientClosedError(RedleaseError, RuntimeError):
    """The client was closed: before the call, or while the call waited. A waiter stopped by
    ``close()`` has left the line and given back anything granted to it meanwhile; ``name``
    is the lock (or other primitive) it waited for, if any."""

    def __init__(self, message: str = "redlease client is closed", *, name: str | None = None):
        super().__init__(message if name is None else f"{message} (waiting for {name!r})")
        self.name = name


class _LockError(RedleaseError):
    """An error about one lock; ``name`` and ``owner`` say which lock and which holder."""

    def __init__(self, message: str, *, name: str, owner: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.owner = owner


class NotOwnedError(_LockError, RuntimeError):
    """The caller released (or renewed) a lock it does not hold."""


class LeaseLostError(NotOwnedError):
    """The caller's lease expired, or the lock was force-released or taken, while it was held."""


class LockTimeoutError(_LockError, TimeoutError):
    """A bounded wait for a lock ran out (``with lock.hold(timeout=...)``)."""


class ReplicaError(RedleaseError):
    """Fewer replicas than required acknowledged a lock write within the replica timeout.

    An acquire gives its hold back before raising this; a release did happen on the master but
    may be lost on failover; a renewal counts as failed. ``reply`` is the master's reply."""

    def __init__(
        self, message: str, *, name: str | None, required: int, acked: int, reply: object
    ) -> None:
        super().__init__(message)
        self.name = name
        self.required = required
        self.acked = acked
        self.reply = reply


class StaleTokenError(RedleaseError):
    """A fenced write carried a token older than one the resource has already seen: the
    writer's lease ended and a later holder wrote since. Nothing was written."""

    def __init__(self, message: str, *, resource: str, token: int, seen: int) -> None:
        super().__init__(message)
        self.resource = resource
        self.token = token
        self.seen = seen


class ServerUnavailableError(RedleaseError, ConnectionError):
    """The server could not be reached or did not answer; ``address`` has no password in it."""

    def __init__(self, message: str, *, address: str = "", name: str | None = None) -> None:
        super().__init__(message)
        self.address = address
        self.name = name


class QuorumError(_LockError, ConnectionError):
    """Fewer than a majority of a Redlock's masters did what was asked, in time.

    Raised by a ``with`` statement (or a non-blocking ``acquire``) that cannot get the lock on a
    majority, and by a ``release`` that cannot reach a majority. ``quorum`` is the majority
    needed; ``outcomes`` maps each master's address to what it answered ("granted", "held by
    another owner", "unavailable: ...", ...); ``errors`` keeps the exception of each master
    that failed."""

    def __init__(
        self,
        message: str,
        *,
        name: str,
        owner: str | None = None,
        quorum: int,
        outcomes: dict[str, str],
        errors: dict[str, BaseException] | None = None,
    ) -> None:
        super().__init__(message, name=name, owner=owner)
        self.quorum = quorum
        self.outcomes = outcomes
        self.errors = errors or {}


class LockUpgradeError(_LockError, RuntimeError):
    """The write lock of a read-write lock was asked for by an owner holding only its read
    lock: the writer would wait for its own read hold forever. Release the read lock first
    (the other way round, taking the read lock while holding the write lock, is allowed)."""
