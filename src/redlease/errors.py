"""The whole exception hierarchy.

Every error is a ``RedleaseError`` and also the builtin it resembles, so ``except TimeoutError``
and ``except ConnectionError`` work as users expect. Lock errors carry the lock name and owner.

Every error survives pickling with all it carries (it crosses processes: a Celery task's
failure, a process pool): ``RedleaseError.__reduce__`` rebuilds the instance from its ``args``
and restores its attributes, whatever its constructor takes. Every constructor also accepts the
message alone, so a serializer that keeps only ``args`` (Celery's JSON result backend, which
calls ``cls(*args)``) gets the class and the message back.
"""

from __future__ import annotations

import difflib
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = [
    "ArgumentTypeError",
    "ClientClosedError",
    "EventLoopError",
    "EvictionPolicyError",
    "InvalidArgumentError",
    "LeaseLostError",
    "LockTimeoutError",
    "LockUpgradeError",
    "LossCause",
    "NotOwnedError",
    "PermissionDeniedError",
    "QuorumError",
    "RedleaseError",
    "RedleaseWarning",
    "ReplicaError",
    "ServerError",
    "ServerUnavailableError",
    "StaleTokenError",
    "WrongTypeError",
]


class RedleaseError(Exception):
    """Base class of every error redlease raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        # not ``cls(*args)`` as Exception's: the constructors take keywords ``args`` lacks
        return _rebuilt, (type(self), self.args), self._pickled_state()

    def _pickled_state(self) -> dict[str, Any]:
        """The attributes a pickled copy gets (every one, ``__notes__`` included)."""
        return dict(vars(self))


class RedleaseWarning(UserWarning):
    """A configuration redlease can work with but that weakens what it promises (for example a
    server whose eviction policy may delete a held lock's key)."""


def _rebuilt(cls: type[RedleaseError], args: tuple[Any, ...]) -> RedleaseError:
    """An instance of ``cls`` with ``args``, its constructor not run (unpickling: the
    attributes are restored next, by ``BaseException.__setstate__``)."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    return exc


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if a pickled copy of it can be rebuilt, else a ``RedleaseError`` naming its type
    and message (for the errors one error carries from elsewhere: one that cannot be rebuilt
    must not make the whole error unpicklable)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        kind = type(exc)
        return RedleaseError(f"{kind.__module__}.{kind.__qualname__}: {exc}")
    return exc


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


class EvictionPolicyError(RedleaseError, RuntimeError):
    """A client made with ``eviction="refuse"`` met a server whose eviction policy may delete
    a held lock's key (``maxmemory-policy`` ``volatile-*`` or ``allkeys-*`` with a memory
    limit). ``address`` is the server, ``policy`` its policy. Nothing was sent for the call."""

    def __init__(self, message: str, *, address: str = "", policy: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.policy = policy


class ClientClosedError(RedleaseError, RuntimeError):
    """The client was closed: before the call, or while the call waited. A waiter stopped by
    ``close()`` has left the line and given back anything granted to it meanwhile; ``name``
    is the lock (or other primitive) it waited for, if any."""

    def __init__(self, message: str = "redlease client is closed", *, name: str | None = None):
        super().__init__(message if name is None else f"{message} (waiting for {name!r})")
        self.name = name


class EventLoopError(RedleaseError, RuntimeError):
    """An ``AsyncClient`` was used on an event loop other than the one it was first used on.
    Its connections, its watchdog and its subscriber belong to that first loop (which may be
    closed by now: each Starlette/FastAPI ``TestClient`` and each ``asyncio.run()`` runs a loop
    of its own). Make one client per event loop, inside it: in an ASGI app's lifespan
    (``redlease.contrib.fastapi.lifespan``), not at module level. ``name`` is the lock (or
    other primitive) the call was for, if any."""

    def __init__(
        self,
        message: str = (
            "this AsyncClient was first used on another event loop; a client belongs to the "
            "loop it is first used on: create one per event loop, inside it (in a FastAPI or "
            "Starlette app: in its lifespan, with redlease.contrib.fastapi.lifespan, "
            "not at module level)"
        ),
        *,
        name: str | None = None,
    ):
        super().__init__(message if name is None else f"{message} (calling for {name!r})")
        self.name = name


class _LockError(RedleaseError):
    """An error about one lock; ``name`` and ``owner`` say which lock and which holder."""

    def __init__(self, message: str, *, name: str = "", owner: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        """The lock's name."""
        self.owner = owner
        """The owner id of the thread or task concerned (``None`` when not known)."""


class NotOwnedError(_LockError, RuntimeError):
    """The caller released (or renewed) a lock it does not hold."""


LossCause = Literal["expired", "forced", "server_lost", "unknown"]
"""Why a hold was lost: ``expired`` (its lease ran out, or it could not be renewed in time),
``forced`` (an operator's forced release: ``redlease release --force``, ``force_release()``),
``server_lost`` (the server no longer has it as the client last knew it: a restart, a failover
to a replica that had not seen it), ``unknown`` (gone, and the client cannot tell why)."""


class LeaseLostError(NotOwnedError):
    """The caller's lease expired, or the lock was force-released or taken, while it was held.

    ``cause`` says why, as far as the client can tell (``LossCause``)."""

    def __init__(
        self,
        message: str,
        *,
        name: str = "",
        owner: str | None = None,
        cause: LossCause = "unknown",
    ) -> None:
        super().__init__(message, name=name, owner=owner)
        self.cause: LossCause = cause
        """Why the hold was lost: ``expired``, ``forced``, ``server_lost`` or ``unknown``."""


class LockTimeoutError(_LockError, TimeoutError):
    """A bounded wait for a lock ran out (``with lock.hold(timeout=...)``)."""


class ReplicaError(RedleaseError):
    """Fewer replicas than required acknowledged a lock write within the replica timeout.

    An acquire gives its hold back before raising this; a release did happen on the master but
    may be lost on failover; a renewal counts as failed. ``reply`` is the master's reply."""

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        required: int = 0,
        acked: int = 0,
        reply: object = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.required = required
        self.acked = acked
        self.reply = reply


class StaleTokenError(RedleaseError):
    """A fenced write carried a token older than one the resource has already seen: the
    writer's lease ended and a later holder wrote since. Nothing was written.

    Raised by ``fenced_get``/``fenced_set`` for a Redis key, and by the fenced SQL writes of
    ``redlease.contrib.sqlalchemy`` and ``redlease.contrib.django.fencing`` for rows (which
    also raise it when no row matched: ``seen`` is then 0). Stop the work, do not retry with
    the same token: a new hold of the lock gets a new one."""

    def __init__(self, message: str, *, resource: str = "", token: int = 0, seen: int = 0) -> None:
        super().__init__(message)
        self.resource = resource
        """The key written (``fenced_set``), or the table (the SQL helpers)."""
        self.token = token
        """The token the write carried."""
        self.seen = seen
        """The highest token the resource had seen."""


class ServerUnavailableError(RedleaseError, ConnectionError):
    """The server could not be reached or did not answer; ``address`` has no password in it."""

    def __init__(self, message: str, *, address: str = "", name: str | None = None) -> None:
        super().__init__(message)
        self.address = address
        """The server's address (host:port, never a password)."""
        self.name = name
        """The lock (or other primitive) the call was for, if any."""


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
        name: str = "",
        owner: str | None = None,
        quorum: int = 0,
        outcomes: dict[str, str] | None = None,
        errors: dict[str, BaseException] | None = None,
    ) -> None:
        super().__init__(message, name=name, owner=owner)
        self.quorum = quorum
        self.outcomes = outcomes or {}
        self.errors = errors or {}

    def _pickled_state(self) -> dict[str, Any]:
        state = super()._pickled_state()
        state["errors"] = {address: _portable(exc) for address, exc in self.errors.items()}
        return state


class LockUpgradeError(_LockError, RuntimeError):
    """The write lock of a read-write lock was asked for by an owner holding only its read
    lock: the writer would wait for its own read hold forever. Release the read lock first
    (the other way round, taking the read lock while holding the write lock, is allowed)."""


WAIT_WORDS = ("wait", "blocking", "block", "wait_timeout", "max_wait")
"""Other libraries' names for the wait: here it is ``timeout`` everywhere."""


def refuse_unknown(
    where: str, unknown: Mapping[str, Any] | Iterable[str], valid: Iterable[str]
) -> None:
    """Raise ``ArgumentTypeError`` (an ``InvalidArgumentError`` and a ``TypeError``) naming
    each of ``unknown`` and listing ``valid``; nothing when ``unknown`` is empty."""
    names = sorted(unknown)
    if not names:
        return
    options = sorted(valid)
    hints = []
    for name in names:
        if name in WAIT_WORDS and "timeout" in options:
            hints.append(
                f"the wait for a busy lock is timeout= (seconds; 0: one try, None: as long as"
                f" it takes), not {name}="
            )
        else:
            close = difflib.get_close_matches(name, options, n=1)
            if close:
                hints.append(f"{name}: did you mean {close[0]}?")
    said = ", ".join(repr(n) for n in names)
    raise ArgumentTypeError(
        f"{where}: unknown option{'s' if len(names) > 1 else ''} {said}; the options are"
        f" {', '.join(options)}" + "".join(f" ({hint})" for hint in hints)
    )
