"""How redis-py's errors are reported: translated into redlease's (``redlease.errors``),
which of them a call rides out, gives back or retries (no I/O here)."""

from __future__ import annotations

import re
from typing import Any, NoReturn

import redis.exceptions

from .._core.requests import Call, Replication
from ..errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    RedleaseError,
    ReplicaError,
    ServerError,
    ServerUnavailableError,
    WrongTypeError,
)
from .urls import masked_url

CONNECTION_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
    # a cluster mid-resharding or failover: redis-py gave up following MOVED/ASK or retrying
    # TRYAGAIN ("TTL exhausted"), CLUSTERDOWN, or a slot no node serves yet. Passing states,
    # so a waiter rides them out as it rides out an outage.
    redis.exceptions.ClusterError,
    redis.exceptions.SlotNotCoveredError,
)


PLACE_ERRORS = (
    *CONNECTION_ERRORS,
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
)
"""What opening a connection to a slot's master, or learning the cluster's layout, can raise."""


def check_replicas(reply: Any, acked: int, replication: Replication, name: str | None) -> Any:
    """``reply``, or ``ReplicaError`` when fewer replicas than required acknowledged it."""
    if acked >= replication.replicas:
        return reply
    what = f"lock {name!r}: " if name else ""
    raise ReplicaError(
        f"{what}write acknowledged by {acked} of {replication.replicas} required replicas "
        f"within {replication.timeout_ms} ms",
        name=name,
        required=replication.replicas,
        acked=acked,
        reply=reply,
    )


_NOPERM = re.compile(
    r"\bNOPERM\b|\bACL failure in script\b|has no permissions to run|"
    r"can't publish to the channel|No permissions to access"
)
"""The server's words for an ACL refusal: ``NOPERM`` replies, and a command denied inside a
script (Redis wraps it as "ACL failure in script: ..."; 6.2 as "The user executing the script
can't publish to the channel ...")."""
_COMMAND_IN_MESSAGE = re.compile(r"'([^' ]+)' command")
_USER_IN_MESSAGE = re.compile(r"\bUser (\S+) has no permissions")
_LUA_WRONGTYPE = re.compile(r"WRONGTYPE redlease: key (.*?) holds an? ([A-Za-z][\w-]*)")

HUNG = (redis.exceptions.TimeoutError, TimeoutError)
"""A send or read that timed out: the server is there but does not answer (paused, busy)."""

NOT_RETRIED = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError, *HUNG)
"""Connection errors redlease does not send a call again after: a wrong password or user (a
second try cannot mend it), or a timeout (a second try would wait as long again: a call is
bounded by one socket timeout, not several)."""


def gives_back(call: Call) -> bool:
    """Whether ``call`` only gives something back (leaves a line, undoes a grant): after a
    call of the same operation timed out it is sent in the background, so that the caller's
    error comes within one socket timeout, and the give-back still happens if the server
    answers again."""
    return call.script.name.endswith(("_leave", "_undo"))


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (a ``ServerUnavailableError``) came from a call that timed out."""
    return isinstance(exc.__cause__, HUNG)


class Hung(Exception):
    """Carries a timed-out send or read past redis-py's ``retry`` (which would wait a whole
    socket timeout again for each retry); ``error`` is the timeout to raise."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


TRANSLATED = (OSError, redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
"""What talking to redis can raise that ``translate`` turns into a ``RedleaseError``."""


def translate(
    exc: BaseException,
    address: str,
    name: str | None,
    *,
    key_type: str = "",
    user: str | None = None,
) -> RedleaseError:
    """The ``RedleaseError`` a raw error of redis-py (or the socket) is reported as; raise it
    ``from exc`` (see ``raise_translated``). Never ``exc`` itself unless it already is one.

    * an error reply ``NOPERM ...`` (redis-py's ``NoPermissionError``, or a script's error
      reply in that form): ``PermissionDeniedError`` naming the command (and the user);
    * a wrong password or user (``AuthenticationError``, ``AuthorizationError``):
      ``PermissionDeniedError`` with ``command="auth"``: it is not an outage that waiting
      rides out, and it is a ``PermissionError`` the caller can tell apart;
    * ``WRONGTYPE``: ``WrongTypeError`` naming the key (and its type when known);
    * a reply that is not RESP (an HTTP server on the port): ``ServerUnavailableError``
      saying the server did not answer as Redis does;
    * unreachable, timed out, a cluster mid-failover or whose layout cannot be read:
      ``ServerUnavailableError``;
    * any other error reply: ``ServerError``.
    """
    if isinstance(exc, RedleaseError):
        return exc
    what = f" for lock {name!r}" if name else ""
    text = str(exc)
    if isinstance(exc, redis.exceptions.AuthenticationError | redis.exceptions.AuthorizationError):
        return PermissionDeniedError(
            f"redis server {address} refused the client's credentials{what} "
            f"(check the user and password): {text}",
            command="auth",
            name=name,
        )
    if is_denied(exc):
        found = _COMMAND_IN_MESSAGE.search(text)
        command = found[1].lower() if found else ""
        found_user = _USER_IN_MESSAGE.search(text)
        user = found_user[1] if found_user else user
        who = f"user {user}" if user else "the client's user"
        doing = f"the {command!r} command" if command else "a command"
        return PermissionDeniedError(
            f"redis server {address} does not allow {who} to run {doing}{what}: {text}",
            command=command,
            name=name,
        )
    if "WRONGTYPE" in text and isinstance(exc, redis.exceptions.ResponseError):
        lua = _LUA_WRONGTYPE.search(text)
        if lua:  # a script of redlease's said which key and what it holds
            said = text[lua.start() + len("WRONGTYPE redlease: ") :]
            return WrongTypeError(f"{said}{what}", name=lua[1], key_type=lua[2])
        holds = f"a {key_type}" if key_type else "a value of another type"
        return WrongTypeError(
            f"key {name!r} holds {holds}, not a lock or what this call needs: nothing was "
            "written or deleted",
            name=name,
            key_type=key_type,
        )
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return ServerUnavailableError(
            f"the server at {address} did not answer as Redis does{what} (is it a Redis "
            f"server? {text})",
            address=address,
            name=name,
        )
    if not_a_cluster(exc):
        server = address.removeprefix("cluster ")
        return InvalidArgumentError(
            f"redis server {server} is not a Redis Cluster (cluster mode is not enabled on "
            f"it){what}: make the client with cluster=False"
        )
    if isinstance(exc, (*CONNECTION_ERRORS, redis.exceptions.RedisClusterException)):
        return unavailable(exc, address, name)
    if isinstance(exc, redis.exceptions.DataError):
        return InvalidArgumentError(f"redis-py refused an argument{what}: {text}")
    return ServerError(f"redis server {address} answered with an error{what}: {text}", name=name)


def not_a_cluster(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py's ``RedisClusterException`` for a server that answered but
    is not in cluster mode (a client made with ``cluster=True`` for a single server)."""
    return isinstance(exc, redis.exceptions.RedisClusterException) and (
        "Cluster mode is not enabled" in str(exc)
    )


def cluster_from_url_failed(url: str, exc: BaseException) -> RedleaseError:
    """The error of ``from_url(url, cluster=True)`` when redis-py could not read the
    cluster's layout (``exc``, a ``RedisClusterException``): ``InvalidArgumentError`` for a
    server that is not a cluster, else ``ServerUnavailableError``; the URL shown without its
    password."""
    shown = masked_url(url)
    if not_a_cluster(exc):
        return InvalidArgumentError(
            f"{shown!r} is not a Redis Cluster: cluster mode is not enabled on the server "
            "(use cluster=False for a single server, or the URL of a cluster node)"
        )
    return ServerUnavailableError(
        f"Redis Cluster at {shown!r} unavailable: the cluster's layout could not be read "
        f"from it ({exc})",
        address=shown,
    )


def raise_translated(
    exc: BaseException,
    address: str,
    name: str | None,
    *,
    key_type: str = "",
    user: str | None = None,
) -> NoReturn:
    """Raise ``translate(exc, ...)`` from ``exc``; never an error that is its own cause."""
    error = translate(exc, address, name, key_type=key_type, user=user)
    if error is exc:
        raise error
    raise error from exc


def is_denied(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's ``NOPERM`` refusal (an ACL without the command, key
    or channel)."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or bool(_NOPERM.search(str(exc)))


def subscription_refused(
    exc: BaseException, address: str, name: str | None, command: str, user: str | None
) -> RedleaseError:
    """The error for a waiter whose subscription the server refused with ``exc``: a
    ``PermissionDeniedError`` naming the subscribe command even when the server named only
    the channel (an ACL without ``&`` for it)."""
    error = translate(exc, address, name, user=user)
    if isinstance(error, PermissionDeniedError) and not error.command:
        who = f"user {user}" if user else "the client's user"
        what = f" for lock {name!r}" if name else ""
        error = PermissionDeniedError(
            f"redis server {address} does not allow {who} to {command} to the channels a "
            f"waiter{what} listens on: {exc}",
            command=command,
            name=name,
        )
    return error


def key_type_shown(reply: Any) -> str:
    """What ``TYPE`` answered, as a ``WrongTypeError`` names it: "" for no key or a hash (a
    hash is what a lock is: the error then says it is not one of ours)."""
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return "" if text in ("none", "hash") else text


def needs_key_type(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis's own WRONGTYPE reply (which does not say the key's type)."""
    text = str(exc)
    return (
        isinstance(exc, redis.exceptions.ResponseError)
        and "WRONGTYPE" in text
        and _LUA_WRONGTYPE.search(text) is None
    )


def unavailable(exc: BaseException, address: str, name: str | None) -> ServerUnavailableError:
    what = f" for lock {name!r}" if name else ""
    why = str(exc)
    if isinstance(exc, redis.exceptions.ClusterError | redis.exceptions.SlotNotCoveredError):
        why = f"{why} (its hash slot is being migrated or failed over)"
    elif isinstance(exc, redis.exceptions.RedisClusterException):
        why = f"{why} (the cluster's layout could not be read)"
    return ServerUnavailableError(
        f"redis server {address} unavailable{what}: {why}", address=address, name=name
    )


def fresh_copy(exc: Exception) -> Exception:
    """A fresh exception like ``exc`` for each failed caller (one instance raised in many
    tasks would gather all their tracebacks)."""
    try:
        copy = type(exc)(*exc.args)
    except Exception:
        copy = redis.exceptions.ConnectionError(str(exc))
    copy.__cause__ = exc.__cause__
    return copy
