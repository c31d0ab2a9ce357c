"""Talking to redis from either shell: addresses, dedicated connections, pub/sub
routing and settling (no I/O here; errors.py translates redis-py's errors)."""

from __future__ import annotations

import asyncio
import inspect
import queue
import re
from collections.abc import Callable
from typing import Any

import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._core.keys import PubSub, hash_slot
from .._core.log import log
from .._core.requests import Call
from ..errors import (
    InvalidArgumentError,
    ServerUnavailableError,
)
from .errors import CONNECTION_ERRORS, unavailable
from .urls import sentinel_address

ANY_NODE = ""
"""The one link of classic pub/sub (to whichever node the connection source picks)."""


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


def passwords_of(client: Any) -> list[str]:
    """The passwords a redis client logs in with (its server's, a cluster's, its sentinels'),
    to be masked wherever text written by the user may repeat them (a holder description)."""
    found: list[str] = []
    pool = getattr(client, "connection_pool", None)
    sources = [
        getattr(pool, "connection_kwargs", None),
        getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None),
    ]
    manager = getattr(pool, "sentinel_manager", None)
    for each in getattr(manager, "sentinels", []):
        sources.append(getattr(getattr(each, "connection_pool", None), "connection_kwargs", None))
    for kwargs in sources:
        password = (kwargs or {}).get("password")
        if isinstance(password, str) and password and password not in found:
            found.append(password)
    return found


def check_cluster_options(factory: Any, redis_kwargs: dict[str, Any]) -> None:
    """Refuse a keyword a cluster client of redis-py's ``factory`` does not take, before it
    connects: the asyncio ``RedisCluster`` would raise a raw ``TypeError``, the sync one drops
    an unknown keyword silently (only its nodes' client options go through)."""
    import redis.cluster  # (the cluster module only for cluster clients)

    params = inspect.signature(factory.__init__).parameters
    named = {"self", "startup_nodes", "host", "port"}
    allowed = {n for n, p in params.items() if p.kind is not p.VAR_KEYWORD} - named
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        allowed |= set(getattr(redis.cluster, "REDIS_ALLOWED_KEYS", ()))
    for key in redis_kwargs:
        if key not in allowed:
            raise InvalidArgumentError(
                f"from_url: unknown option {key!r}: neither a redlease client's nor one"
                f" redis-py's {factory.__name__} takes (a misspelling, or an option of another"
                " kind of URL)"
            )


def check_connection_options(client: Any) -> None:
    """Refuse a keyword no connection of ``client``'s pool takes (``from_url`` passes its
    unknown keywords to redis-py, which would raise a raw ``TypeError`` at the first command):
    a connection is made and dropped, never connected. Not for a cluster client."""
    pool = getattr(client, "connection_pool", None)
    connection_class = getattr(pool, "connection_class", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if connection_class is None or not isinstance(kwargs, dict):
        return
    try:
        connection_class(**kwargs)
    except TypeError as exc:
        found = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
        if found is None:
            return  # not about a keyword: redis-py says it at the first command, as before
        key = found.group(1)
        if key in inspect.signature(type(client).__init__).parameters and sentinel_of(pool):
            raise InvalidArgumentError(
                f"from_url: {key!r} is an option of redis-py's client itself, which a"
                " Sentinel URL's client cannot take (redis-py's Sentinel.master_for gives its"
                " options to the connections)"
            ) from None
        raise InvalidArgumentError(
            f"from_url: unknown option {key!r}: neither a redlease client's nor"
            f" one its {connection_class.__name__} takes (a misspelling, or an option of"
            " another kind of URL, such as ssl_* without rediss://)"
        ) from None


def describe(client: Any) -> str:
    """``host:port`` of a client (the first startup node of a cluster); never a password."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return sentinel_of(pool) or address_of(pool.connection_kwargs)
    nodes = client.get_nodes() or []
    if not nodes:  # an asyncio cluster client reads its layout at its first command
        manager = getattr(client, "nodes_manager", None)
        nodes = list(getattr(manager, "startup_nodes", {}).values())
    return f"cluster {nodes[0].host}:{nodes[0].port}" if nodes else "cluster"


CALL_HEADROOM = 8
"""Pool connections a client's script calls leave to everything else (its subscriber's, the
watchdog's, the user's own commands on the same ``redis`` client)."""

MAX_CALL_SLOTS = 1 << 20
"""Calls at once where the pool sets no useful bound (redis-py's sync default)."""


def call_slots(client: Any) -> int:
    """How many script calls a client runs at once: what its pool can serve, less
    ``CALL_HEADROOM``. A burst beyond it waits for a call to end instead of failing as
    redis-py's pool does when asked for more than ``max_connections`` ("Too many
    connections"). A cluster has a pool per node: no bound here."""
    most = getattr(getattr(client, "connection_pool", None), "max_connections", None)
    if not isinstance(most, int) or isinstance(most, bool) or most <= 0:
        return MAX_CALL_SLOTS
    return max(1, min(most - CALL_HEADROOM, MAX_CALL_SLOTS))


def call_tokens(client: Any) -> queue.SimpleQueue[None] | None:
    """A thread client's ``call_slots`` as tokens to take and give back (a ``SimpleQueue``:
    a tenth of a ``BoundedSemaphore``'s cost per call); ``None`` where the pool sets no
    useful bound."""
    slots = call_slots(client)
    if slots >= MAX_CALL_SLOTS:
        return None
    tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
    for _ in range(slots):
        tokens.put(None)
    return tokens


def is_cluster(client: Any) -> bool:
    return getattr(client, "connection_pool", None) is None and hasattr(client, "get_nodes")
