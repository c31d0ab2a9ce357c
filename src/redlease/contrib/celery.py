"""Celery tasks that never run twice: ``@app.task(base=ExclusiveTask, exclusive={...})``.

Built on redlease's public API (install with ``pip install 'redlease[celery]'``):

- **The run hold** is a redlease ``Lock`` named after the task's key, taken by the worker
  process that runs the task, for as long as it runs: renewed by the client's watchdog, so a
  worker killed with SIGKILL frees it within one lease (``watchdog_timeout``), and carrying a
  fencing token (``self.request.redlease_token``).
- **A reservation** is a permit of a one-permit lease semaphore named after the key, with a
  lease of its own (``queued_for``, plus the countdown): a hold that can change hands. It
  covers a task while it waits in the queue (``stage="enqueue"``: taken by the producer in
  ``apply_async``) or between one of its Celery retries and the next (``retries="keep"``:
  taken by the run that retries). Its id travels in the message's headers; the worker that
  runs the task takes the run hold first, then releases the reservation by its id.
- **The task-id records**, plain strings beside them (``<lock>:queued-task``,
  ``<lock>:running-task``, stage ``enqueue`` only), let a duplicate ``delay()`` return the
  first task's ``AsyncResult``. Each is written and deleted only by the holder of the hold it
  describes, while it holds it (and deleted only if it still names its task).

A run without a reservation that finds the run hold free still yields to a reservation held
by another task (a queued or retrying run of the same key): the key is busy for it.

The client comes from the app's configuration: ``redlease_url`` (default: the broker URL, when
it is a Redis one), ``redlease_client_options`` (keywords of ``Client.from_url``, such as
``watchdog_timeout``), ``redlease_listeners`` (listeners added to each process's client:
callables taking a ``LockEvent``, or dotted paths to one, such as a ``PrometheusMetrics``),
``redlease_key_prefix`` (default ``"redlease:celery:"``). There is one
client per process, made on first use after the fork (a forked child makes its own).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import os
import string
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from . import _listeners, _missing_extra

try:
    from celery import Task, signals
    from celery.exceptions import Ignore, Retry
    from celery.utils import uuid
    from kombu.utils.json import dumps as kombu_dumps
except ModuleNotFoundError as exc:  # the framework is an extra
    raise _missing_extra(exc, "celery", "celery") from exc

from .. import (
    Client,
    InvalidArgumentError,
    LeaseLostError,
    LeaseSemaphore,
    Lock,
    LockTimeoutError,
    RedleaseError,
)
from ..errors import refuse_unknown

__all__ = ["ExclusiveTask", "TaskSkippedError", "client_for"]

log = logging.getLogger(__name__)

HEADER = "redlease_reservation"
"""The message header carrying a task's reservation: ``{"key": ..., "permit": ...}`` (the key
is the producer's, so that the worker names the same holds whatever the serializer did to the
arguments); ``None`` in a retry that carries none."""

ON_BUSY = ("skip", "raise", "retry", "wait")
ON_LOST = ("log", "raise")
STAGES = ("run", "enqueue")
RETRIES = ("keep", "retake")
DEFAULT_PREFIX = "redlease:celery:"

RESERVE_WAIT = 5.0
"""How long a run that retries waits for the reservation it keeps (only a producer looking at
the key can hold it then, for a round trip)."""
RECORD_WAIT = 2.0
"""How long a duplicate ``delay()`` waits for the id of the task holding the key (written one
round trip after its hold is taken), before it raises."""
PROBE_LEASE = 5.0
"""The lease of the permit a waiting run takes for a moment to learn that a reservation ended."""
MAX_ROUNDS = 1000
"""Bound on the rounds of every loop here (each also bounded in time)."""
DEFAULT_KEY_LENGTH = 200
"""A default key (the task name and its arguments) longer than this is hashed."""
DELIVERY_TTL = 7 * 24 * 3600.0
"""How long the record of a delivery of an ``acks_late`` task lives at most (it is deleted
when the delivery ends; this only bounds what a delivery killed and never redelivered
leaves)."""
REDELIVERY_MARGIN = 5.0
"""Beyond one lease (``watchdog_timeout``), how long a redelivered run waits for the hold of
its dead delivery: the time a waiter takes to notice a hold that ran out (at most
``RECHECK``, 5 s)."""


class TaskSkippedError(LockTimeoutError):
    """A run of an ``ExclusiveTask`` that did not run its body because its key was busy
    (``on_busy="skip"``). It is one of the task's expected errors (Celery's ``throws``): the
    task's state is ``FAILURE``, the worker logs it at INFO without a traceback (and error
    trackers that honour ``throws`` leave it out), and ``result.get()`` raises it: a skipped
    run is never a success that returned ``None``. ``except LockTimeoutError`` catches it
    too."""


# --- options ------------------------------------------------------------------------------


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


def _finite(seconds: float) -> float | None:
    """A wait for ``acquire(timeout=)``: ``None`` (as long as it takes) for infinity."""
    return None if math.isinf(seconds) else seconds


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


# --- the client, one per process --------------------------------------------------------


_clients: weakref.WeakKeyDictionary[Any, tuple[int, Client]] = weakref.WeakKeyDictionary()
_clients_mutex = threading.Lock()


def _fresh_mutex() -> None:
    global _clients_mutex
    _clients_mutex = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_fresh_mutex)


def redlease_url(app: Any) -> str:
    """The app's ``redlease_url`` (any URL ``Client.from_url`` takes, Sentinel's too), else
    its broker URL if that is a Redis one."""
    given = app.conf.get("redlease_url")
    if given:
        return str(given)
    url = app.conf.broker_url
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise InvalidArgumentError(
            "redlease.contrib.celery: set app.conf.redlease_url to a Redis URL (the broker "
            "is not a Redis one)"
        )
    return url


def client_for(app: Any) -> Client:
    """This process's redlease client for the Celery ``app`` (made on first use; a forked
    child makes its own, so each worker process has one, made after the fork)."""
    pid = os.getpid()
    with _clients_mutex:
        held = _clients.get(app)
        if held is not None and held[0] == pid:
            return held[1]
        options = dict(app.conf.get("redlease_client_options") or {})
        listeners = _listeners("redlease_listeners", app.conf.get("redlease_listeners") or ())
        client = Client.from_url(redlease_url(app), **options)
        for listener in listeners:
            client.add_listener(listener)
        _clients[app] = (pid, client)
        return client


def _close_clients(**_: Any) -> None:
    """A worker process ends: close its clients (their holds were released by their runs)."""
    pid = os.getpid()
    with _clients_mutex:
        mine = [client for owner, client in _clients.values() if owner == pid]
        _clients.clear()
    for client in mine:
        client.close()


signals.worker_process_shutdown.connect(_close_clients, weak=False, dispatch_uid=__name__)


# --- the holds of one key ---------------------------------------------------------------


@dataclass(frozen=True)
class Holds:
    """What one key is held with, on one client."""

    client: Client
    key: str
    lock_name: str

    @classmethod
    def of(cls, app: Any, key: str) -> Holds:
        prefix = app.conf.get("redlease_key_prefix", DEFAULT_PREFIX)
        return cls(client_for(app), key, f"{prefix}{key}")

    def lock(self, task_name: str) -> Lock:
        def lost(error: LeaseLostError) -> None:
            log.warning(
                "task %s: its hold of %r was lost while it ran: %s", task_name, self.key, error
            )

        return self.client.lock(self.lock_name, on_lease_lost=lost)

    @property
    def reservations(self) -> LeaseSemaphore:
        return self.client.lease_semaphore(f"{self.lock_name}:reserved")

    @property
    def queued_record(self) -> str:
        return f"{self.lock_name}:queued-task"

    @property
    def running_record(self) -> str:
        return f"{self.lock_name}:running-task"

    def reserve(self, lease: float, timeout: float = 0) -> str | None:
        """Take the key's reservation, with ``lease``, waiting up to ``timeout``; ``None``
        when another holds it."""
        sem = self.reservations
        permit = sem.acquire(timeout=0, lease=lease)
        if permit is None and sem.try_set_permits(1):  # never set (or gone): set it now
            permit = sem.acquire(timeout=0, lease=lease)
        if permit is None and timeout > 0:
            permit = sem.acquire(timeout=timeout, lease=lease)
        if permit is not None:
            sem.disown(permit)  # handed to the worker that runs the task, by its id
        return permit

    def reserved(self) -> bool:
        """Whether another task holds the key's reservation."""
        return bool(self.reservations.statistics().holders)

    def give_back(self, permit: str, why: str) -> None:
        """Release a reservation by its id (taken here or in another process)."""
        try:
            self.reservations.release(permit)
        except (LeaseLostError, InvalidArgumentError) as exc:
            log.warning("reservation of %r had ended before %s: %s", self.key, why, exc)

    def delivery_record(self, task_id: str, retries: int) -> str:
        """The record of the deliveries of one message (a task id and its Celery retry)."""
        return f"{self.lock_name}:delivery:{task_id}:{retries}"

    def start_delivery(self, record: str) -> bool:
        """Write the record of a delivery starting; ``False`` when it was there already: an
        earlier delivery of the same message started and did not end (its worker process
        died, or it still runs)."""
        ttl = int(DELIVERY_TTL * 1000)
        return bool(self.client.redis.set(record, "", nx=True, px=ttl))

    def write(self, record: str, task_id: str, lease: float | None = None) -> None:
        px = None if lease is None else max(1, int(lease * 1000))
        self.client.redis.set(record, task_id, px=px)

    def read(self, record: str) -> str | None:
        value = self.client.redis.get(record)
        return value.decode() if isinstance(value, bytes) else value

    def clear(self, record: str, task_id: str | None) -> None:
        """Delete ``record`` if it names ``task_id`` (``None``: whatever it names)."""
        raw = self.client.redis
        if task_id is None:
            raw.delete(record)
        elif not isinstance(raw, redis.Redis):  # a cluster: no WATCH in its pipelines
            if self.read(record) == task_id:
                raw.delete(record)
        else:
            with raw.pipeline() as pipe:
                try:
                    pipe.watch(record)  # type: ignore[no-untyped-call]
                    if pipe.get(record) in (task_id, task_id.encode()):
                        pipe.multi()
                        pipe.delete(record)
                        pipe.execute()
                except redis.WatchError:
                    pass  # rewritten meanwhile: it names another task now


@dataclass
class Run:
    """One run of an exclusive task, as its worker process sees it."""

    holds: Holds
    options: Options
    task_id: str | None
    permit: str | None
    """The task's reservation, until it is released (or handed to a retry)."""
    lock: Lock | None = None
    """The run hold, while held."""
    handed_over: bool = False
    """The reservation (or the run's place) went to a retry of the task."""
    delivery: str | None = None
    """The record of this delivery (``acks_late`` tasks run by a worker): the fencing token
    of its hold once taken, so that a redelivery of the message knows the hold as its own."""
    redelivered: bool = False
    """An earlier delivery of this message had started and not ended when this one began."""


def _delay(options: Mapping[str, Any], default: float = 0.0) -> float:
    """Seconds until a message sent with ``options`` may run (its countdown or ETA)."""
    countdown = options.get("countdown")
    if countdown is not None:
        return max(0.0, float(countdown))
    eta = options.get("eta")
    if eta is not None:
        try:
            return max(0.0, float(eta.timestamp()) - time.time())
        except AttributeError:
            return default
    return default


class ExclusiveTask(Task):  # type: ignore[misc]  # (celery has no type hints)
    """A Celery task that never runs twice at once for one key.

    ``@app.task(base=ExclusiveTask, exclusive={"key": "sync:{user_id}"})``; the options are
    ``Options``' fields: ``key``, ``on_busy``, ``stage``, ``timeout``, ``countdown``,
    ``retries``, ``queued_for``, ``on_lost``. While it runs, ``self.request.redlease_token``
    is the fencing token of its hold and ``self.request.redlease_lock`` the ``Lock``
    (``lease_lost`` tells whether the hold was lost meanwhile).
    """

    exclusive: Mapping[str, Any] = {}
    _exclusive: Options | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name") or f"{cls.__module__}.{cls.__qualname__}"
        cls._exclusive = _options(str(name), cls.exclusive, _run_function(cls))
        if not issubclass(TaskSkippedError, tuple(cls.throws)):  # an expected error
            cls.throws = (*cls.throws, TaskSkippedError)

    @property
    def exclusive_options(self) -> Options:
        options = self._exclusive
        if options is None:
            raise InvalidArgumentError(f"{self.name}: subclass ExclusiveTask to use it")
        return options

    def exclusive_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The key of a call of this task with ``args`` and ``kwargs``."""
        return self.exclusive_options.key(tuple(args), dict(kwargs))

    # --- the producer: stage "enqueue" ---------------------------------------------------

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> Any:
        opts = self.exclusive_options
        headers = options.get("headers") or {}
        if opts.stage != "enqueue" or HEADER in headers or self.app.conf.task_always_eager:
            # a retry carries its own (or none); an eager call only runs (stage "run")
            return super().apply_async(
                args, kwargs, task_id, producer, link, link_error, shadow, **options
            )
        key = self.exclusive_key(args or (), kwargs or {})
        holds = Holds.of(self.app, key)
        lease = opts.queued_for + _delay(options)
        deadline = time.monotonic() + RECORD_WAIT
        pause = 0.002
        for _ in range(MAX_ROUNDS):
            permit = holds.reserve(lease)
            if permit is None:  # queued (or a run is taking it over)
                first = holds.read(holds.queued_record)
                if first is not None:
                    log.info("task %s: %r is queued as %s: not sent again", self.name, key, first)
                    return self.AsyncResult(first)
            elif holds.client.lock(holds.lock_name).locked():  # running
                running = holds.read(holds.running_record)
                holds.give_back(permit, "a duplicate looked at it")
                if running is not None:
                    log.info("task %s: %r is running as %s: not sent", self.name, key, running)
                    return self.AsyncResult(running)
            else:
                task_id = task_id or uuid()
                holds.write(holds.queued_record, task_id, lease)
                options["headers"] = {**headers, HEADER: {"key": key, "permit": permit}}
                try:
                    return super().apply_async(
                        args, kwargs, task_id, producer, link, link_error, shadow, **options
                    )
                except BaseException:
                    holds.clear(holds.queued_record, task_id)
                    holds.give_back(permit, "its task could not be sent")
                    raise
            if time.monotonic() > deadline:
                break
            time.sleep(pause)  # the holder writes its task's id one round trip after its hold
            pause = min(pause * 2, 0.05)
        raise LockTimeoutError(
            f"task {self.name}: {key!r} is held by a run whose task id is unknown (a direct "
            f"call, or a holder that died before recording it): nothing was sent",
            name=holds.lock_name,
        )

    # --- the worker: every stage ---------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        opts = self.exclusive_options
        request = self.request
        carried = getattr(request, HEADER, None)
        if not isinstance(carried, dict):
            carried = None
        key = str(carried["key"]) if carried else self.exclusive_key(args, kwargs)
        run = Run(
            holds=Holds.of(self.app, key),
            options=opts,
            task_id=None if request.called_directly else request.id,
            permit=str(carried["permit"]) if carried else None,
        )
        if self.acks_late and run.task_id is not None and not request.is_eager:
            # a message that may be delivered again: its record tells a redelivery that an
            # earlier delivery of it may hold the key
            run.delivery = run.holds.delivery_record(run.task_id, int(request.retries or 0))
            run.redelivered = not run.holds.start_delivery(run.delivery)
        try:
            try:
                taken = self._take(run)
            except BaseException as exc:
                self._finish(run, exc)  # a hold taken before the failure is given back
                raise
            if not taken:
                if self._runs_elsewhere(run):
                    log.warning(
                        "task %s[%s]: a delivery of it already runs, holding %r: this one "
                        "ends without running (the running one reports the result)",
                        self.name,
                        run.task_id,
                        run.holds.key,
                    )
                    run.delivery = None  # the record is the running delivery's
                    raise Ignore()
                return self._busy(run)
            token = run.lock.fencing_token if run.lock is not None else None
            self.push_request(redlease_token=token, redlease_lock=run.lock, redlease_run=run)
            outcome: BaseException | None = None
            try:
                return super().__call__(*args, **kwargs)
            except BaseException as exc:
                outcome = exc
                raise
            finally:
                self.pop_request()
                self._finish(run, outcome)
        finally:
            self._end_delivery(run)

    def _take(self, run: Run) -> bool:
        """Take the run hold (and consume the task's reservation); ``False`` when busy."""
        holds, opts = run.holds, run.options
        wait = math.inf if opts.timeout is None else opts.timeout
        if run.permit is not None:
            # the key is reserved for this task: only a run ending (or dead, for up to one
            # lease) can hold the lock now
            wait = max(holds.client.watchdog_timeout, wait)
        if run.redelivered:
            # an earlier delivery of this message may hold the key: its worker process died
            # (its hold runs out within one lease), or it still runs (it renews it)
            wait = max(wait, holds.client.watchdog_timeout + REDELIVERY_MARGIN)
        deadline = time.monotonic() + wait
        lock = holds.lock(self.name)
        for _ in range(MAX_ROUNDS):
            left = deadline - time.monotonic()
            if not (
                lock.acquire(timeout=_finite(left)) if left > 0 else lock.acquire(blocking=False)
            ):
                return False
            if run.permit is None and opts.reserves and holds.reserved():
                lock.release()  # a queued or retrying task has the key: it goes first
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                probe = holds.reservations.acquire(timeout=_finite(left), lease=PROBE_LEASE)
                if probe is None:
                    return False
                holds.reservations.release(probe)  # that task has taken the run hold now
                continue
            run.lock = lock
            self._started(run)
            return True
        return False

    def _started(self, run: Run) -> None:
        holds = run.holds
        if run.delivery is not None and run.lock is not None:
            token = run.lock.fencing_token
            ttl = int(DELIVERY_TTL * 1000)
            holds.client.redis.set(run.delivery, str(token), px=ttl)
        if run.options.stage == "enqueue":
            if run.task_id is None:
                holds.clear(holds.running_record, None)  # (no id to tell a duplicate)
            else:
                holds.write(holds.running_record, run.task_id)
        if run.permit is not None:
            holds.clear(holds.queued_record, run.task_id)
            holds.give_back(run.permit, f"its task {run.task_id} started")
            run.permit = None

    def _runs_elsewhere(self, run: Run) -> bool:
        """Whether the key is held by an earlier delivery of this very message, alive (a
        redelivery waited one lease for it: it was renewed): its record names the current
        hold's fencing token."""
        if not run.redelivered or run.delivery is None:
            return False
        holds = run.holds
        recorded = holds.read(run.delivery)
        if not recorded:
            return False
        token = holds.client.lock(holds.lock_name).statistics().fencing_token
        return token is not None and recorded == str(token)

    def _end_delivery(self, run: Run) -> None:
        """This delivery ended (ran, skipped, failed): its record goes."""
        record, run.delivery = run.delivery, None
        if record is None:
            return
        try:
            run.holds.client.redis.delete(record)
        except (RedleaseError, redis.RedisError) as exc:
            log.warning("task %s: could not delete the record of its delivery: %s", self.name, exc)

    def _busy(self, run: Run) -> Any:
        opts, holds = run.options, run.holds
        error = LockTimeoutError(
            f"task {self.name}[{run.task_id}]: {holds.key!r} is busy (another run holds it, or "
            f"a queued or retrying run reserved it)",
            name=holds.lock_name,
        )
        if opts.on_busy == "retry":
            self.push_request(redlease_run=run)
            try:
                raise self.retry(countdown=opts.countdown, exc=error)
            finally:
                self.pop_request()
                self._drop_reservation(run)
        self._drop_reservation(run)
        if opts.on_busy == "skip":
            log.info("task %s[%s]: %r is busy: skipped", self.name, run.task_id, holds.key)
            which = self.name if run.task_id is None else f"{self.name}[{run.task_id}]"
            raise TaskSkippedError(
                f"task {which} skipped: {holds.key!r} is busy (another run holds it, or a "
                f"queued or retrying run reserved it)",
                name=holds.lock_name,
            )
        raise error

    def _drop_reservation(self, run: Run) -> None:
        if run.permit is not None and not run.handed_over:
            run.holds.clear(run.holds.queued_record, run.task_id)
            run.holds.give_back(run.permit, f"its task {run.task_id} gave up")
        run.permit = None

    def _finish(self, run: Run, outcome: BaseException | None) -> None:
        lock, holds = run.lock, run.holds
        if lock is None:
            return
        run.lock = None
        try:
            if run.options.stage == "enqueue":
                holds.clear(holds.running_record, run.task_id)
        except (RedleaseError, redis.RedisError) as exc:
            log.warning("task %s: could not clear the record of %r: %s", self.name, holds.key, exc)
        try:
            lock.release()
        except LeaseLostError as exc:
            if outcome is None and run.options.on_lost == "raise":
                raise  # it ran, but not alone to its end: say so
            kept = "its result is kept" if outcome is None else "its error stands"
            log.warning(
                "task %s[%s]: its hold of %r was lost before it ended (cause %s): %s",
                self.name,
                run.task_id,
                holds.key,
                exc.cause,
                kept,
            )

    # --- Celery's retries ------------------------------------------------------------------

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        request = self.request
        run = getattr(request, "redlease_run", None)
        if not isinstance(run, Run) or request.called_directly or request.is_eager:
            return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        carried, made = self._keep_for_retry(run, args, kwargs, eta, countdown)
        options["headers"] = {**(options.get("headers") or {}), HEADER: carried}
        try:
            result = super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        except Retry:
            run.handed_over = carried is not None
            raise
        except BaseException:  # not retried (max_retries, the message not sent): undo
            if made is not None and carried is not None:
                made.clear(made.queued_record, run.task_id)
                made.give_back(carried["permit"], "the retry was not sent")
            raise
        run.handed_over = carried is not None
        return result

    def _keep_for_retry(
        self, run: Run, args: Any, kwargs: Any, eta: Any, countdown: float | None
    ) -> tuple[dict[str, str] | None, Holds | None]:
        """The reservation a retry carries (``retries="keep"``): the busy run's own, its lease
        lengthened, or one taken now by the run that holds the key; ``None`` when there is
        none to keep. Also the ``Holds`` of a reservation taken now (undone if not sent)."""
        opts, holds, request = run.options, run.holds, self.request
        if opts.retries != "keep" or (run.permit is None and run.lock is None):
            return None, None
        if countdown is None and eta is None:
            countdown = self.default_retry_delay
        lease = opts.queued_for + _delay({"countdown": countdown, "eta": eta})
        key = holds.key
        if args is not None or kwargs is not None:
            key = self.exclusive_key(
                request.args if args is None else args,
                request.kwargs if kwargs is None else kwargs,
            )
        target = holds if key == holds.key else Holds.of(self.app, key)
        if run.permit is not None:  # a busy run passes its reservation on
            if target is not holds or not holds.reservations.update_lease_time(run.permit, lease):
                return None, None  # (given back by _busy)
            permit, made = run.permit, None
        else:
            taken = target.reserve(lease, timeout=RESERVE_WAIT)
            if taken is None:
                log.warning(
                    "task %s: %r could not be kept for its retry: it is free meanwhile",
                    self.name,
                    key,
                )
                return None, None
            permit, made = taken, target
        if opts.stage == "enqueue" and run.task_id is not None:
            target.write(target.queued_record, run.task_id, lease)
        return {"key": key, "permit": permit}, made
