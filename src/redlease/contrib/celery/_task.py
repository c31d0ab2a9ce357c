"""``ExclusiveTask``: the producer's side (``apply_async``, stage ``enqueue``), the worker's
(``__call__``: the run hold, the reservation it consumes, a busy key's ``on_busy``, the end of
a run) and Celery's retries (``retry``: the reservation a retry keeps)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore, Retry
from celery.utils import uuid

from ... import InvalidArgumentError, LeaseLostError, LockTimeoutError, RedleaseError
from ._holds import DELIVERY_TTL, Holds, Run
from ._options import Options, _options, _run_function

log = logging.getLogger("redlease.contrib.celery")  # the package's logger, as before

HEADER = "redlease_reservation"
"""The message header carrying a task's reservation: ``{"key": ..., "permit": ...}`` (the key
is the producer's, so that the worker names the same holds whatever the serializer did to the
arguments); ``None`` in a retry that carries none."""

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


# named by its public module (where it was defined before the package was split): a pickled
# TaskSkippedError, and Celery's JSON result of one (its exc_module), name the module to import
# it from, the same for a process running another version
TaskSkippedError.__module__ = "redlease.contrib.celery"


def _finite(seconds: float) -> float | None:
    """A wait for ``acquire(timeout=)``: ``None`` (as long as it takes) for infinity."""
    return None if math.isinf(seconds) else seconds


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


ExclusiveTask.__module__ = "redlease.contrib.celery"  # (as TaskSkippedError's)
