"""``@exclusive``: a function whose every call runs holding a lock named from its arguments.

Written once for both runtimes: the wrapper of a coroutine function runs on an
``AsyncClient``, that of a plain function on a ``Client``. ``client.exclusive(...)`` binds the
client when the function is decorated; ``redlease.exclusive(..., client=...)`` takes either a
client or a callable that returns one, called at each call, for a client made later (at
startup, in a lifespan: ``client=lambda: app.state.redlease``), as Celery's ``shared_task``
finds its app when the task runs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, overload

from .._core.arguments import Seconds, optional_seconds, wait_seconds
from ..errors import ArgumentTypeError, InvalidArgumentError, LockTimeoutError, refuse_unknown
from ..events import LockEvent
from .clientbase import ClientBase
from .naming import name_maker

__all__ = ["ON_BUSY", "OnBusy", "exclusive"]

log = logging.getLogger("redlease")

P = ParamSpec("P")
R = TypeVar("R")

OnBusy = Literal["wait", "raise", "skip"]
ON_BUSY: tuple[OnBusy, ...] = ("wait", "raise", "skip")
"""What a call does when its lock is taken: ``"wait"`` (up to ``timeout``, default as long
as it takes, then ``LockTimeoutError``), ``"raise"`` (``LockTimeoutError``) or ``"skip"``
(return ``None`` without running the function); ``"raise"`` and ``"skip"`` try once unless
given a ``timeout``."""


class Decorator(Protocol):
    """What ``redlease.exclusive(...)`` returns: it decorates a plain or a coroutine function."""

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]: ...


class SkippingDecorator(Protocol):
    """What ``redlease.exclusive(..., on_busy="skip")`` returns: a skipped call gives ``None``."""

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R | None]]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R | None]: ...


def on_busy_arg(value: object) -> OnBusy:
    if value not in ON_BUSY:
        raise InvalidArgumentError(f"on_busy must be 'wait', 'raise' or 'skip', got {value!r}")
    return value


def wait_for(on_busy: OnBusy, timeout: Seconds | None) -> Seconds | None:
    """The ``hold(timeout=...)`` of a call: ``timeout`` if given, else as long as it takes
    (``"wait"``) or a single try (``"raise"``, ``"skip"``)."""
    wait_seconds(timeout, "timeout")
    if timeout is None and on_busy != "wait":
        return 0
    return timeout


def _qualname(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", fn))


def skipped(client: Any, fn: Callable[..., Any], name: str, started: float) -> None:
    """A call skipped because its lock is taken: logged (INFO) and sent to the client's
    listeners as a ``skipped`` event (counted by ``redlease.metrics``)."""
    owner = client._owner()
    log.info(
        "call of %s skipped: lock %r is busy (on_busy='skip')",
        _qualname(fn),
        name,
        extra={"lock": name, "owner": owner},
    )
    state = client._state
    if state.listeners:
        state.listeners.send(LockEvent("skipped", name, owner, wait=time.monotonic() - started))


def decorate(
    fn: Callable[..., Any],
    resolve: Callable[[], Any],
    template: str,
    *,
    timeout: Seconds | None,
    lease: Seconds | None,
    on_busy: OnBusy,
) -> Callable[..., Any]:
    """The wrapper of ``fn`` (a coroutine function: an asyncio one); ``resolve()`` gives the
    client at each call. Arguments are checked here, when ``fn`` is decorated."""
    if not callable(fn):
        raise ArgumentTypeError(f"exclusive decorates a function, got {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise InvalidArgumentError(
            f"{_qualname(fn)} is a generator function: the lock would be released before "
            "its body runs; hold the lock inside it (with lock.hold(...))"
        )
    make_name = name_maker(fn, template)
    on_busy = on_busy_arg(on_busy)
    wait = wait_for(on_busy, timeout)
    optional_seconds(lease, "lease")

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            client = _client(resolve, asyncio=True, fn=fn)
            name = make_name(args, kwargs)
            started = time.monotonic()
            async with contextlib.AsyncExitStack() as stack:
                try:
                    await stack.enter_async_context(
                        client.lock(name).hold(timeout=wait, lease=lease)
                    )
                except LockTimeoutError:
                    if on_busy != "skip":
                        raise
                    skipped(client, fn, name, started)
                    return None
                return await fn(*args, **kwargs)

        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        client = _client(resolve, asyncio=False, fn=fn)
        name = make_name(args, kwargs)
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(client.lock(name).hold(timeout=wait, lease=lease))
            except LockTimeoutError:
                if on_busy != "skip":
                    raise
                skipped(client, fn, name, started)
                return None
            return fn(*args, **kwargs)

    return run


def _client(resolve: Callable[[], Any], *, asyncio: bool, fn: Callable[..., Any]) -> Any:
    """The client of this call: an ``AsyncClient`` for a coroutine function, a ``Client``
    for a plain one."""
    client = resolve()
    wanted = "AsyncClient" if asyncio else "Client"
    if isinstance(client, ClientBase) and client._ASYNCIO is asyncio:
        return client
    kind = "coroutine function" if asyncio else "function"
    if client is None:
        raise ArgumentTypeError(
            f"@exclusive {_qualname(fn)}: the client callable returned None (no client made "
            f"yet?); a {kind} needs a {wanted}"
        )
    raise ArgumentTypeError(
        f"@exclusive {_qualname(fn)}: a {kind} needs a {wanted}, got {type(client).__name__}"
    )


@overload
def exclusive(
    template: str,
    *,
    client: ClientBase | Callable[[], ClientBase | None],
    timeout: Seconds | None = None,
    lease: Seconds | None = None,
    on_busy: Literal["wait", "raise"] = "wait",
) -> Decorator: ...


@overload
def exclusive(
    template: str,
    *,
    client: ClientBase | Callable[[], ClientBase | None],
    timeout: Seconds | None = None,
    lease: Seconds | None = None,
    on_busy: Literal["skip"],
) -> SkippingDecorator: ...


def exclusive(
    template: str,
    *,
    client: Any,
    timeout: Seconds | None = None,
    lease: Seconds | None = None,
    on_busy: OnBusy = "wait",
    **unknown: Any,
) -> Any:
    """Decorate a function (plain or coroutine) so that each call runs holding the lock named
    by ``template`` formatted with the call's arguments, on a client found when the call is
    made::

        @redlease.exclusive("order:{order_id}", client=lambda: app.state.redlease)
        async def ship(order_id: int) -> None: ...

    ``client``: a ``Client`` (for plain functions) or an ``AsyncClient`` (for coroutine
    functions), or a callable with no arguments that returns one, called at each call (the
    client may be made after the decoration: at startup, in a lifespan). ``timeout``,
    ``lease`` and ``on_busy`` as for ``Client.exclusive``.
    """
    refuse_unknown("exclusive()", unknown, ("client", "timeout", "lease", "on_busy"))
    on_busy_arg(on_busy)
    wait_for(on_busy, timeout)
    optional_seconds(lease, "lease")
    resolve: Callable[[], Any] = client if callable(client) else (lambda: client)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        return decorate(fn, resolve, template, timeout=timeout, lease=lease, on_busy=on_busy)

    return decorator


def bound(
    client: Any,
    template: str,
    *,
    timeout: Seconds | None,
    lease: Seconds | None,
    on_busy: OnBusy,
    asyncio: bool,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``client.exclusive(...)``: the client bound now; only coroutine functions on an
    ``AsyncClient`` (``asyncio``), only plain ones on a ``Client``."""
    on_busy_arg(on_busy)
    wait_for(on_busy, timeout)
    optional_seconds(lease, "lease")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        coroutine = inspect.iscoroutinefunction(fn)
        if asyncio and not coroutine and not inspect.isasyncgenfunction(fn):
            raise InvalidArgumentError(
                f"{_qualname(fn)} is not a coroutine function: use Client.exclusive, or "
                "redlease.exclusive"
            )
        if not asyncio and coroutine:
            raise InvalidArgumentError(
                f"{_qualname(fn)} is a coroutine function: use AsyncClient.exclusive, or "
                "redlease.exclusive"
            )
        return decorate(fn, lambda: client, template, timeout=timeout, lease=lease, on_busy=on_busy)

    return decorator
