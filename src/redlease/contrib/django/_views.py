"""``exclusive(...)``: a view, a management command or any function run holding a lock."""

from __future__ import annotations

import functools
import inspect
import logging
import string
from collections.abc import Callable
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError
from django.http import HttpRequest, HttpResponse

from ... import InvalidArgumentError, LeaseLostError, LockTimeoutError, Seconds
from ...errors import refuse_unknown
from . import _clients

log = logging.getLogger("redlease.contrib.django")

ON_BUSY_WORDS = ("raise", "skip")
ON_LOST = ("log", "raise")
OPTIONS = ("timeout", "lease", "on_busy", "on_lost")
"""``exclusive()``'s keyword options (a misspelt one is named in an error listing these)."""
BUSY_TEXT = "This resource is busy; try again later.\n"


def _fields(template: str) -> list[str]:
    if not isinstance(template, str) or not template:
        raise InvalidArgumentError("exclusive(): the lock name must be a non-empty str")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise InvalidArgumentError(f"exclusive({template!r}): {exc}") from None
    roots = []
    for name in fields:
        root = name.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise InvalidArgumentError(
                f"exclusive({template!r}): name the view's arguments ({{pk}}), not positions"
            )
        roots.append(root)
    return roots


def _name_maker(
    fn: Callable[..., Any], template: str
) -> Callable[[tuple[Any, ...], dict[str, Any]], str]:
    """The lock name of one call: ``template`` formatted with the call's arguments by name
    (a view's URL keyword arguments, ``request``, a command's ``options``...)."""
    roots = _fields(template)
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    var_keyword = None
    if signature is not None:
        params = signature.parameters
        var_keyword = next(
            (p.name for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )
        if var_keyword is None:  # every field must name a parameter: checked now
            for root in roots:
                if root not in params:
                    raise InvalidArgumentError(
                        f"exclusive({template!r}) refers to {root!r}, which "
                        f"{getattr(fn, '__qualname__', fn)!r} has no parameter named; it has "
                        f"{', '.join(params) or 'none'}"
                    )

    def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        values: dict[str, Any] = {}
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                bound = None
            if bound is not None:
                bound.apply_defaults()
                values.update(bound.arguments)
                if var_keyword is not None:  # **kwargs: its items by their own names
                    values.update(values.pop(var_keyword, None) or {})
        values.update(kwargs)
        request = _request_of(args)
        if request is not None:
            values.setdefault("request", request)
        missing = [root for root in roots if root not in values]
        if missing:
            raise InvalidArgumentError(
                f"exclusive({template!r}): this call has no argument named"
                f" {', '.join(map(repr, missing))}; it has {', '.join(values) or 'none'}"
            )
        return template.format(**values)

    return make


def _request_of(args: tuple[Any, ...]) -> Any:
    """The request of a view's call: its first argument, or its second after ``self``; a
    Django ``HttpRequest`` or a request that wraps one (Django REST framework's)."""
    for arg in args[:2]:
        if isinstance(arg, HttpRequest) or isinstance(getattr(arg, "_request", None), HttpRequest):
            return arg
    return None


def _command_of(args: tuple[Any, ...]) -> BaseCommand | None:
    return args[0] if args and isinstance(args[0], BaseCommand) else None


def _check_on_busy(on_busy: Any) -> None:
    if on_busy is None or callable(on_busy) or on_busy in ON_BUSY_WORDS:
        return
    if _clients.is_status(on_busy):
        return
    raise InvalidArgumentError(
        f"exclusive(): on_busy={on_busy!r}; give an HTTP status (409, 423...), 'raise', 'skip'"
        " or a callable"
    )


def _check_on_lost(on_lost: Any) -> None:
    if on_lost not in ON_LOST:
        raise InvalidArgumentError(f"exclusive(): on_lost={on_lost!r}; give 'log' or 'raise'")


def _lost(
    error: LeaseLostError,
    on_lost: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    failed: bool,
) -> None:
    """The call's hold was found lost at its release (force-released, expired): raise
    (``on_lost="raise"``, a call that returned) or log, keeping the call's outcome."""
    if on_lost == "raise" and not failed:
        if _command_of(args) is not None:
            raise CommandError(str(error)) from error
        raise error
    if failed:
        kept = "its error stands"
    else:
        kept = "its response is kept" if _request_of(args) is not None else "its result is kept"
    log.warning(
        "%s: lock %r was lost before the call ended (cause %s): %s",
        getattr(fn, "__qualname__", fn),
        error.name,
        error.cause,
        kept,
    )


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise InvalidArgumentError(f"exclusive(): timeout={timeout!r}; give seconds >= 0, or None")
    return float(seconds)


def _busy(
    on_busy: Any,
    name: str,
    timeout: float | None,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """What a call that found the lock busy returns (or raises)."""
    if on_busy is None:
        on_busy = _clients.config().on_busy
    if callable(on_busy):
        return on_busy(*args, **kwargs)
    request = _request_of(args)
    if on_busy == "skip":
        if request is not None:
            raise InvalidArgumentError(
                f"exclusive(): on_busy='skip' on the view {getattr(fn, '__qualname__', fn)}: a"
                " view must answer; give a status (on_busy=409) or a callable"
            )
        return None
    if request is not None and on_busy != "raise":
        return HttpResponse(BUSY_TEXT, status=on_busy, content_type="text/plain")
    waited = "it was held" if not timeout else f"not acquired within {timeout:g} s"
    error = LockTimeoutError(f"lock {name!r} is busy: {waited}", name=name)
    if _command_of(args) is not None:
        raise CommandError(str(error)) from error
    raise error


def exclusive(
    name: str,
    *,
    timeout: Seconds | None = 0,
    lease: Seconds | None = None,
    on_busy: int | str | Callable[..., Any] | None = None,
    on_lost: str = "log",
    **unknown: NoReturn,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run each call of the decorated view, management command ``handle`` or function holding
    the lock ``name``, formatted with the call's arguments by name: a view's URL keyword
    arguments (``"report:{pk}"``), ``{request.user.pk}``, a command's options.

    ``timeout``: seconds to wait for a busy lock, as everywhere in redlease (``0``, the default
    here: try once, since a request that queues behind another ties up a worker and its client;
    ``None``: as long as it takes). ``lease``: the hold's lease (default: renewed by the
    watchdog while the call runs). ``on_busy``: what a call that does not get the lock does: an
    HTTP status (a view answers it; default ``REDLEASE["ON_BUSY"]``, else 409), ``"raise"``
    (``LockTimeoutError``; ``CommandError`` in a command), ``"skip"`` (not a view: return
    ``None``), or a callable called with the call's arguments, whose result is returned.
    A status given to a function that is not a view raises as ``"raise"`` does.
    ``on_lost``: what a call whose hold was lost before it ended (force-released, expired)
    does at its release: ``"log"`` (the default: its response or result is kept, the loss
    logged at WARNING) or ``"raise"`` (``LeaseLostError``; ``CommandError`` in a command)
    instead of the result of a call that returned. Either way the client's listeners are
    told (``lease_lost``, counted by ``redlease.metrics``).

    Coroutine functions (async views) hold an ``AsyncLock`` of the event loop's
    ``AsyncClient``; others a ``Lock`` of the process's ``Client``.
    """
    refuse_unknown("exclusive()", unknown, OPTIONS)
    _fields(name)
    seconds = _check_timeout(timeout)
    _check_on_busy(on_busy)
    _check_on_lost(on_lost)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        make_name = _name_maker(fn, name)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                full = _clients.config().key_prefix + make_name(args, kwargs)
                lock = _clients.get_async_client().lock(full, lease=lease)
                if seconds == 0:
                    got = await lock.acquire(blocking=False)
                else:
                    got = await lock.acquire(timeout=seconds)
                if not got:
                    busy = _busy(on_busy, full, seconds, fn, args, kwargs)
                    return await busy if inspect.isawaitable(busy) else busy
                failed = True
                try:
                    result = await fn(*args, **kwargs)
                    failed = False
                    return result
                finally:
                    try:
                        await lock.release()
                    except LeaseLostError as exc:
                        _lost(exc, on_lost, fn, args, failed)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            full = _clients.config().key_prefix + make_name(args, kwargs)
            lock = _clients.get_client().lock(full, lease=lease)
            got = lock.acquire(blocking=False) if seconds == 0 else lock.acquire(timeout=seconds)
            if not got:
                return _busy(on_busy, full, seconds, fn, args, kwargs)
            failed = True
            try:
                result = fn(*args, **kwargs)
                if inspect.iscoroutine(result):  # an async handler behind a sync wrapper
                    result.close()
                    raise InvalidArgumentError(
                        f"exclusive(): {getattr(fn, '__qualname__', fn)} returned a coroutine,"
                        " which would run after the lock is released: decorate the async"
                        " function itself (method_decorator(exclusive(...), name='get'))"
                    )
                failed = False
                return result
            finally:
                try:
                    lock.release()
                except LeaseLostError as exc:
                    _lost(exc, on_lost, fn, args, failed)

        return wrapper

    return decorate
