"""The Celery app of tests/integration/test_celery.py: exclusive tasks that record each run.

The worker is started by the test as ``celery -A celery_app worker`` (this directory on the
path) with ``REDLEASE_TEST_URL`` set: broker, result backend and redlease on one private
server. The test process imports this module too and calls ``configure(url)``.

Each task records its runs in the list ``<name>:runs`` (JSON: task id, pid, fencing token,
Celery retries, and whether another run of it was under way: ``<name>:active`` counts them)
and then waits until the test pushes to ``<name>:go`` (bounded by ``seconds``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis
from celery import Celery, signals

from redlease import QuorumError, ServerUnavailableError, StaleTokenError
from redlease.contrib.celery import ExclusiveTask
from redlease.events import LockEvent

LEASE = 2.0
"""The workers' watchdog_timeout: a SIGKILLed run frees its key within this."""

app = Celery("redlease_test")
app.conf.update(
    redlease_client_options={"watchdog_timeout": LEASE},
    # errors come back to the caller pickled: with their type and every attribute (the
    # tasks stay JSON: a worker running as root refuses pickled task messages)
    result_serializer="pickle",
    accept_content=["json"],
    result_accept_content=["json", "pickle"],
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def configure(url: str) -> None:
    app.conf.update(broker_url=url, result_backend=url)


if os.environ.get("REDLEASE_TEST_URL"):
    configure(os.environ["REDLEASE_TEST_URL"])

_raw: tuple[int, redis.Redis] | None = None


def raw() -> redis.Redis:
    """A plain connection of this process (made after the fork)."""
    global _raw
    if _raw is None or _raw[0] != os.getpid():
        # a read may wait for a BLPOP of up to a minute (redis-py's default: 5 s)
        _raw = (os.getpid(), redis.Redis.from_url(app.conf.broker_url, socket_timeout=120))
    return _raw[1]


@signals.worker_ready.connect
def _ready(**_: Any) -> None:
    raw().set(os.environ["REDLEASE_TEST_READY"], os.getpid())


def count_event(event: LockEvent) -> None:
    """Counts each event by kind and lock name, and notes the processes that saw them."""
    r = raw()
    r.incr(f"events:{event.kind}:{event.name}")
    r.sadd(f"events:pids:{event.name}", os.getpid())


# added to each process's client (test_listeners_reach_each_prefork_process)
app.conf.redlease_listeners = [count_event]


def record_run(task: Any, name: str, seconds: float) -> str:
    r = raw()
    active = r.incr(f"{name}:active")
    try:
        run = {
            "task": task.request.id,
            "pid": os.getpid(),
            "token": task.request.redlease_token,
            "retries": task.request.retries,
            "overlap": active > 1,
        }
        r.rpush(f"{name}:runs", json.dumps(run))
        r.blpop([f"{name}:go"], timeout=seconds)
    finally:
        r.decr(f"{name}:active")
    return "ran"


@app.task(
    name="t.run_skip",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "skip:{name}"},
)
def run_skip(self: Any, name: str, seconds: float = 30) -> str:
    return record_run(self, name, seconds)


@app.task(
    name="t.enqueue_skip",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "enqueue:{name}", "stage": "enqueue"},
)
def enqueue_skip(self: Any, name: str, seconds: float = 30) -> str:
    return record_run(self, name, seconds)


@app.task(
    name="t.run_raise",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "raise:{name}", "on_busy": "raise"},
)
def run_raise(self: Any, name: str, seconds: float = 30) -> str:
    return record_run(self, name, seconds)


@app.task(
    name="t.run_retry",
    bind=True,
    base=ExclusiveTask,
    max_retries=60,
    exclusive={"key": "retry:{name}", "on_busy": "retry", "countdown": 0.3},
)
def run_retry(self: Any, name: str, seconds: float = 30) -> str:
    return record_run(self, name, seconds)


@app.task(
    name="t.run_wait",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "wait:{name}", "on_busy": "wait", "timeout": 20},
)
def run_wait(self: Any, name: str, seconds: float = 30) -> str:
    return record_run(self, name, seconds)


@app.task(
    name="t.skip_after_timeout",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "skip-after:{name}", "timeout": 20},  # on_busy: "skip", the default
)
def skip_after_timeout(self: Any, name: str, seconds: float = 30) -> str:
    return record_run(self, name, seconds)


def _retrying(self: Any, name: str, countdown: float) -> str:
    """The first try retries itself after ``countdown``; the second runs to the end."""
    if self.request.retries == 0:
        raw().rpush(f"{name}:tries", self.request.id)
        raise self.retry(countdown=countdown)
    return record_run(self, name, 0.01)


@app.task(name="t.retries_keep", bind=True, base=ExclusiveTask, exclusive={"key": "keep:{name}"})
def retries_keep(self: Any, name: str, countdown: float = 1.5) -> str:
    return _retrying(self, name, countdown)


@app.task(
    name="t.retries_retake",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "retake:{name}", "retries": "retake"},
)
def retries_retake(self: Any, name: str, countdown: float = 1.5) -> str:
    return _retrying(self, name, countdown)


@app.task(name="t.fails", base=ExclusiveTask, exclusive={"key": "fails:{kind}"})
def fails(kind: str) -> None:
    """Raises one of redlease's errors, to see it reach the caller whole."""
    if kind == "stale":
        raise StaleTokenError("a stale write", resource="balance:7", token=3, seen=9)
    raise QuorumError(
        "no majority",
        name="orders:42",
        owner="someone",
        quorum=2,
        outcomes={"a:1": "granted", "b:2": "unavailable"},
        errors={"b:2": ServerUnavailableError("timed out", address="b:2")},
    )


def work(task: Any, name: str, seconds: float) -> str:
    """A run of a unit of work: counted in as it starts (``<name>:runs``, as ``record_run``),
    done once the test pushes to ``<name>:go``: then recorded in ``<name>:done``. A run killed
    mid-task is in ``runs`` but never in ``done``."""
    record_run(task, name, seconds)
    raw().rpush(f"{name}:done", json.dumps({"task": task.request.id, "pid": os.getpid()}))
    return "ran"


@app.task(
    name="t.acks_late",
    bind=True,
    base=ExclusiveTask,
    acks_late=True,
    reject_on_worker_lost=True,
    exclusive={"key": "late:{name}"},
)
def acks_late(self: Any, name: str, seconds: float = 30) -> str:
    """The at-least-once recipe: a run killed mid-task is redelivered (same task id)."""
    return work(self, name, seconds)


_listening: set[int] = set()


def lost_events(task: Any) -> None:
    """This process's redlease client tells ``<lock name>:events`` of each lost lease (kind
    and cause), as a user's listener (or ``redlease.metrics``) would count them."""
    from redlease.contrib.celery import client_for

    if os.getpid() in _listening:
        return
    _listening.add(os.getpid())

    def heard(event: Any) -> None:
        if event.kind == "lease_lost":
            raw().rpush(f"{event.name}:events", f"{event.kind} {event.cause}")

    client_for(task.app).add_listener(heard)


@app.task(name="t.lost_log", bind=True, base=ExclusiveTask, exclusive={"key": "lost:{name}"})
def lost_log(self: Any, name: str, seconds: float = 30) -> str:
    lost_events(self)
    return record_run(self, name, seconds)


@app.task(
    name="t.lost_raise",
    bind=True,
    base=ExclusiveTask,
    exclusive={"key": "lost:{name}", "on_lost": "raise"},
)
def lost_raise(self: Any, name: str, seconds: float = 30) -> str:
    lost_events(self)
    return record_run(self, name, seconds)
