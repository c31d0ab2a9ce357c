"""``exclusive={...}``: the options of an ``ExclusiveTask``, read and checked when the task
class is made, and the key each call of the task holds."""

from __future__ import annotations

import hashlib
import inspect
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kombu.utils.json import dumps as kombu_dumps

from ... import InvalidArgumentError
from ...errors import refuse_unknown

ON_BUSY = ("skip", "raise", "retry", "wait")
ON_LOST = ("log", "raise")
STAGES = ("run", "enqueue")
RETRIES = ("keep", "retake")
DEFAULT_KEY_LENGTH = 200
"""A default key (the task name and its arguments) longer than this is hashed."""


@dataclass(frozen=True)
class Options:
    """``exclusive={...}`` read and checked when the task class is made."""

    key: Callable[[tuple[Any, ...], dict[str, Any]], str]
    on_busy: str = "skip"
    """``skip``: the duplicate returns ``None`` (logged at INFO); ``raise``: it fails with
    ``LockTimeoutError``; ``retry``: ``self.retry(countdown=countdown)`` (Celery's
    ``max_retries`` applies, then ``LockTimeoutError``); ``wait``: ``LockTimeoutError``
    (after waiting ``timeout``, 60 s unless given)."""
    stage: str = "run"
    """``run``: excluded while running; ``enqueue``: also while queued (a duplicate
    ``delay()`` returns the first task's ``AsyncResult`` and sends nothing)."""
    timeout: float | None = 0.0
    """Seconds a run waits for a busy key before ``on_busy`` applies, as everywhere in
    redlease (``0``: one try; ``None``: as long as it takes). Default: ``0`` (a duplicate
    does not hold a worker slot waiting), ``60`` with ``on_busy="wait"``."""
    countdown: float = 10.0
    retries: str = "keep"
    """What Celery's retries of the task do: ``keep``: the key stays taken from one try to the
    next (a reservation covers the countdown); ``retake``: it is free meanwhile, and the retry
    takes it again when it runs (busy then: ``on_busy``)."""
    queued_for: float = 3600.0
    """The longest a reserved task may wait in the queue (beyond its countdown or ETA) before
    its reservation ends by itself."""
    on_lost: str = "log"
    """What a run whose hold was lost before it ended (force-released, expired) does at its
    end: ``log``: its outcome (result or error) stands, the loss is logged (WARNING);
    ``raise``: a run that returned fails with ``LeaseLostError`` instead."""

    @property
    def reserves(self) -> bool:
        """Whether reservations may exist for this task's keys (a run checks for them)."""
        return self.stage == "enqueue" or self.retries == "keep"


OPTIONS = ("key", "on_busy", "stage", "timeout", "countdown", "retries", "queued_for", "on_lost")
"""The keys of ``exclusive={...}`` (a misspelt one is named in an error listing these)."""
WAIT_TIMEOUT = 60.0
"""The default ``timeout`` of ``on_busy="wait"``."""


def _options(task_name: str, exclusive: Mapping[str, Any], run: Callable[..., Any]) -> Options:
    if not isinstance(exclusive, Mapping):
        raise InvalidArgumentError(f"task {task_name}: exclusive must be a dict of options")
    refuse_unknown(f"task {task_name}: exclusive", set(exclusive) - set(OPTIONS), OPTIONS)
    chosen = {
        "on_busy": (exclusive.get("on_busy", "skip"), ON_BUSY),
        "stage": (exclusive.get("stage", "run"), STAGES),
        "retries": (exclusive.get("retries", "keep"), RETRIES),
        "on_lost": (exclusive.get("on_lost", "log"), ON_LOST),
    }
    for option, (value, allowed) in chosen.items():
        if value not in allowed:
            raise InvalidArgumentError(
                f"task {task_name}: exclusive {option}={value!r}; one of {', '.join(allowed)}"
            )
    return Options(
        key=_key_maker(task_name, run, exclusive.get("key")),
        on_busy=chosen["on_busy"][0],
        stage=chosen["stage"][0],
        retries=chosen["retries"][0],
        on_lost=chosen["on_lost"][0],
        timeout=_timeout(task_name, exclusive, chosen["on_busy"][0]),
        countdown=_seconds(task_name, "countdown", exclusive.get("countdown", 10.0), True),
        queued_for=_seconds(task_name, "queued_for", exclusive.get("queued_for", 3600.0)),
    )


def _timeout(task_name: str, exclusive: Mapping[str, Any], on_busy: str) -> float | None:
    """``timeout`` as given (``None``: as long as it takes), else its default by ``on_busy``."""
    if "timeout" not in exclusive:
        return WAIT_TIMEOUT if on_busy == "wait" else 0.0
    value = exclusive["timeout"]
    return None if value is None else _seconds(task_name, "timeout", value, zero=True)


def _seconds(task_name: str, option: str, value: Any, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidArgumentError(f"task {task_name}: exclusive {option} must be seconds")
    if value < 0 or (value == 0 and not zero):
        raise InvalidArgumentError(f"task {task_name}: exclusive {option}={value} is too small")
    return float(value)


def _key_maker(
    task_name: str, run: Callable[..., Any], key: Any
) -> Callable[[tuple[Any, ...], dict[str, Any]], str]:
    """The task's key for a call's ``(args, kwargs)``: ``key`` formatted with the arguments by
    name (``"sync:{user_id}"``, checked now), ``key(*args, **kwargs)``, or (``None``) the task
    name and all its arguments, as JSON (hashed past ``DEFAULT_KEY_LENGTH``)."""
    try:
        signature: inspect.Signature | None = inspect.signature(run)
    except (TypeError, ValueError):
        signature = None

    def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if signature is None:
            return None
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return dict(bound.arguments)

    if key is None:

        def default(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            named = arguments(args, kwargs)
            data = named if named is not None else [list(args), kwargs]
            # kombu's JSON (as Celery's messages): a value reads the same before and after
            # the trip to the worker (a tuple becomes a list, a datetime stays one)
            text = f"{task_name}:{_json(data)}"
            if len(text) > DEFAULT_KEY_LENGTH:
                text = f"{task_name}:sha256:{hashlib.sha256(text.encode()).hexdigest()}"
            return text

        return default
    if callable(key):

        def called(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            made = key(*args, **kwargs)
            if not isinstance(made, str) or not made:
                raise InvalidArgumentError(f"task {task_name}: key() returned {made!r}, not a str")
            return made

        return called
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"task {task_name}: exclusive key must be a str or a callable")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(key) if f is not None]
    except ValueError as exc:
        raise InvalidArgumentError(f"task {task_name}: key {key!r}: {exc}") from None
    parameters = signature.parameters if signature is not None else {}
    for name in fields:
        root = name.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise InvalidArgumentError(
                f"task {task_name}: key {key!r}: name the arguments ({{user_id}}), not positions"
            )
        if signature is not None and root not in parameters:
            raise InvalidArgumentError(
                f"task {task_name}: key {key!r} refers to {root!r}, which the task has no "
                f"parameter named; it has {', '.join(parameters) or 'none'}"
            )

    def formatted(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        named = arguments(args, kwargs)
        if named is None:
            raise InvalidArgumentError(f"task {task_name}: arguments do not fit its parameters")
        return key.format(**named)

    return formatted


def _json(data: Any) -> str:
    return str(kombu_dumps(data, sort_keys=True, separators=(",", ":")))  # type: ignore[no-untyped-call]


def _run_function(cls: type) -> Callable[..., Any]:
    """The task's body as called with the task's arguments (without ``self``)."""
    raw = inspect.getattr_static(cls, "run")
    if isinstance(raw, staticmethod):  # @app.task(bind=False)
        return raw.__func__
    signature = inspect.signature(raw)
    params = list(signature.parameters.values())[1:]  # a method: drop self

    def run(*args: Any, **kwargs: Any) -> Any:  # only its signature is used
        raise NotImplementedError

    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return run
