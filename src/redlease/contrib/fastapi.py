"""FastAPI and Starlette: one ``AsyncClient`` per app, a lock per request, leader-only tasks.

Built on redlease's public API (install with ``pip install 'redlease[fastapi]'``):

- ``lifespan(url, **options)`` makes one ``AsyncClient`` when the app starts, puts it on
  ``app.state.redlease`` (and in the lifespan state: ``request.state.redlease``) and closes it
  when the app stops. Pass it as ``FastAPI(lifespan=lifespan(url))`` (or Starlette's
  ``lifespan=``), or enter it from the app's own lifespan: ``async with
  redlease_lifespan(app):``. A client belongs to the event loop it is first used on, and each
  ``TestClient`` runs a loop of its own: the lifespan makes one per run of the app.
- ``Depends(exclusive("order:{order_id}", timeout=2, on_busy=409))`` holds a lock named after the
  request's path and query parameters while the request is handled, and answers ``on_busy``
  when the lock stayed busy for ``timeout`` seconds. It gives the handler the ``Lease`` (its
  ``fencing_token``).
- ``leader_task(name, fn)`` runs ``fn`` in the one instance of the app that leads the
  election ``name`` (``AsyncClient.election``), cancels it when that instance loses the
  leadership or stops, and campaigns again meanwhile.

``lifespan`` and ``leader_task`` need Starlette only; ``exclusive`` needs FastAPI (formerly
``lock``, a deprecated alias).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import string
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any, NoReturn

from . import _missing_extra

try:
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
except ModuleNotFoundError as exc:  # the framework is an extra
    raise _missing_extra(exc, "fastapi", "fastapi") from exc

from .. import (
    AsyncClient,
    AsyncLock,
    AsyncTerm,
    ClientClosedError,
    InvalidArgumentError,
    Lease,
    LeaseLostError,
    LockTimeoutError,
    RedleaseError,
    Seconds,
)
from ..errors import refuse_unknown
from ..events import Listener
from . import _listeners

__all__ = ["LeaderTask", "Lifespan", "exclusive", "get_client", "leader_task", "lifespan"]

log = logging.getLogger(__name__)

STATE = "redlease"
"""The name of the client on ``app.state`` and in the lifespan state (``request.state``)."""
RELEASE_WAIT = 10.0
"""How long the end of a request waits for its lock's release (it goes on beyond, unseen)."""
STOP_WAIT = 10.0
"""How long the app's shutdown waits for a leader task to stop and resign."""


# --- the client -----------------------------------------------------------------------------


class Lifespan:
    """``lifespan(url, **options)``: called with the app, an async context manager that makes
    the app's ``AsyncClient``, puts it on ``app.state.redlease``, starts the leader tasks,
    and on the way out stops them and closes the client. It yields the lifespan state
    ``{"redlease": client}`` (so ``request.state.redlease`` is the client too)."""

    def __init__(
        self,
        url: str,
        *,
        leader_tasks: Iterable[LeaderTask] = (),
        listeners: Iterable[Listener | str] = (),
        **options: Any,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidArgumentError(f"lifespan: url must be a Redis URL, got {url!r}")
        tasks = tuple(leader_tasks)
        for task in tasks:
            if not isinstance(task, LeaderTask):
                raise InvalidArgumentError(
                    f"lifespan: leader_tasks takes leader_task(...) objects, got {task!r}"
                )
        self.url = url
        self.options = options
        self.leader_tasks = tasks
        self.listeners = _listeners("lifespan: listeners", listeners)

    def __call__(self, app: Any) -> AbstractAsyncContextManager[dict[str, Any]]:
        return self._running(app)

    @asynccontextmanager
    async def _running(self, app: Any) -> AsyncIterator[dict[str, Any]]:
        check_routes(app)  # a lock name's missing field: an error at start-up, not per request
        client = AsyncClient.from_url(self.url, **self.options)
        for listener in self.listeners:  # each run of the app (each event loop) has its client
            client.add_listener(listener)
        app.state.redlease = client
        try:
            async with contextlib.AsyncExitStack() as stack:
                for task in self.leader_tasks:
                    await stack.enter_async_context(task(client))
                yield {STATE: client}
        finally:
            if getattr(app.state, STATE, None) is client:  # not left behind, closed
                delattr(app.state, STATE)
            await client.close()

    def __repr__(self) -> str:
        return "<redlease.contrib.fastapi.Lifespan>"  # not the URL: it may carry a password


def lifespan(
    url: str,
    *,
    leader_tasks: Iterable[LeaderTask] = (),
    listeners: Iterable[Listener | str] = (),
    **options: Any,
) -> Lifespan:
    """The app's redlease client, made at start-up and closed at shutdown:
    ``FastAPI(lifespan=lifespan(url))``, or ``async with lifespan(url)(app):`` in the app's
    own lifespan. ``options`` are ``AsyncClient.from_url``'s (``watchdog_timeout``,
    ``max_connections``, ...). ``leader_tasks`` run while the app runs (see ``leader_task``).
    ``listeners`` are added to the client each run of the app makes (every worker process,
    every event loop): callables taking a ``LockEvent`` (a ``PrometheusMetrics``), or dotted
    paths to one.
    """
    return Lifespan(url, leader_tasks=leader_tasks, listeners=listeners, **options)


def get_client(request: Request) -> AsyncClient:
    """The app's client (``Depends(get_client)`` in an endpoint): the lifespan state's, else
    ``app.state.redlease``."""
    client = getattr(request.state, STATE, None)
    if client is None:
        client = getattr(request.app.state, STATE, None)
    if not isinstance(client, AsyncClient):
        if isinstance(getattr(request.app.router, "lifespan_context", None), Lifespan):
            raise InvalidArgumentError(
                "no redlease client on this app: its lifespan has not run (or has ended)."
                " The client is made when the app starts: use `with TestClient(app) as"
                " http:` (TestClient(app) alone runs no lifespan), and a server with its"
                " lifespan on (uvicorn --lifespan on)"
            )
        raise InvalidArgumentError(
            "no redlease client on this app: create it with"
            " FastAPI(lifespan=redlease.contrib.fastapi.lifespan(url)), or enter"
            " redlease.contrib.fastapi.lifespan(url)(app) in the app's own lifespan; if you"
            " did, the lifespan has not run: use `with TestClient(app) as http:`"
        )
    return client


# --- a lock per request ---------------------------------------------------------------------


class _LockSpec:
    """What ``exclusive(...)`` was given, checked."""

    def __init__(
        self,
        name: str | Callable[..., Any],
        timeout: float | None,
        on_busy: int,
        retry_after: int | None,
        lease: float | None,
        fair: bool,
        on_lost: str = "log",
    ) -> None:
        self.template = name if isinstance(name, str) else None
        self.fields = _fields(name) if isinstance(name, str) else ()
        self.timeout = timeout
        self.on_busy = on_busy
        self.retry_after = retry_after
        self.lease = lease
        self.fair = fair
        self.on_lost = on_lost
        self._holders: set[asyncio.Task[LeaseLostError | None]] = set()

    def name_for(self, request: Request) -> str:
        """The lock name: the template formatted with the request's path parameters, else its
        query parameters (their text, as in the URL)."""
        assert self.template is not None
        values: dict[str, str] = {}
        for field in self.fields:
            if field in request.path_params:
                values[field] = str(request.path_params[field])
            elif field in request.query_params:
                values[field] = request.query_params[field]
            else:
                route = request.scope.get("route")
                if field in _route_fields(route)[1]:  # a query parameter the request lacks
                    from fastapi.exceptions import RequestValidationError

                    raise RequestValidationError(
                        [
                            {
                                "type": "missing",
                                "loc": ("query", field),
                                "msg": f"Field required (by the lock name {self.template!r})",
                                "input": None,
                            }
                        ]
                    )
                raise InvalidArgumentError(_missing(self.template, field, route))
        return self.template.format_map(values)

    @asynccontextmanager
    async def held(self, request: Request, name: str) -> AsyncIterator[Lease]:
        """Hold the lock ``name`` for the block. The hold is taken and given back by a task of
        its own, so that the request's own task structure (a dependency's exit run in
        another task, an anyio cancel scope cancelling every await) cannot keep it held."""
        client = get_client(request)
        lock: AsyncLock
        if self.fair:
            lock = client.fair_lock(name, lease=self.lease)
        else:
            lock = client.lock(name, lease=self.lease)
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[Lease] = loop.create_future()
        leave = asyncio.Event()
        holder = loop.create_task(self._hold(lock, granted, leave), name=f"redlease:{name}")
        self._holders.add(holder)  # a reference until it is done
        holder.add_done_callback(self._holders.discard)
        try:
            lease = await granted
        except asyncio.CancelledError:
            holder.cancel()  # the acquire is abandoned: a hold granted meanwhile is given back
            raise
        except LockTimeoutError:
            raise self._busy() from None
        failed = True
        try:
            yield lease
            failed = False
        finally:
            leave.set()
            lost = None
            try:  # the release, whatever ends the request (it goes on if this wait is cut)
                lost = await asyncio.wait_for(asyncio.shield(holder), RELEASE_WAIT)
            except asyncio.TimeoutError:
                log.warning("lock %r: the release is taking more than %s s", name, RELEASE_WAIT)
            if lost is not None:
                if self.on_lost == "raise" and not failed:
                    raise lost
                log.warning(
                    "lock %r was lost before the request ended (cause %s): %s",
                    name,
                    lost.cause,
                    "its error stands" if failed else "its response is kept",
                )

    async def _hold(
        self, lock: Any, granted: asyncio.Future[Lease], leave: asyncio.Event
    ) -> LeaseLostError | None:
        """Take the hold, hand its ``Lease`` to the request, release it when told; the
        ``LeaseLostError`` of a hold found lost at its release."""
        got = False
        try:
            async with lock.hold(timeout=self.timeout) as lease:  # 0: one try
                got = True
                if granted.done():  # the request was cancelled meanwhile
                    return None
                granted.set_result(lease)
                await leave.wait()
        except asyncio.CancelledError:
            if not granted.done():
                granted.cancel()
            raise
        except Exception as exc:
            if not granted.done():
                granted.set_exception(exc)
            elif isinstance(exc, LeaseLostError):
                return exc
            elif got:
                log.error("lock %r: the release failed: %s", lock.name, exc)
        return None

    def _busy(self) -> HTTPException:
        waited = f"; waited {self.timeout:g} s" if self.timeout else ""
        retry_after = self.retry_after
        if retry_after is None and self.on_busy in (429, 503):
            retry_after = 1
        headers = None if retry_after is None else {"Retry-After": str(retry_after)}
        return HTTPException(
            self.on_busy,
            # the lock's name is the server's own business: never shown to the client
            detail=f"busy: this resource is in use by another request{waited}",
            headers=headers,
        )


def exclusive(
    name: str | Callable[..., Any],
    *,
    timeout: Seconds | None = 0,
    on_busy: int = 409,
    retry_after: int | None = None,
    lease: Seconds | None = None,
    fair: bool = False,
    on_lost: str = "log",
    **unknown: NoReturn,
) -> Callable[..., AsyncIterator[Lease]]:
    """A FastAPI dependency that holds a lock while the request is handled:
    ``lease = Depends(exclusive("order:{order_id}", timeout=2, on_busy=409))``.

    ``name`` is a format string whose fields are path parameters or query parameters of the
    route (their text, as in the URL; checked when the app starts with ``lifespan``), or a
    dependency returning the name (its parameters validated by FastAPI as an endpoint's).
    ``timeout`` is how long a request waits for a busy lock, as everywhere in redlease (``0``,
    the default here: one try, since a request that queues behind another holds its connection
    and a worker's slot; ``None``: as long as it takes); when it runs out the request is
    answered ``on_busy`` (an HTTP status, 409 by default) with the detail ``"busy: this
    resource is in use by another request; waited 2 s"`` (the lock's name is not shown to the
    client), and a ``Retry-After: retry_after`` header (default: 1 s for 429 and 503, none
    otherwise). ``lease`` is an explicit lease (default: the watchdog renews the hold as long
    as the request runs); ``fair=True`` takes a fair lock. ``on_lost`` is what a request whose
    hold was lost before its release (force-released, expired) does: ``"log"`` (the default:
    its response is kept, the loss logged at WARNING) or ``"raise"`` (``LeaseLostError`` from
    the dependency's exit, where the request did not fail already: a 500 with
    ``scope="function"``; after the response with the default scope, where it reaches the
    server's error log only). Either way the client's listeners are told (``lease_lost``,
    counted by ``redlease.metrics``).

    The dependency yields the ``Lease`` (``lease.fencing_token``). The hold is released at the
    dependency's exit, whatever ends the request (a response, an error, a cancellation, the
    client gone): with FastAPI's default ``Depends`` scope, after the response is sent (its
    streamed body and background tasks included); with ``Depends(..., scope="function")``,
    as soon as the endpoint returns, before the response is sent.
    """
    refuse_unknown("exclusive()", unknown, LOCK_OPTIONS)
    if not (isinstance(name, str) and name) and not callable(name):
        raise InvalidArgumentError(
            f"exclusive: name must be a format string or a callable, got {name!r}"
        )
    spec = _LockSpec(
        name,
        _seconds(timeout, "timeout"),
        _status(on_busy),
        _retry_after(retry_after),
        _lease(lease),
        _flag(fair, "fair"),
        _on_lost(on_lost),
    )
    if isinstance(name, str):

        async def dependency(request: Request) -> AsyncIterator[Lease]:
            async with spec.held(request, spec.name_for(request)) as lease:
                yield lease

    else:
        from fastapi import Depends

        named = name

        async def dependency(  # type: ignore[misc]
            request: Request, lock_name: str = Depends(named)
        ) -> AsyncIterator[Lease]:
            if not isinstance(lock_name, str) or not lock_name:
                raise InvalidArgumentError(
                    f"exclusive: {named!r} returned {lock_name!r}, not a name"
                )
            async with spec.held(request, lock_name) as lease:
                yield lease

    _SPECS[dependency] = spec
    return dependency


LOCK_OPTIONS = ("timeout", "on_busy", "retry_after", "lease", "fair", "on_lost")
"""``exclusive()``'s keyword options (a misspelt one is named in an error listing these)."""

_SPECS: weakref.WeakKeyDictionary[Callable[..., Any], _LockSpec] = weakref.WeakKeyDictionary()
"""The dependencies ``exclusive()`` made: what the start-up check looks for in the routes."""


def _fields(template: str) -> tuple[str, ...]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InvalidArgumentError(f"exclusive: bad name template {template!r}: {exc}") from None
    fields: list[str] = []
    for _, field, _, _ in parsed:
        if field is None:
            continue
        if not field.isidentifier():
            raise InvalidArgumentError(
                f"lock: name template {template!r}: field {{{field}}} must be a parameter "
                "name (no positional fields, attributes or indexes)"
            )
        if field not in fields:
            fields.append(field)
    try:
        template.format_map(dict.fromkeys(fields, "x"))
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"exclusive: bad name template {template!r}: {exc}") from None
    return tuple(fields)


def _seconds(value: Any, option: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgumentError(f"lock: {option} must be seconds or None, got {value!r}")
    if value < 0:
        raise InvalidArgumentError(f"lock: {option} must be >= 0, got {value!r}")
    return float(value)


def _lease(value: Any) -> float | None:
    if value is None:
        return None
    seconds = _seconds(value, "lease")
    if not seconds:
        raise InvalidArgumentError(f"lock: lease must be seconds > 0 or None, got {value!r}")
    return seconds


def _status(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 400 <= value <= 599:
        raise InvalidArgumentError(f"lock: on_busy must be an HTTP error status, got {value!r}")
    return value


def _retry_after(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"lock: retry_after must be whole seconds >= 0, got {value!r}")
    return value


def _on_lost(value: Any) -> str:
    if value not in ("log", "raise"):
        raise InvalidArgumentError(f"lock: on_lost={value!r}; give 'log' or 'raise'")
    return str(value)


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"lock: {what} must be True or False, got {value!r}")
    return value


# --- the start-up check -----------------------------------------------------------------------


def check_routes(app: Any) -> None:
    """Raise ``InvalidArgumentError`` if a route's ``exclusive()`` name has a field that is neither
    a path parameter nor a query parameter of the route (run by ``lifespan`` at start-up)."""
    for route in _routes(getattr(app, "routes", ())):
        path, queries = _route_fields(route)
        for spec in _specs(getattr(route, "dependant", None)):
            for field in spec.fields:
                if field not in path and field not in queries:
                    assert spec.template is not None
                    raise InvalidArgumentError(_missing(spec.template, field, route))


def _routes(routes: Iterable[Any], depth: int = 0) -> Iterator[Any]:
    for route in routes:
        yield route
        inner = getattr(route, "routes", None)  # a Mount or an included router
        if inner and depth < 16:
            yield from _routes(inner, depth + 1)


def _specs(dependant: Any, depth: int = 0) -> Iterator[_LockSpec]:
    if dependant is None or depth > 32:
        return
    call = getattr(dependant, "call", None)
    spec = _SPECS.get(call) if call is not None else None
    if spec is not None and spec.template is not None:
        yield spec
    for sub in getattr(dependant, "dependencies", ()):
        yield from _specs(sub, depth + 1)


def _route_fields(route: Any) -> tuple[set[str], set[str]]:
    """The route's path parameters and the query parameters its endpoint and dependencies
    declare."""
    path = set(getattr(route, "param_convertors", {}) or {})
    queries: set[str] = set()

    def walk(dependant: Any, depth: int) -> None:
        if dependant is None or depth > 32:
            return
        for field in getattr(dependant, "query_params", ()):
            queries.add(str(getattr(field, "alias", None) or getattr(field, "name", "")))
        for sub in getattr(dependant, "dependencies", ()):
            walk(sub, depth + 1)

    walk(getattr(route, "dependant", None), 0)
    return path, queries


def _missing(template: str, field: str, route: Any) -> str:
    where = getattr(route, "path", None)
    methods = ",".join(sorted(getattr(route, "methods", None) or ()))
    named = f" of {methods} {where}".replace("  ", " ") if where else ""
    return (
        f"lock name {template!r}{named}: {{{field}}} is neither a path parameter of the route "
        "nor one of its query parameters"
    )


# --- leader-only background tasks -------------------------------------------------------------


class LeaderTask:
    """``leader_task(name, fn)``: called with the app (or an ``AsyncClient``), an async context
    manager that runs a campaign in the background: while this instance leads the election
    ``name`` it runs ``fn(term)`` (or ``fn()``), cancelled the moment the leadership is lost;
    when ``fn`` returns or fails, or the leadership is lost, it resigns and campaigns again
    after ``restart_after`` seconds. On the way out it cancels the campaign (``fn``
    included), which resigns: another instance leads within a round trip."""

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        *,
        identity: str | None = None,
        restart_after: float = 1.0,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"leader_task: name must be a non-empty str, got {name!r}")
        if not callable(fn):
            raise InvalidArgumentError(f"leader_task: fn must be an async function, got {fn!r}")
        if (
            isinstance(restart_after, bool)
            or not isinstance(restart_after, int | float)
            or not math.isfinite(restart_after)
            or restart_after < 0
        ):
            raise InvalidArgumentError(
                f"leader_task: restart_after must be seconds >= 0, got {restart_after!r}"
            )
        self.name = name
        self.fn = fn
        self.identity = identity
        self.restart_after = float(restart_after)
        self._takes_term = _takes_an_argument(fn)

    def __call__(self, app_or_client: Any) -> AbstractAsyncContextManager[None]:
        return self._running(app_or_client)

    @asynccontextmanager
    async def _running(self, target: Any) -> AsyncIterator[None]:
        client = target if isinstance(target, AsyncClient) else getattr(target.state, STATE, None)
        if not isinstance(client, AsyncClient):
            raise InvalidArgumentError(
                f"leader_task {self.name!r}: no redlease client on app.state.redlease; "
                "enter redlease.contrib.fastapi.lifespan(url)(app) first"
            )
        task = asyncio.get_running_loop().create_task(
            self._campaign(client), name=f"redlease-leader:{self.name}"
        )
        try:
            yield
        finally:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=STOP_WAIT)
            if not done:
                log.warning("leader task %r: still stopping after %s s", self.name, STOP_WAIT)

    async def _campaign(self, client: AsyncClient) -> None:
        election = client.election(self.name, identity=self.identity)
        while True:
            try:
                async with election.leadership(cancel_on_loss=True) as term:
                    log.info("leader task %r: leading (term %s)", self.name, term.token)
                    await self._run(term)
                log.info("leader task %r: returned; resigned", self.name)
            except LeaseLostError as exc:
                log.warning("leader task %r: leadership lost, cancelled: %s", self.name, exc)
            except ClientClosedError:
                return
            except RedleaseError as exc:
                log.warning("leader task %r: campaign failed: %s", self.name, exc)
            except Exception:
                log.exception("leader task %r failed; resigned", self.name)
            await asyncio.sleep(self.restart_after)

    async def _run(self, term: AsyncTerm) -> None:
        if self._takes_term:
            await self.fn(term)
        else:
            await self.fn()

    def __repr__(self) -> str:
        return f"<redlease.contrib.fastapi.LeaderTask {self.name!r}>"


def leader_task(
    name: str,
    fn: Callable[..., Awaitable[Any]],
    *,
    identity: str | None = None,
    restart_after: float = 1.0,
) -> LeaderTask:
    """A background task that runs in one instance of the app at a time: the one leading the
    election ``name``. ``fn(term)`` (an ``AsyncTerm``: ``term.token`` is the term's fencing
    token) or ``fn()`` is cancelled when the leadership is lost and at shutdown. Pass it to
    ``lifespan(url, leader_tasks=[...])``, or enter ``leader_task(...)(app)`` in the app's
    own lifespan after the client is made."""
    return LeaderTask(name, fn, identity=identity, restart_after=restart_after)


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional or p.kind is p.VAR_POSITIONAL for p in parameters)


def __getattr__(name: str) -> Any:
    if name == "lock":  # the dependency's former name (``client.lock(name)`` is a Lock)
        raise AttributeError(
            "redlease.contrib.fastapi.lock was renamed redlease.contrib.fastapi.exclusive"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
