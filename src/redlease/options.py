"""Validation of user-given times and names: one clear error naming what was wrong."""

from __future__ import annotations

import math
from datetime import timedelta

from ._core.requests import Replication
from .errors import InvalidArgumentError

Seconds = float | int | timedelta


def seconds(value: Seconds, what: str) -> float:
    """``value`` as positive, finite seconds (``timedelta`` accepted)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def window(value: Seconds | None, what: str) -> float:
    """A time window where 0 or ``None`` means off."""
    if value is None or (not isinstance(value, timedelta) and value == 0):
        return 0.0
    return seconds(value, what)


def replication(replicas: int, timeout: Seconds) -> Replication | None:
    """Replica-confirmed writes: ``None`` for ``replicas=0``."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise InvalidArgumentError(f"replicas must be an int >= 0, got {replicas!r}")
    wait = seconds(timeout, "replica_timeout")
    return Replication(replicas, max(1, round(wait * 1000))) if replicas else None


def chosen_lease(lease: Seconds | None, default: float | None) -> float | None:
    """An acquire's lease: its own if given (validated), else the lock's (``None``: watchdog)."""
    chosen = optional_seconds(lease, "lease")
    return default if chosen is None else chosen


def optional_seconds(value: Seconds | None, what: str) -> float | None:
    return None if value is None else seconds(value, what)


def lock_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgumentError(f"lock name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError("lock name must not be empty")
    return name


def wait_args(blocking: bool, timeout: Seconds | None) -> float | None:
    """Check ``acquire(blocking, timeout)`` as ``threading.Lock.acquire`` would, and stricter:
    a timeout must be positive (use ``blocking=False`` for a single try)."""
    if not blocking and timeout is not None:
        raise InvalidArgumentError("a timeout cannot be given with blocking=False")
    return optional_seconds(timeout, "timeout")
