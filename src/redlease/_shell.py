"""What the sync and asyncio shells share: owner identity, the client's hold state, errors.

Nothing here blocks or awaits; each shell adds only its own I/O around it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from ._channels import ANY_NODE
from ._core.keys import LockKeys, PubSub, hash_slot
from ._core.lock import Acquired, Hold, HoldTable
from ._core.requests import Call, Replication
from ._core.watchdog import RenewalPolicy
from ._urls import sentinel_address
from .errors import (
    InvalidArgumentError,
    LeaseLostError,
    PermissionDeniedError,
    RedleaseError,
    ReplicaError,
    ServerError,
    ServerUnavailableError,
    WrongTypeError,
)
from .events import Listeners, LockEvent

log = logging.getLogger("redlease")

# --- owner identity -----------------------------------------------------------------------
# A hold belongs to "<client-id>:<owner-id>", as in Redisson. The client id is random and is
# minted again in a forked child; owner ids come from a process-wide counter, so neither a
# recycled thread ident nor a recycled id(task) can ever make two owners look the same.

_owner_ids = itertools.count(1)
_fork_generation = 0


_fork_safe: weakref.WeakSet[Any] = weakref.WeakSet()


def fork_safe(obj: Any) -> None:
    """Have ``obj._fresh_after_fork()`` run in a forked child before anything else: it
    gives ``obj`` fresh locks, since a lock that a thread of the parent held at the fork is
    never released in the child (that thread does not exist there)."""
    _fork_safe.add(obj)


def _after_fork_in_child() -> None:
    global _fork_generation, _owner_ids
    _fork_generation += 1
    _owner_ids = itertools.count(1)
    for obj in list(_fork_safe):  # never takes a lock the parent may have held
        obj._fresh_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_generation() -> int:
    return _fork_generation


def next_owner_id() -> int:
    return next(_owner_ids)


_request_ids = itertools.count(1)


def next_request_id() -> str:
    """The id of a release call, kept for its retries: the server remembers an owner's last
    final release by it, so it need only differ between one owner's releases (owners are
    never shared between processes), which a process-wide counter does without a syscall."""
    return str(next(_request_ids))


class ThreadOwners:
    """A fresh owner id for each thread (sync side), never reused."""

    def __init__(self) -> None:
        self._local = threading.local()

    def current(self) -> int:
        gen = fork_generation()
        if getattr(self._local, "generation", None) != gen:
            self._local.generation = gen
            self._local.owner = next_owner_id()
        owner: int = self._local.owner
        return owner


class TaskOwners:
    """A fresh owner id for each asyncio task (async side), never reused."""

    def __init__(self) -> None:
        self._ids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._generation = fork_generation()

    def current(self, task: Any) -> int:
        if self._generation != fork_generation():
            self._ids = weakref.WeakKeyDictionary()
            self._generation = fork_generation()
        owner = self._ids.get(task)
        if owner is None:
            owner = self._ids[task] = next_owner_id()
        return owner


# --- the client's state ---------------------------------------------------------------------


class RenewalSource(Protocol):
    """Leases other than lock holds that the client's one watchdog renews (lease permits)."""

    def renewal_calls(self, lease: float) -> list[tuple[Any, Call]]:
        """The calls to send this round, each with what it renews."""
        ...

    def renewal_done(self, batch: Any, reply: Any, sent_at: float) -> None: ...

    def renewal_failed(self, batch: Any, exc: Exception) -> None: ...


RenewalJob = tuple[Callable[[Any, float], None], Callable[[Exception], None], Call]
"""A renewal call with what to do with its reply (and when it was sent), or its error."""


HANDOFF_WINDOW = 1.0
"""Default seconds of the first lease of a waiter handed a released lock (or of its
reservation for a waiter that takes it itself)."""


class ClientState:
    """A client's id and confirmed holds, safe to touch from any thread.

    Local state changes only after the server confirmed (``granted``, ``released``); a lost
    lease is remembered per owner until that owner's next release raises it.
    """

    def __init__(
        self, watchdog_timeout: float, handoff_window: float, replication: Replication | None
    ) -> None:
        self.watchdog_timeout = watchdog_timeout
        self.handoff_ms = round(handoff_window * 1000)
        self.replication = replication
        self.mutex = threading.Lock()
        self._generation = fork_generation()
        fork_safe(self)
        self.id = str(uuid.uuid4())
        self.holds = HoldTable()
        self._lost: dict[tuple[str, str], LeaseLostError] = {}
        self.listeners = Listeners()
        self.renewal_sources: list[RenewalSource] = []
        self.pubsub = PubSub()
        """How this client's primitives publish and listen (shared by all their keys)."""
        self.renew_soon: Callable[[], None] = lambda: None
        """Wakes the watchdog to look again at when it must next renew (set by the watchdog)."""
        self.watchdog_wakes_at = 0.0
        """When the watchdog plans to wake next (monotonic; set by the watchdog)."""

    def add_renewal_source(self, source: RenewalSource) -> None:
        """Have the client's one watchdog renew ``source``'s leases too."""
        with self.mutex:
            if source not in self.renewal_sources:
                self.renewal_sources.append(source)

    def _fresh_after_fork(self) -> None:
        self.mutex = threading.Lock()

    def check_fork(self) -> bool:
        """In a forked child: new client id, no holds. Returns True when a fork was seen."""
        if self._generation == fork_generation():
            return False
        with self.mutex:
            self._generation = fork_generation()
            self.id = str(uuid.uuid4())
            self.holds = HoldTable()
            self._lost.clear()
            self.renewal_sources.clear()
        return True

    def owner(self, owner_id: int) -> str:
        return f"{self.id}:{owner_id}"

    def count(self, name: str, owner: str) -> int:
        with self.mutex:
            return self.holds.count(name, owner)

    def granted(
        self,
        keys: LockKeys,
        owner: str,
        acquired: Acquired,
        lease: float | None,
        listener: Callable[[LeaseLostError], None] | None,
        started: float,
    ) -> Hold:
        with self.mutex:
            self._lost.pop((keys.name, owner), None)
            old = self.holds.get(keys.name, owner)
            gone = old if old is not None and acquired.count == 1 else None
            hold = self.holds.granted(keys, owner, acquired, lease)
            hold.releasing, hold.release_id = False, None  # a re-entry ends a failed release
            if listener is not None and listener not in hold.listeners:
                hold.listeners.append(listener)
            short = lease is None and acquired.count == 1 and acquired.ttl < self.watchdog_timeout
            if short:
                # a hand-over's short first lease: renewed within a third of it, and counted
                # lost (should renewals fail) when it would run out, not a watchdog lease later
                hold.renewed_at = acquired.requested_at + acquired.ttl - self.watchdog_timeout
                hold.renew_by = acquired.requested_at + acquired.ttl / 3
                short = hold.renew_by < self.watchdog_wakes_at  # else it wakes in time anyway
        if gone is not None:
            self._found_gone(gone)
        if short:
            self.renew_soon()
        wait = time.monotonic() - started
        log.debug(
            "acquired lock %r owner %s count %d after %.3f s",
            keys.name,
            owner,
            acquired.count,
            wait,
            extra={"lock": keys.name, "owner": owner},
        )
        if self.listeners:
            self.listeners.send(
                LockEvent(
                    "acquired",
                    keys.name,
                    owner,
                    wait=wait,
                    hold_count=acquired.count,
                    fencing_token=acquired.token,
                )
            )
        return hold

    def acquire_failed(self, name: str, owner: str, started: float, *, gone: bool) -> None:
        """Not acquired. ``gone``: a reply showed the owner's hold gone on the server, so
        its record goes too (a re-entry given back as too late keeps the outer hold)."""
        if gone:
            with self.mutex:
                dropped = self.holds.drop(name, owner)
            if dropped is not None:
                self._found_gone(dropped)
        wait = time.monotonic() - started
        log.debug(
            "lock %r not acquired by owner %s after %.3f s",
            name,
            owner,
            wait,
            extra={"lock": name, "owner": owner},
        )
        if self.listeners:
            self.listeners.send(LockEvent("acquire_failed", name, owner, wait=wait))

    def _found_gone(self, hold: Hold) -> None:
        """An acquire found ``hold`` gone on the server (its record is already replaced or
        dropped). An explicit lease that ran out is how such a hold ends (Redisson's
        ``lock(leaseTime)``); a hold the watchdog renewed was lost, which its listeners are
        told and the owner's next release that finds nothing raises."""
        if not hold.watched or hold.releasing:
            return
        self.lease_lost(hold, lost_error(hold, "found gone by a later acquire"), dropped=True)

    def maybe_reentered(self, name: str, owner: str) -> None:
        """An acquire failed with an unknown outcome: if it was a re-entry, the server may
        count one hold more than we do, which the next release gives back too."""
        with self.mutex:
            hold = self.holds.get(name, owner)
            if hold is not None:
                hold.unsure = True

    def begin_release(self, name: str, owner: str) -> Hold | None:
        """The hold about to be released (marked so the watchdog leaves a final one alone)."""
        with self.mutex:
            hold = self.holds.get(name, owner)
            if hold is not None and hold.count == 1:
                hold.releasing = True
            return hold

    def released(self, hold: Hold, remaining: int) -> None:
        name, owner = hold.keys.name, hold.owner
        with self.mutex:
            self.holds.released(name, owner, remaining)
        held = time.monotonic() - hold.acquired_at
        log.debug(
            "released lock %r owner %s remaining %d after %.3f s",
            name,
            owner,
            remaining,
            held,
            extra={"lock": name, "owner": owner},
        )
        if self.listeners:
            self.listeners.send(
                LockEvent(
                    "released",
                    name,
                    owner,
                    held=held,
                    hold_count=remaining,
                    fencing_token=hold.token,
                )
            )

    def peek_lost(self, name: str, owner: str) -> bool:
        with self.mutex:
            return (name, owner) in self._lost

    def take_lost(self, name: str, owner: str) -> LeaseLostError | None:
        with self.mutex:
            return self._lost.pop((name, owner), None)

    def lease_lost(self, hold: Hold, error: LeaseLostError, *, dropped: bool = False) -> None:
        """Record that ``hold`` is gone on the server and tell its listeners (``dropped``:
        its record was already taken out of the table)."""
        with self.mutex:
            if not dropped and self.holds.drop(hold.keys.name, hold.owner, hold.epoch) is None:
                return  # released or re-acquired meanwhile: not a loss
            self._lost[(hold.keys.name, hold.owner)] = error
        log.warning("%s", error, extra={"lock": hold.keys.name, "owner": hold.owner})
        if self.listeners:
            self.listeners.send(
                LockEvent(
                    "lease_lost",
                    hold.keys.name,
                    hold.owner,
                    held=time.monotonic() - hold.acquired_at,
                    fencing_token=hold.token,
                    error=error,
                )
            )
        for listener in hold.listeners:
            try:
                listener(error)
            except Exception:
                log.exception("lease-lost callback for lock %r failed", hold.keys.name)

    def watchdog_wake(self, next_round: float) -> float:
        """When the watchdog must wake next: at its next round, or sooner for a hold whose
        short first lease is due (recorded, so that a hold due even sooner kicks it)."""
        with self.mutex:
            due = self.holds.renew_due()
            wake = next_round if due is None else min(next_round, due)
            self.watchdog_wakes_at = wake
        return wake

    def renewal_jobs(self, policy: RenewalPolicy, *, by_slot: bool) -> list[RenewalJob]:
        """A round's renewal calls: the watched holds' (batched), then each other source's."""
        with self.mutex:
            holds = self.holds.watched()
            sources = list(self.renewal_sources)
        jobs: list[RenewalJob] = [
            (
                functools.partial(self.renewal_done, batch),
                functools.partial(self.renewal_failed, batch, policy),
                call,
            )
            for batch, call in policy.calls(holds, by_slot=by_slot)
        ]
        for source in sources:
            jobs.extend(
                (
                    functools.partial(source.renewal_done, handle),
                    functools.partial(source.renewal_failed, handle),
                    call,
                )
                for handle, call in source.renewal_calls(policy.timeout)
            )
        return jobs

    def renewal_done(self, batch: list[Hold], reply: list[Any], sent_at: float) -> None:
        """Apply a renewal reply: renewed holds count from ``sent_at``; gone ones are lost."""
        for hold, renewed in zip(batch, reply, strict=True):
            if int(renewed):
                hold.renewed_at, hold.renew_by = sent_at, None
            elif not hold.releasing:
                self.lease_lost(hold, lost_error(hold, "the watchdog found it gone"))

    def renewal_failed(self, batch: list[Hold], policy: RenewalPolicy, exc: Exception) -> None:
        """A renewal round could not reach the server: holds past a whole lease are lost."""
        log.warning("lease renewal of %d locks failed: %s", len(batch), exc)
        now = time.monotonic()
        for hold in batch:
            if self.listeners:
                self.listeners.send(
                    LockEvent("renewal_failed", hold.keys.name, hold.owner, error=exc)
                )
            if policy.expired(hold.renewed_at, now):
                self.lease_lost(hold, lost_error(hold, "not renewed for a whole lease"))

    def forget(self, hold: Hold) -> None:
        with self.mutex:
            self.holds.drop(hold.keys.name, hold.owner, hold.epoch)

    def clear(self) -> None:
        with self.mutex:
            self.holds.clear()
            self._lost.clear()


def lost_error(hold: Hold, why: str) -> LeaseLostError:
    return LeaseLostError(
        f"lock {hold.keys.name!r}: lease of owner {hold.owner} lost ({why})",
        name=hold.keys.name,
        owner=hold.owner,
    )


# --- talking to redis -----------------------------------------------------------------------


def address_of(connection_kwargs: dict[str, Any]) -> str:
    """``host:port`` (or the socket path) of a connection, never with a password; for a
    Sentinel-managed master, ``sentinel <service> at <sentinels>``."""
    if "path" in connection_kwargs:
        return str(connection_kwargs["path"])
    sentinel = sentinel_of(connection_kwargs.get("connection_pool"))
    if sentinel is not None:
        return sentinel
    return f"{connection_kwargs.get('host', '?')}:{connection_kwargs.get('port', '?')}"


def sentinel_of(pool: Any) -> str | None:
    """``sentinel <service> at host:port,...`` when ``pool`` (or its proxy) is a Sentinel
    connection pool, else ``None``."""
    service = getattr(pool, "service_name", None)
    manager = getattr(pool, "sentinel_manager", None)
    if not isinstance(service, str) or manager is None:
        return None
    sentinels = []
    for each in getattr(manager, "sentinels", []):
        kwargs = each.connection_pool.connection_kwargs
        sentinels.append((kwargs.get("host", "?"), kwargs.get("port", "?")))
    return sentinel_address(service, sentinels)


def bounded_kwargs(connection_kwargs: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Settings for the watchdog's own connections: like the pool's, but a call never blocks
    longer than ``timeout`` (a hung server must not hide an expired lease) and is not retried."""
    kwargs = {
        key: value
        for key, value in connection_kwargs.items()
        if not key.startswith(("maint_notifications", "oss_cluster_maint"))
    }
    connect = kwargs.get("socket_connect_timeout")
    kwargs.update(
        socket_timeout=timeout,
        socket_connect_timeout=min(connect, timeout) if connect else timeout,
        retry=Retry(NoBackoff(), 0),
    )
    return kwargs


def subscriber_kwargs(connection_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Settings for a dedicated subscriber connection: the pool's own (host, TLS, ACL user,
    password, protocol), with no read timeout, health checks or maintenance notifications."""
    kwargs = {
        key: value
        for key, value in connection_kwargs.items()
        if not key.startswith(("maint_notifications", "oss_cluster_maint", "redis_connect_func"))
    }
    kwargs.update(health_check_interval=0, socket_timeout=None)
    return kwargs


Connect = Callable[[], tuple[Any, dict[str, Any], str]]
"""Opens a dedicated connection's way: (connection class, keyword arguments, ``host:port``)."""


def connection_source(client: Any) -> Connect:
    """Where a dedicated connection (the subscriber's) comes from: the client's own pool, or on
    a cluster a node picked anew at every (re)connect, so a failed node is left behind.
    Returns (connection class, keyword arguments, ``host:port``)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kwargs = subscriber_kwargs(pool.connection_kwargs)
        return lambda: (pool.connection_class, kwargs, address_of(kwargs))

    def pick_node() -> tuple[Any, dict[str, Any], str]:
        return node_connection(client.get_random_node())

    return pick_node


def node_connection(node: Any) -> tuple[Any, dict[str, Any], str]:
    """(connection class, keyword arguments, ``host:port``) of a dedicated subscriber
    connection to one cluster node."""
    node_pool = getattr(getattr(node, "redis_connection", None), "connection_pool", None)
    if node_pool is not None:  # redis.cluster
        cls, kwargs = node_pool.connection_class, node_pool.connection_kwargs
    else:  # redis.asyncio.cluster
        cls, kwargs = node.connection_class, node.connection_kwargs
    return cls, subscriber_kwargs(kwargs), f"{node.host}:{node.port}"


def slot_owner(client: Any, channel: str) -> tuple[Any, dict[str, Any], str]:
    """The subscriber connection to the master that serves ``channel``'s hash slot, as the
    cluster client last saw the cluster (no I/O; ``SlotNotCoveredError`` mid-failover)."""
    return node_connection(client.nodes_manager.get_node_from_slot(hash_slot(channel)))


def cluster_node_of(cluster: Any, call: Call) -> str | None:
    """The name of the cluster node ``call`` goes to (``None``: not a cluster, or not known)."""
    if cluster is None or not call.keys:
        return None
    try:
        return str(cluster.get_node_from_key(call.keys[0]).name)
    except Exception:
        return None


def renewal_down(exc: BaseException, address: str) -> ServerUnavailableError:
    """What a renewal call that could not reach its node (unreachable, timed out, a cluster
    error) is reported as: a ``ServerUnavailableError`` naming the server."""
    if isinstance(exc, ServerUnavailableError):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return unavailable(TimeoutError("renewal timed out"), address, None)
    return unavailable(exc, address, None)


def new_subscriber_connection(connect: Connect, connect_timeout: float) -> tuple[Any, str]:
    """A dedicated subscriber connection, not yet connected, and its ``host:port``; a node
    gone dark must not hang the subscriber, so connecting is bounded by default."""
    cls, kwargs, address = connect()
    if kwargs.get("socket_connect_timeout") is None:
        kwargs = {**kwargs, "socket_connect_timeout": connect_timeout}
    return cls(**kwargs), address


def subscriber_route(
    client: Any, channel: str, *, sharded: bool, source: Connect
) -> tuple[str, Connect]:
    """The link a subscription to ``channel`` goes on, and how to connect it: the one link of
    classic pub/sub (``ANY_NODE``, over ``source``), or with sharded pub/sub the master that
    serves the channel's slot (``SlotNotCoveredError`` while none does, mid-failover)."""
    if not sharded:
        return ANY_NODE, source
    cls, kwargs, address = slot_owner(client, channel)
    return address, lambda: (cls, kwargs, address)


SHARDED_PROBE = ("PUBSUB", "SHARDNUMSUB")
"""Asked once of every master of a cluster: an answer from each means sharded pub/sub (Redis
or Valkey >= 7); an error reply (Redis 6.2: an unknown subcommand) means classic pub/sub."""

PROBE_ERRORS = (OSError, redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
"""What asking a master can raise: an error reply refuses, anything else means unreachable."""


def settle_pubsub(
    pubsub: PubSub, answers: list[BaseException | None], address: str
) -> BaseException | None:
    """Settle a cluster client's pub/sub from its masters' answers to ``SHARDED_PROBE``
    (``None``: it answered; else what it raised): classic if one refused it, sharded if every
    master that could be reached answered. A master that is down does not hold the others
    back; when none could be reached nothing is settled, and the error to raise is returned."""
    refused = [
        a
        for a in answers
        if isinstance(a, redis.exceptions.ResponseError) and not isinstance(a, CONNECTION_ERRORS)
    ]
    if refused:
        log.debug("cluster %s has no sharded pub/sub (%s): classic pub/sub", address, refused[0])
        pubsub.settle(False)
    elif None in answers:
        log.debug("cluster %s: sharded pub/sub (SPUBLISH/SSUBSCRIBE)", address)
        pubsub.settle(True)
    else:
        return next((a for a in answers if a is not None), ConnectionError("no master"))
    return None


def user_of(client: Any) -> str | None:
    """The ACL user a redis client logs in as, if it names one (for error messages)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if kwargs is None:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None)
    user = (kwargs or {}).get("username")
    return user if isinstance(user, str) and user else None


def describe(client: Any) -> str:
    """``host:port`` of a client (the first startup node of a cluster); never a password."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return sentinel_of(pool) or address_of(pool.connection_kwargs)
    nodes = client.get_nodes() or []
    return f"cluster {nodes[0].host}:{nodes[0].port}" if nodes else "cluster"


def is_cluster(client: Any) -> bool:
    return getattr(client, "connection_pool", None) is None and hasattr(client, "get_nodes")


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
    if isinstance(exc, (*CONNECTION_ERRORS, redis.exceptions.RedisClusterException)):
        return unavailable(exc, address, name)
    if isinstance(exc, redis.exceptions.DataError):
        return InvalidArgumentError(f"redis-py refused an argument{what}: {text}")
    return ServerError(f"redis server {address} answered with an error{what}: {text}", name=name)


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
