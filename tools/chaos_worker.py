"""The worker process of the chaos run (``tools/chaos.py``): a loop of holds of one lock, each
with a read-modify-write of two resources (one plain, one fenced), each logged as a JSON line;
the records it logs; and what it shares with the parent (the keys, its stage, its trap)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis

import redlease

LOCK_NAME = "chaos:lock"
UNFENCED = "chaos:unfenced"
FENCED = "chaos:fenced"
READY_TIMEOUT = 60.0
HOLDING, READ_DONE = 1, 2
"""A worker's stage, shared with the parent: it holds the lock; it has also read the resources
(a fault now falls between its read and its write)."""
ARMED, STOPPED = 1, 2
"""A worker's trap, shared with the parent: stop (SIGSTOP itself) at the next READ_DONE;
stopped there."""
HAS_FENCING = hasattr(redlease.Client, "fenced_get") and hasattr(redlease, "StaleTokenError")


@dataclass
class Hold:
    worker: int
    n: int
    asked: float
    start: float
    token: int
    end: float | None = None
    """Just before release; for a killed holder, when it was killed."""
    released_at: float | None = None
    unfenced: str = "-"
    """Outcome of the plain write: ok, err, or - (not reached)."""
    fenced: str = "-"
    """Outcome of the fenced write: ok, stale, err, or -."""
    release: str = "-"
    """ok, lost (LeaseLostError), notowned, replica (ReplicaError), unavailable, or killed."""
    told: bool = False
    killed: bool = False
    release_calls: int = 0
    """How many times the worker called release, the inner hold's included (more than one a
    hold: it got ServerUnavailableError)."""
    reentry: str = "-"
    """Outcome of the re-entrant acquire (reentry-drop): ok, timeout, an error's name, or -."""

    @property
    def id(self) -> str:
        return f"{self.worker}.{self.n}"


@dataclass
class Fail:
    worker: int
    asked: float
    at: float
    why: str


@dataclass(frozen=True)
class WorkerConfig:
    index: int
    lock_url: str
    resource_url: str
    lease: float
    cs: float
    socket_timeout: float
    replicas: int
    log_path: str
    verbose: bool = False
    pubsub_url: str | None = None
    """Where the client's pub/sub connections go (else where its commands go)."""
    reentrant: bool = False
    """Re-enter every hold: acquire and release twice."""


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _append(value: bytes | str | None, hold_id: str) -> str:
    return f"{as_text(value)},{hold_id}" if value else hold_id


def worker_main(
    cfg: WorkerConfig, holding: Any, trapped: Any, ready: Any, go: Any, end_at: Any
) -> None:
    """One process: acquire -> read-modify-write both resources -> release, until ``end_at``
    (a shared value the parent sets before ``go``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if not cfg.verbose:  # lost leases and failed renewals are expected here: counted, not shown
        logging.getLogger("redlease").addHandler(logging.NullHandler())
    log = open(cfg.log_path, "a", buffering=1)  # noqa: SIM115 - kept for the life of the process

    def emit(record: dict[str, Any]) -> None:
        log.write(json.dumps(record) + "\n")

    extra: dict[str, Any] = {}
    if cfg.replicas:
        extra = {"replicas": cfg.replicas, "replica_timeout": 0.5}
    client = redlease.Client.from_url(
        cfg.lock_url,
        watchdog_timeout=cfg.lease,
        socket_timeout=cfg.socket_timeout,
        socket_connect_timeout=cfg.socket_timeout,
        **extra,
    )
    # no timeout on the resource: a write stuck in a partition lands when it heals, late
    resource = redlease.Client.from_url(cfg.resource_url)
    raw = redis.Redis.from_url(cfg.resource_url)
    if cfg.pubsub_url is not None:
        # no public way to send only pub/sub elsewhere: the client's subscriber, made early
        from redlease._threads.subscriber import Subscriber

        client._subscriber = Subscriber(redis.Redis.from_url(cfg.pubsub_url))
    told = threading.Event()
    lock = client.lock(LOCK_NAME, on_lease_lost=lambda _e: told.set())
    stale_error: type[BaseException] = getattr(redlease, "StaleTokenError", RuntimeError)
    replica_error: type[BaseException] = getattr(redlease, "ReplicaError", RuntimeError)
    owner = client._owner()  # this thread's owner field, for replies dropped by owner
    emit({"k": "hello", "w": cfg.index, "client": client.id, "owner": owner, "pid": os.getpid()})
    with ready.get_lock():
        ready.value += 1
    if not go.wait(READY_TIMEOUT + 10):
        return
    end: float = end_at.value
    clock = time.monotonic
    n = 0
    while clock() < end:
        told.clear()
        asked = clock()
        try:
            ok = lock.acquire(timeout=max(0.05, end - asked))
        except (redlease.RedleaseError, redis.RedisError) as exc:
            emit({"k": "fail", "w": cfg.index, "asked": asked, "at": clock(), "why": _name(exc)})
            time.sleep(0.02)
            continue
        if not ok:
            emit({"k": "fail", "w": cfg.index, "asked": asked, "at": clock(), "why": "timeout"})
            continue
        hold = Hold(cfg.index, n, asked, clock(), lock.fencing_token or 0)
        n += 1
        emit({"k": "begin", **hold.__dict__})
        inner = "-"
        if cfg.reentrant:  # re-enter; a careful user goes on with the outer hold if it fails
            try:
                inner = "ok" if lock.acquire(timeout=cfg.lease) else "timeout"
            except (redlease.RedleaseError, redis.RedisError) as exc:
                inner = _name(exc)
            hold.reentry = inner
        holding[cfg.index] = HOLDING
        old_fenced = None
        fenced_read_ok = False
        try:
            old_unfenced = raw.get(UNFENCED)
            if HAS_FENCING:
                try:  # a fenced read: from now on the resource refuses every older token
                    old_fenced = resource.fenced_get(FENCED, hold.token)
                    fenced_read_ok = True
                except stale_error:
                    hold.fenced = "stale"
                except redlease.RedleaseError:
                    hold.fenced = "err"
            holding[cfg.index] = READ_DONE
            with trapped.get_lock():  # the parent wants a fault here? then stop until told
                stop = trapped[cfg.index] == ARMED
                if stop:
                    trapped[cfg.index] = STOPPED
            if stop:
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(cfg.cs)
            raw.set(UNFENCED, _append(old_unfenced, hold.id))
            hold.unfenced = "ok"
        except redis.RedisError:
            hold.unfenced = "err"
        if HAS_FENCING and hold.unfenced == "ok" and fenced_read_ok:
            try:
                resource.fenced_set(FENCED, _append(old_fenced, hold.id), hold.token)
                hold.fenced = "ok"
            except stale_error:
                hold.fenced = "stale"
            except (redlease.RedleaseError, redis.RedisError):
                hold.fenced = "err"
        hold.end = clock()
        holding[cfg.index] = 0
        inner_calls = 0
        if inner == "ok":
            outcome, inner_calls = careful_release(lock, replica_error)
            if outcome != "ok":
                hold.release = f"inner-{outcome}"
        outcome, calls = careful_release(lock, replica_error)  # the outer hold all the same
        if hold.release == "-":
            hold.release = outcome
        hold.release_calls = inner_calls + calls
        hold.released_at = clock()
        hold.told = told.is_set() or hold.release.endswith("lost")
        emit({"k": "hold", **hold.__dict__})
    emit({"k": "bye", "w": cfg.index, "at": clock()})
    for closer in (client.close, resource.close, raw.close):
        with contextlib.suppress(Exception):
            closer()
    log.close()


def careful_release(lock: redlease.Lock, replica_error: type[BaseException]) -> tuple[str, int]:
    """Release as a careful user would: call again (bounded) while the server is unreachable.
    Returns the outcome and how many calls it took."""
    for calls in range(1, 41):
        try:
            lock.release()
            return "ok", calls
        except redlease.LeaseLostError:
            return "lost", calls
        except redlease.NotOwnedError:
            return "notowned", calls
        except replica_error:
            return "replica", calls  # released on the master, not confirmed by a replica
        except redlease.ServerUnavailableError:
            time.sleep(0.05)
    return "unavailable", 40


def _name(exc: BaseException) -> str:
    return type(exc).__name__
