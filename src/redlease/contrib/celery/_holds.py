"""The holds of one key (the run hold, the reservation, the task-id records, the records of
deliveries), on one client, and one run of an exclusive task as its worker process sees it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from ... import Client, InvalidArgumentError, LeaseLostError, LeaseSemaphore, Lock
from ._clients import client_for
from ._options import Options

log = logging.getLogger("redlease.contrib.celery")  # the package's logger, as before

DEFAULT_PREFIX = "redlease:celery:"
DELIVERY_TTL = 7 * 24 * 3600.0
"""How long the record of a delivery of an ``acks_late`` task lives at most (it is deleted
when the delivery ends; this only bounds what a delivery killed and never redelivered
leaves)."""


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
