"""A listener named in ``REDLEASE["LISTENERS"]`` (with ``REDLEASE_TEST_LISTENERS`` set): it
counts each event by kind and lock name on the test's server, and notes which processes saw
them, so that a test sees which clients had it."""

from __future__ import annotations

import os

import redis

from redlease.events import LockEvent

_connections: dict[int, redis.Redis] = {}


def count(event: LockEvent) -> None:
    pid = os.getpid()
    r = _connections.get(pid)
    if r is None:
        r = _connections[pid] = redis.Redis.from_url(os.environ["REDLEASE_TEST_URL"])
    r.incr(f"events:{event.kind}:{event.name}")
    r.sadd(f"events:pids:{event.name}", pid)
