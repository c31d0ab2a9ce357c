"""Every argument check: what redlease accepts, one function per kind of argument.

Every primitive, client and the CLI check their arguments here (durations, leases, waits,
counts, names, tokens, layouts), before anything is sent, so that a bad value gets one
clear ``InvalidArgumentError`` naming the argument (never a raw ``TypeError``,
``OverflowError`` or server error, and never a lock left behind)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from ..errors import InvalidArgumentError
from .keys import hash_tag
from .requests import Replication

if TYPE_CHECKING:
    from .backoff import ExponentialBackoff

MIN_LEASE = 0.01
"""The shortest lease (and ``watchdog_timeout``, ``handoff_window``) accepted: 10 ms.

A grant counts only if lease time is left when its reply arrives, after the round trip and the
clock-drift allowance of 1% + 2 ms (see ``lock.drift``). A lease of about 2 ms or less can
therefore never succeed: each try would be given back and tried again, forever. 10 ms leaves
about 8 ms for the round trip, which a server on the same network answers well within; a
shorter lease is refused rather than retried without end."""

MAX_LEASE = 10 * 365 * 24 * 3600.0
"""The longest lease (and any other duration sent to the server) accepted: 10 years.

Leases go to the server in milliseconds, and the scripts add them to the server clock in Lua,
whose numbers are doubles written back as text: past about 1e14 ms (some 3,000 years from
now) a deadline comes out as ``1e+14``, which ``PEXPIRE`` refuses after the lock was written.
Ten years (3.2e11 ms) stays far inside that, and far inside what a thread can wait on."""

MAX_COUNT = 2**53 - 1
"""The largest semaphore permit count, latch count, or number of permits added or given back
at once: 9,007,199,254,740,991. The scripts compare counts as Lua numbers (doubles), exact
only up to 2**53; the server's own integers would allow 2**63 - 1. A semaphore whose permits
would pass this bound by an ``add_permits`` or a ``release`` refuses it and changes nothing."""


MAX_AT_ONCE = 10_000
"""The most permits one lease-semaphore call takes or gives back by id (``acquire_many``,
``release_many``): each id travels in the one request."""


def _shown(value: object) -> str:
    """``repr(value)``, cut short (an int of 400 digits is not worth printing)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's limit of digits for str()
        return f"an int of {value.bit_length()} bits" if isinstance(value, int) else "?"
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _number(value: object, what: str, kind: str) -> float:
    """``value`` (int, float or ``timedelta``) as a float; ``InvalidArgumentError`` for
    anything else (bools, strings, ``None``, NaN)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{what} must be {kind}, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float: the largest float will do
        number = sys.float_info.max if value > 0 else -sys.float_info.max
    if math.isnan(number):
        raise InvalidArgumentError(f"{what} must be {kind}, got {_shown(value)}")
    return number


def duration(value: object, what: str) -> float:
    """A duration sent to the server (a replica or master timeout): seconds, ``> 0`` and at
    most ``MAX_LEASE``."""
    number = _number(value, what, "a number of seconds")
    if number <= 0:
        raise InvalidArgumentError(
            f"{what} must be a positive number of seconds, got {_shown(value)}"
        )
    if number > MAX_LEASE:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_LEASE:.0f} s (10 years), got {_shown(value)}"
        )
    return number


def lease(value: object, what: str = "lease") -> float:
    """A lease (or ``watchdog_timeout``, ``handoff_window``): seconds from ``MIN_LEASE`` to
    ``MAX_LEASE``."""
    number = duration(value, what)
    if number < MIN_LEASE:
        raise InvalidArgumentError(
            f"{what} must be at least {MIN_LEASE} s (a shorter lease runs out before a reply "
            f"can confirm it), got {_shown(value)}"
        )
    return number


def wait(value: object, what: str = "timeout", *, zero: bool = True) -> float | None:
    """How long to wait: ``None`` (as long as it takes) or seconds, ``>= 0`` (``zero``: 0
    means try once) or ``> 0``. Any finite length works, however long (waits are taken in
    bounded steps); an infinite one is refused, ``None`` says that."""
    if value is None:
        return None
    number = _number(value, what, "a number of seconds or None")
    if number < 0 or (number == 0 and not zero):
        least = ">= 0" if zero else "> 0"
        raise InvalidArgumentError(f"{what} must be None or seconds {least}, got {_shown(value)}")
    if math.isinf(number):
        raise InvalidArgumentError(
            f"{what} must be finite (None waits as long as it takes), got {_shown(value)}"
        )
    return number


def count(value: object, what: str, *, minimum: int = 1, hint: str = "") -> int:
    """A count (permits, a latch count): an int (not a bool) from ``minimum`` to
    ``MAX_COUNT``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {_shown(value)}")
    if value < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise InvalidArgumentError(f"{what} must be {kind}{hint}, got {_shown(value)}")
    if value > MAX_COUNT:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_COUNT} (2**53 - 1), got {_shown(value)}"
        )
    return value


Seconds = float | int | timedelta

LEASES = frozenset({"lease", "watchdog_timeout", "handoff_window"})
"""Durations that are leases: besides the upper bound they must be at least ``MIN_LEASE``."""


def seconds(value: Seconds, what: str) -> float:
    """``value`` as positive, finite seconds (``timedelta`` accepted), at most ``MAX_LEASE``;
    a lease (``what`` in ``LEASES``: ``lease``, ``watchdog_timeout``) at least ``MIN_LEASE``."""
    return lease(value, what) if what in LEASES else duration(value, what)


def window(value: Seconds | None, what: str) -> float:
    """A time window where 0 or ``None`` means off (else a lease: ``handoff_window`` is the
    first lease of a waiter handed the lock)."""
    if value is None or (not isinstance(value, timedelta | bool) and value == 0):
        return 0.0
    return lease(value, what)


def replication(replicas: int, timeout: Seconds) -> Replication | None:
    """Replica-confirmed writes: ``None`` for ``replicas=0``."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise InvalidArgumentError(f"replicas must be an int >= 0, got {replicas!r}")
    if replicas > MAX_COUNT:
        raise InvalidArgumentError(f"replicas must be at most {MAX_COUNT}, got {replicas}")
    wait = duration(timeout, "replica_timeout")
    return Replication(replicas, max(1, round(wait * 1000))) if replicas else None


def chosen_lease(lease: Seconds | None, default: float | None) -> float | None:
    """An acquire's lease: its own if given (validated), else the lock's (``None``: watchdog)."""
    chosen = optional_seconds(lease, "lease")
    return default if chosen is None else chosen


def optional_seconds(value: Seconds | None, what: str) -> float | None:
    return None if value is None else seconds(value, what)


def name(value: object, what: str) -> str:
    """The name of a primitive (``what``: "lock", "semaphore", "latch", "election", ...): a
    non-empty str, valid text, whose braces, if any, form a hash tag (so that every key of the
    primitive shares its slot), the same rule for every primitive."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} name must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{what} name must not be empty")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{what} name {value!r} is not valid text (UTF-8)") from None
    if ("{" in value and hash_tag(value) == value) or ("}" in value and "{" not in value):
        # a '}' alone would end the hash tag Redisson's key names wrap the name in: those
        # keys would hash to another slot than the name
        raise InvalidArgumentError(
            f"{what} name {value!r} has braces that do not form a hash tag; use '{{tag}}' or none"
        )
    return value


LayoutName = Literal["redlease", "redisson"]
"""A fair lock's or read-write lock's data layout: redlease's own (the stronger guarantees),
or Redisson's (shared with Java services using Redisson on the same names)."""


def layout(value: object) -> LayoutName:
    if value == "redlease":
        return "redlease"
    if value == "redisson":
        return "redisson"
    raise InvalidArgumentError(f"layout must be 'redlease' or 'redisson', got {value!r}")


def wait_args(blocking: bool, timeout: Seconds | None) -> tuple[bool, float | None]:
    """Check ``acquire(blocking, timeout)`` as ``threading.Lock.acquire`` would; returns the
    ``(blocking, wait)`` to go on with. ``timeout=0`` is a single try, as ``blocking=False``
    (``threading.Lock.acquire(timeout=0)``, redis-py's ``blocking_timeout=0``); a timeout
    other than 0 with ``blocking=False`` is refused. Any finite timeout works, however
    long; a negative one is refused."""
    delay = wait(timeout, "timeout", zero=True)
    if not blocking:
        if delay:
            raise InvalidArgumentError(
                f"a timeout cannot be given with blocking=False (a single try), got {timeout!r}"
            )
        return False, None
    if delay == 0:
        return False, None
    return True, delay


lease_seconds = lease
"""``lease`` under the name the shells use (``lease_seconds(value)``)."""
wait_seconds = wait
"""``wait`` under the name the shells use (``wait_seconds(value)``)."""


def non_negative_seconds(value: Seconds, what: str) -> float:
    """``value`` as seconds ``>= 0`` (``timedelta`` accepted), finite and at most
    ``MAX_LEASE``; else ``InvalidArgumentError`` naming ``what``."""
    number = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or math.isnan(number)
        or number < 0
    ):
        raise InvalidArgumentError(f"{what} must be a number of seconds >= 0, got {value!r}")
    if number > MAX_LEASE:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_LEASE:.0f} s (10 years), got {value!r}"
        )
    return float(number)


def fencing_token(value: object) -> int:
    """A fencing token given back by the caller: a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"fencing token must be a positive int, got {value!r}")
    return value


def milliseconds(value: object, what: str) -> int:
    """A time in milliseconds (``px``): a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"{what} must be a positive int of milliseconds, got {value!r}")
    return value


def backoff_fields(
    initial: object, maximum: object, multiplier: object, jitter: object
) -> tuple[float, float, float, float]:
    """An ``ExponentialBackoff``'s fields: ``initial`` and ``maximum`` seconds ``> 0``
    (``maximum >= initial``, at most ``MAX_LEASE``), ``multiplier`` a number ``>= 1``,
    ``jitter`` seconds ``>= 0``."""
    first = duration(initial, "backoff initial")
    last = duration(maximum, "backoff maximum")
    if last < first:
        raise InvalidArgumentError(
            f"backoff maximum must be at least its initial ({_shown(initial)} s), "
            f"got {_shown(maximum)}"
        )
    factor = _number(multiplier, "backoff multiplier", "a number")
    if factor < 1 or math.isinf(factor):
        raise InvalidArgumentError(
            f"backoff multiplier must be a finite number >= 1 (1: a constant pause), "
            f"got {_shown(multiplier)}"
        )
    spread = non_negative_seconds(jitter, "backoff jitter")  # type: ignore[arg-type]
    return first, last, factor, spread


def backoff(value: object) -> ExponentialBackoff:
    """A spin lock's ``backoff``: ``None`` (the default) or an ``ExponentialBackoff``."""
    from .backoff import ExponentialBackoff  # (it checks its fields here: imported late)

    if value is None:
        return ExponentialBackoff()
    if not isinstance(value, ExponentialBackoff):
        raise InvalidArgumentError(
            "backoff must be a redlease.ExponentialBackoff(initial=..., maximum=..., "
            f"multiplier=..., jitter=...) or None, got {_shown(value)}"
        )
    return value


def permits(value: object, what: str = "permits") -> int:
    """Permits to take or give back: an int from 0 (nothing, at once, as Redisson's
    ``tryAcquire(0)`` and ``release(0)``) to ``MAX_COUNT``."""
    return count(value, what, minimum=0)


def permits_delta(value: object, what: str = "permits") -> int:
    """Permits to add (Redisson's ``addPermits``): an int from ``-MAX_COUNT`` to ``MAX_COUNT``;
    a negative one takes permits away, 0 changes no count."""
    return count(value, what, minimum=-MAX_COUNT)


def permits_at_once(value: object, what: str = "permits") -> int:
    """How many lease permits one call takes: an int from 0 to ``MAX_AT_ONCE``."""
    number = count(value, what, minimum=0)
    if number > MAX_AT_ONCE:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_AT_ONCE} (permits taken by one call), got {number}"
        )
    return number


def permit_id(value: object) -> str:
    """A permit id as ``acquire`` returns it: 32 lowercase hex digits (16 bytes, as Redisson)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"permit_id must be a str, got {type(value).__name__}")
    text = value.lower()
    if len(text) != 32 or any(c not in "0123456789abcdef" for c in text):
        raise InvalidArgumentError(
            f"permit_id must be 32 hex digits as returned by acquire(), got {value!r}"
        )
    return text


def permit_ids(values: object) -> list[str]:
    """Permit ids given back together: a list (or other iterable, not a str) of at most
    ``MAX_AT_ONCE`` ids as ``acquire`` returns them, no two alike."""
    if isinstance(values, str | bytes | bytearray) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"permit_ids must be a list of permit ids, got {type(values).__name__}"
        )
    ids = []
    for value in values:
        ids.append(permit_id(value))
        if len(ids) > MAX_AT_ONCE:
            raise InvalidArgumentError(
                f"permit_ids must hold at most {MAX_AT_ONCE} ids (given back by one call)"
            )
    seen: set[str] = set()
    for permit in ids:
        if permit in seen:
            raise InvalidArgumentError(f"permit_ids names a permit twice: {permit}")
        seen.add(permit)
    return ids
