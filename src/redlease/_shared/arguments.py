"""Validation of user-given times and names: one clear error naming what was wrong.

The bounds and the checks themselves live in ``_core.limits`` (the core checks its own
arguments with them too); this module gives them the shapes the clients and primitives use.
"""

from __future__ import annotations

from datetime import timedelta

from .._core import limits
from .._core.limits import MAX_COUNT, MAX_LEASE, MIN_LEASE
from .._core.requests import Replication
from ..errors import InvalidArgumentError

__all__ = [
    "MAX_COUNT",
    "MAX_LEASE",
    "MIN_LEASE",
    "Seconds",
    "chosen_lease",
    "layout",
    "lease_seconds",
    "lock_name",
    "optional_seconds",
    "replication",
    "seconds",
    "wait_args",
    "wait_seconds",
    "window",
]

Seconds = float | int | timedelta

LEASES = frozenset({"lease", "watchdog_timeout", "handoff_window"})
"""Durations that are leases: besides the upper bound they must be at least ``MIN_LEASE``."""


def seconds(value: Seconds, what: str) -> float:
    """``value`` as positive, finite seconds (``timedelta`` accepted), at most ``MAX_LEASE``;
    a lease (``what`` in ``LEASES``: ``lease``, ``watchdog_timeout``) at least ``MIN_LEASE``."""
    return limits.lease(value, what) if what in LEASES else limits.duration(value, what)


def lease_seconds(value: Seconds, what: str = "lease") -> float:
    """A lease or ``watchdog_timeout``: seconds from ``MIN_LEASE`` (10 ms) to ``MAX_LEASE``
    (10 years)."""
    return limits.lease(value, what)


def wait_seconds(
    value: Seconds | None, what: str = "timeout", *, zero: bool = True
) -> float | None:
    """A wait: ``None`` (as long as it takes) or finite seconds ``>= 0`` (``zero=False``:
    ``> 0``), however long."""
    return limits.wait(value, what, zero=zero)


def window(value: Seconds | None, what: str) -> float:
    """A time window where 0 or ``None`` means off (else a lease: ``handoff_window`` is the
    first lease of a waiter handed the lock)."""
    if value is None or (not isinstance(value, timedelta | bool) and value == 0):
        return 0.0
    return limits.lease(value, what)


def replication(replicas: int, timeout: Seconds) -> Replication | None:
    """Replica-confirmed writes: ``None`` for ``replicas=0``."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise InvalidArgumentError(f"replicas must be an int >= 0, got {replicas!r}")
    if replicas > MAX_COUNT:
        raise InvalidArgumentError(f"replicas must be at most {MAX_COUNT}, got {replicas}")
    wait = limits.duration(timeout, "replica_timeout")
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


LAYOUTS = ("redlease", "redisson")
"""A fair lock's or read-write lock's data layout: redlease's own (the stronger guarantees),
or Redisson's (shared with Java services using Redisson on the same names)."""


def layout(value: object) -> str:
    if value not in LAYOUTS:
        raise InvalidArgumentError(f"layout must be 'redlease' or 'redisson', got {value!r}")
    assert isinstance(value, str)
    return value


def wait_args(blocking: bool, timeout: Seconds | None) -> tuple[bool, float | None]:
    """Check ``acquire(blocking, timeout)`` as ``threading.Lock.acquire`` would; returns the
    ``(blocking, wait)`` to go on with. ``timeout=0`` is a single try, as ``blocking=False``
    (``threading.Lock.acquire(timeout=0)``, redis-py's ``blocking_timeout=0``); a timeout
    other than 0 with ``blocking=False`` is refused. Any finite timeout works, however
    long; a negative one is refused."""
    wait = limits.wait(timeout, "timeout", zero=True)
    if not blocking:
        if wait:
            raise InvalidArgumentError(
                f"a timeout cannot be given with blocking=False (a single try), got {timeout!r}"
            )
        return False, None
    if wait == 0:
        return False, None
    return True, wait
