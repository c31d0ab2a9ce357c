"""The ``REDLEASE`` setting and the clients made from it: one ``Client`` per process, one
``AsyncClient`` per event loop, each made on first use (so after a gunicorn or uwsgi fork)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from ... import AsyncClient, Client, InvalidArgumentError, RedleaseError
from ...events import Listener
from .. import _listeners

SETTING = "REDLEASE"
KEYS = ("URL", "CACHE", "OPTIONS", "KEY_PREFIX", "ON_BUSY", "LISTENERS")
CLIENT_OPTIONS = ("watchdog_timeout", "handoff_window", "replicas", "replica_timeout")
"""The options of ``Client(...)``: all that ``OPTIONS`` may hold with ``CACHE`` (the Redis
client is the cache's)."""
DEFAULT_ON_BUSY = 409
EXAMPLE = "REDLEASE = {'URL': 'redis://localhost:6379/0'} or {'CACHE': 'default'}"

DJANGO_REDIS = "django_redis"
DJANGO_CACHE = "django.core.cache.backends.redis.RedisCache"

ASYNC_CONNECTIONS = {
    redis.connection.Connection: redis.asyncio.Connection,
    redis.connection.SSLConnection: redis.asyncio.SSLConnection,
    redis.connection.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
}
"""The asyncio twin of each connection class a cache's pool may use."""
COPIED = (
    "host",
    "port",
    "path",
    "db",
    "username",
    "password",
    "credential_provider",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
    "client_name",
    "health_check_interval",
    "protocol",
)
"""What an event loop's client takes from the cache's connection settings: the server, the
credentials, the timeouts (and ``ssl_*`` for TLS). Never the parser, the retry object or
anything else made for redis-py's sync side."""


@dataclass(frozen=True)
class Config:
    """``settings.REDLEASE``, checked."""

    url: str | None = None
    cache: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    key_prefix: str = ""
    on_busy: int | str = DEFAULT_ON_BUSY
    listeners: tuple[Listener, ...] = ()
    """Added to every client made from the setting: each process's, each event loop's."""


URL_HINT = f"Set {EXAMPLE} (see the redlease docs, Django)."
OPTIONS_HINT = (
    "OPTIONS are keyword arguments of redlease.Client.from_url, e.g. {'watchdog_timeout': 30}"
    f" (with CACHE only {', '.join(CLIENT_OPTIONS)})."
)
ON_BUSY_HINT = (
    "ON_BUSY is what a busy @exclusive view answers by default: an HTTP status such as 409"
    " (the default) or 423, or 'raise' (LockTimeoutError, for a middleware to handle)."
)
KEY_PREFIX_HINT = "KEY_PREFIX is a str put before every lock name, e.g. 'myapp:'."
LISTENERS_HINT = (
    "LISTENERS is a list of callables taking a LockEvent, or dotted paths to one, e.g."
    " ['myapp.metrics.redlease_metrics'] for a redlease.metrics.PrometheusMetrics instance."
)


class SettingError(ImproperlyConfigured):  # type: ignore[misc]
    """A wrong ``REDLEASE`` setting, with the hint ``manage.py check`` shows for it."""

    def __init__(self, message: str, hint: str = URL_HINT) -> None:
        super().__init__(message)
        self.hint = hint


def _bad(message: str, hint: str = URL_HINT) -> SettingError:
    return SettingError(f"{SETTING}: {message}", hint)


def read_config() -> Config:
    """``settings.REDLEASE`` checked, or ``ImproperlyConfigured`` saying what is wrong (never
    quoting the URL: it may carry a password)."""
    raw = getattr(settings, SETTING, None)
    if raw is None:
        raise ImproperlyConfigured(f"the {SETTING} setting is missing: set {EXAMPLE}")
    if not isinstance(raw, Mapping):
        raise _bad(f"must be a dict, not {type(raw).__name__}: {EXAMPLE}")
    unknown = sorted(str(k) for k in raw if k not in KEYS)
    if unknown:
        raise _bad(
            f"unknown key(s) {', '.join(unknown)}; the keys are {', '.join(KEYS)}",
            f"The keys of REDLEASE are {', '.join(KEYS)}.",
        )
    url, cache = raw.get("URL"), raw.get("CACHE")
    if (url is None) == (cache is None):
        raise _bad(f"give one of URL and CACHE: {EXAMPLE}")
    if url is not None and (not isinstance(url, str) or not url):
        raise _bad(
            "URL must be a Redis URL string (redis://, rediss://, unix://, redis+sentinel://)"
        )
    if cache is not None:
        _check_cache(cache)
    options = raw.get("OPTIONS", {})
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise _bad("OPTIONS must be a dict of keyword arguments of redlease.Client", OPTIONS_HINT)
    if cache is not None:
        extra = sorted(set(options) - set(CLIENT_OPTIONS))
        if extra:
            raise _bad(
                f"OPTIONS {', '.join(extra)} cannot be used with CACHE (the Redis connection"
                f" is the cache's); the client options are {', '.join(CLIENT_OPTIONS)}",
                OPTIONS_HINT,
            )
    prefix = raw.get("KEY_PREFIX", "")
    if not isinstance(prefix, str):
        raise _bad("KEY_PREFIX must be a str", KEY_PREFIX_HINT)
    on_busy = raw.get("ON_BUSY", DEFAULT_ON_BUSY)
    if not (is_status(on_busy) or on_busy == "raise"):
        raise _bad(
            f"ON_BUSY must be an HTTP status (e.g. 409 or 423) or 'raise', not {on_busy!r}",
            ON_BUSY_HINT,
        )
    try:
        listeners = _listeners("LISTENERS", raw.get("LISTENERS", ()))
    except InvalidArgumentError as exc:
        raise _bad(str(exc), LISTENERS_HINT) from None
    return Config(
        url=url,
        cache=cache,
        options=dict(options),
        key_prefix=prefix,
        on_busy=on_busy,
        listeners=listeners,
    )


def is_status(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599


def _check_cache(alias: object) -> None:
    caches = getattr(settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        raise _bad(
            f"CACHE = {alias!r} is not a cache alias of settings.CACHES"
            f" (the aliases are {', '.join(map(repr, caches)) or 'none'})"
        )
    backend = str(caches[alias].get("BACKEND", ""))
    if not (backend.startswith(f"{DJANGO_REDIS}.") or backend == DJANGO_CACHE):
        raise _bad(
            f"CACHE = {alias!r} uses {backend or 'no BACKEND'}, not a Redis cache: use"
            f" django-redis (django_redis.cache.RedisCache) or {DJANGO_CACHE}, or give a URL"
        )


def _cache_redis(alias: str) -> redis.Redis:
    """The cache's own Redis client (the one that writes: its first server)."""
    from django.core.cache import caches

    backend = str(settings.CACHES[alias].get("BACKEND", ""))
    cache: Any = caches[alias]
    try:
        if backend.startswith(f"{DJANGO_REDIS}."):
            from django_redis import get_redis_connection

            made = get_redis_connection(alias, write=True)
        else:  # Django's own RedisCache: no lock of its own, but its client is reachable
            made = cache._cache.get_client(write=True)
    except NotImplementedError as exc:  # django-redis's sharded client, for one
        raise _bad(
            f"CACHE = {alias!r}: its client gives no single Redis connection ({exc})"
        ) from None
    if not isinstance(made, redis.Redis):
        raise _bad(
            f"CACHE = {alias!r} gives a {type(made).__name__}, not a redis.Redis: give a URL"
        )
    return made


def _async_twin(sync: redis.Redis) -> redis.asyncio.Redis:
    """A ``redis.asyncio.Redis`` to the same server as ``sync`` with its credentials, TLS
    and timeouts, and at most as many connections."""
    pool = sync.connection_pool
    connection_class = ASYNC_CONNECTIONS.get(pool.connection_class)
    if connection_class is None:
        raise _bad(
            f"the cache's connections are {pool.connection_class.__name__}, which has no"
            " asyncio twin here: give a URL for async views"
        )
    given = pool.connection_kwargs
    kwargs = {k: given[k] for k in COPIED if k in given}
    if connection_class is redis.asyncio.SSLConnection:
        kwargs.update({k: v for k, v in given.items() if k.startswith("ssl_")})
    twin = redis.asyncio.ConnectionPool(
        connection_class=connection_class,
        max_connections=pool.max_connections,
        **kwargs,
    )
    return redis.asyncio.Redis.from_pool(twin)  # closes the pool with it


def _wrapped(error: Exception, config: Config) -> ImproperlyConfigured:
    if config.url is None:
        return _bad(f"OPTIONS: {type(error).__name__}: {error}", OPTIONS_HINT)
    try:  # the URL alone (no I/O): if it makes a client, OPTIONS are what is wrong
        Client.from_url(config.url).close()
    except (RedleaseError, TypeError, ValueError):
        hint = (
            "Check the URL: redis://[[user]:password@]host[:port][/db], rediss://...,"
            " unix:///path or redis+sentinel://host[:port][,host[:port]...]/service[/db]."
        )
    else:
        hint = OPTIONS_HINT
    return _bad(f"URL/OPTIONS: {type(error).__name__}: {error}", hint)


def _make_sync(config: Config) -> Client:
    try:
        if config.url is not None:
            client = Client.from_url(config.url, **config.options)
        else:
            assert config.cache is not None
            client = Client(_cache_redis(config.cache), **config.options)
    except (RedleaseError, TypeError, ValueError) as exc:
        raise _wrapped(exc, config) from None
    for listener in config.listeners:
        client.add_listener(listener)
    return client


def make_unused(config: Config) -> None:
    """Make the client of a ``URL`` setting and close it unused (``manage.py check``): the
    URL's and the options' mistakes as ``ImproperlyConfigured``, with no I/O."""
    _make_sync(config).close()


def _make_async(config: Config) -> tuple[AsyncClient, redis.asyncio.Redis | None]:
    """The client, and the Redis client made for it that closes after it (``CACHE``)."""
    twin = None
    try:
        if config.url is not None:
            client = AsyncClient.from_url(config.url, **config.options)
        else:
            assert config.cache is not None
            twin = _async_twin(_cache_redis(config.cache))
            client = AsyncClient(twin, **config.options)
    except (RedleaseError, TypeError, ValueError) as exc:
        raise _wrapped(exc, config) from None
    for listener in config.listeners:
        client.add_listener(listener)
    return client, twin


# --- one client per process, one async client per event loop ------------------------------


@dataclass
class _State:
    pid: int = -1
    config: Config | None = None
    client: Client | None = None
    loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = field(
        default_factory=weakref.WeakKeyDictionary
    )


@dataclass
class _LoopClient:
    client: AsyncClient
    twin: redis.asyncio.Redis | None
    closer: AsyncIterator[None] | None = None
    """Kept alive with the loop: its ``finally`` closes the client when the loop shuts its
    async generators down (``asyncio.run`` does, so do asgiref's ``async_to_sync`` and
    uvicorn)."""
    closed: bool = False

    async def close(self) -> None:
        self.closed = True
        try:
            await self.client.close()
        finally:
            if self.twin is not None:
                await self.twin.aclose()


_state = _State()
_mutex = threading.Lock()


def _fresh_after_fork() -> None:
    global _mutex, _state
    _mutex = threading.Lock()  # a thread of the parent may have held it at the fork
    _state = _State()  # the parent's clients are the parent's: never used here


os.register_at_fork(after_in_child=_fresh_after_fork)


def _current() -> _State:
    """This process's state (a child forked without our hook: the pid tells)."""
    global _state
    if _state.pid != os.getpid():
        _state = _State(pid=os.getpid())
    return _state


def config() -> Config:
    with _mutex:
        state = _current()
        if state.config is None:
            state.config = read_config()
        return state.config


def get_client() -> Client:
    """This process's ``redlease.Client``, made from ``settings.REDLEASE`` on first use (a
    forked child, such as a gunicorn or uwsgi worker, makes its own)."""
    with _mutex:
        state = _current()
        if state.config is None:
            state.config = read_config()
        if state.client is None:
            state.client = _make_sync(state.config)
        return state.client


def get_async_client() -> AsyncClient:
    """The running event loop's ``redlease.AsyncClient``, made from ``settings.REDLEASE`` on
    first use in that loop and closed when the loop ends (``asyncio.run``, uvicorn, and
    ``async_to_sync``, which runs each async view of a WSGI server in a loop of its own)."""
    loop = asyncio.get_running_loop()  # RuntimeError outside a coroutine, as asyncio says
    with _mutex:
        state = _current()
        held = state.loops.get(loop)
        if held is not None and not held.closed:
            return held.client
        if state.config is None:
            state.config = read_config()
        held = _LoopClient(*_make_async(state.config))
        held.closer = _closes(held)
        # The generator's first step, taken now: the running loop's asyncgen hooks (set for
        # this thread while it runs) record it, and the loop's shutdown_asyncgens() runs its
        # finally. It yields at once, so one send() takes the step.
        with contextlib.suppress(StopIteration):
            held.closer.__anext__().send(None)  # type: ignore[attr-defined]
        state.loops[loop] = held
        return held.client


async def _closes(held: _LoopClient) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await held.close()


def reset() -> None:
    """Forget the clients and the settings read (``REDLEASE`` changed: ``override_settings``);
    this process's ``Client`` is closed, each loop's client closes with its loop."""
    global _state
    with _mutex:
        old, _state = _state, _State(pid=os.getpid())
    if old.pid == os.getpid() and old.client is not None:
        old.client.close()


def _setting_changed(*, setting: str, **_: Any) -> None:
    if setting in (SETTING, "CACHES"):
        reset()


setting_changed.connect(_setting_changed, dispatch_uid="redlease.contrib.django")
