"""The part of ``Client`` and ``AsyncClient`` that does no I/O: options, state, listeners."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from .._core import arguments, fence
from .._core.arguments import Seconds, replication, seconds, window
from .._core.requests import Call, Operation, Replication
from .._core.watchdog import RenewalPolicy
from .._redis.connections import describe, is_cluster, passwords_of, user_of
from .._redis.servers import Eviction, ServerChecks, eviction_mode
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..events import Listener
from .holders import scrub_text
from .state import HANDOFF_WINDOW, ClientState

CLOSE_GRACE = 5.0
"""How long ``close()`` waits for the calls it stopped to leave their lines and give back
what was granted to them meanwhile."""

CALL_TIMEOUT = 5.0
"""Socket timeout (seconds) of a client made by ``from_url`` when none is given: a server
that stops answering fails a call after this long, on every redis-py version (before 8 the
default was none: a call could hang for ever). A script answers in milliseconds; a wait for
replicas adds ``replica_timeout``."""

CONNECT_TIMEOUT = 5.0
"""Socket connect timeout (seconds) of a client made by ``from_url`` when none is given."""


def default_timeouts(redis_kwargs: dict[str, Any], replicas: int, replica_timeout: Any) -> None:
    """Give ``redis_kwargs`` redlease's socket timeouts where the caller set none (an option
    in the URL still wins, as in redis-py's ``from_url``)."""
    if redis_kwargs.get("socket_timeout") is None:
        extra = seconds(replica_timeout, "replica_timeout") if replicas else 0.0
        redis_kwargs["socket_timeout"] = CALL_TIMEOUT + extra
    if redis_kwargs.get("socket_connect_timeout") is None:
        redis_kwargs["socket_connect_timeout"] = CONNECT_TIMEOUT


class StateViews:
    """What every client (single-master or Redlock) tells of its ``ClientState``."""

    _state: ClientState

    @property
    def watchdog_timeout(self) -> float:
        """Seconds a hold taken with no ``lease`` lasts unless renewed; the watchdog renews
        such holds every third of it."""
        return self._state.watchdog_timeout

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` for every ``LockEvent`` of this client's locks."""
        self._state.listeners.add(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener``, added by ``add_listener``."""
        self._state.listeners.remove(listener)


class ClientBase(StateViews):
    """Shared by both clients; each adds its own I/O (driver, subscriber, watchdog)."""

    _ASYNCIO: ClassVar[bool]
    """Whether this is the asyncio client (``AsyncClient``) or the thread one (``Client``)."""

    def __init__(
        self,
        redis_client: Any,
        *,
        watchdog_timeout: Seconds = 30.0,
        handoff_window: Seconds | None = HANDOFF_WINDOW,
        replicas: int = 0,
        replica_timeout: Seconds = 1.0,
        eviction: Eviction = "warn",
        holder_info: str | None = None,
    ) -> None:
        if holder_info is not None and not isinstance(holder_info, str):
            raise ArgumentTypeError(f"holder_info must be a str, got {type(holder_info).__name__}")
        self._holder_info = (
            scrub_text(holder_info, secrets=passwords_of(redis_client)) if holder_info else None
        )
        """What this client's holders do, shown by ``redlease status`` (passwords masked: the
        client's own wherever they appear, e.g. in a ``sh -c`` script, and what looks like one)."""
        self._checks = ServerChecks(eviction_mode(eviction))
        """The first-use check of each server (its eviction policy), see ``_servers``."""
        self.redis = redis_client
        """The redis-py client the client sends its commands through (yours, or made by
        ``from_url``)."""
        self._state = ClientState(
            seconds(watchdog_timeout, "watchdog_timeout"),
            window(handoff_window, "handoff_window"),
            replication(replicas, replica_timeout),
        )
        self._policy = RenewalPolicy(self._state.watchdog_timeout)
        self.address = describe(redis_client)
        """The server's address, as shown in errors and logs (never a password)."""
        self._user = user_of(redis_client)
        self.cluster = is_cluster(redis_client)
        """Whether the server is a Redis Cluster."""
        if self.cluster and self._state.replication is not None:
            raise InvalidArgumentError("replica-confirmed writes are not supported on a cluster")
        if not self.cluster:  # a cluster's masters are asked before the first operation
            self._state.pubsub.settle(False)
        self._owns_redis = False
        self._sentinels: list[Any] = []  # clients of the sentinels, closed with the client
        self._closed = False
        self._script_loads: dict[str, int] = {}
        """SCRIPT LOADs this client made, per script (SHA-1): see ``_load_once``."""
        self._script_loading: dict[str, Any] = {}
        """The load of each script under way: an event set when it ends."""

    @property
    def id(self) -> str:
        """This client's id: the first half of every owner field it writes (a new one in a
        forked child)."""
        return self._state.id

    def __repr__(self) -> str:
        return f"<redlease.{type(self).__name__} {self.address} id={self._state.id}>"

    @staticmethod
    def _fenced_get_op(key: str, token: int) -> Operation[bytes | str | None]:
        arguments.fencing_token(token)
        return fence.fenced_get(key, token)

    @staticmethod
    def _fenced_set_op(key: str, value: str | bytes, token: int, px: int | None) -> Operation[None]:
        arguments.fencing_token(token)
        if px is not None:
            arguments.milliseconds(px, "px")
        return fence.fenced_set(key, value, token, px or 0)


class RenewingClient(Protocol):
    """What a watchdog (``_asyncio/watchdog.py``, ``_threads/watchdog.py``) uses of its client
    (a shell's ``AsyncClient`` or ``Client``): an engine does not import its shell."""

    @property
    def address(self) -> str: ...

    @property
    def cluster(self) -> bool: ...

    @property
    def redis(self) -> Any: ...

    @property
    def _policy(self) -> RenewalPolicy: ...

    @property
    def _state(self) -> ClientState: ...

    @property
    def _checks(self) -> ServerChecks: ...

    def _call(
        self, call: Call, name: str | None, replication: Replication | None = None, via: Any = None
    ) -> Any: ...

    def _write_record(self, via: Any = None) -> Any: ...
