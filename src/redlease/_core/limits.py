"""What durations and counts redlease accepts: the one place every argument is checked.

Every primitive, client and the CLI check their durations and counts here, before anything is
sent, so that a bad value gets one clear ``InvalidArgumentError`` naming the argument (never a
raw ``TypeError``, ``OverflowError`` or server error, and never a lock left behind).
"""

from __future__ import annotations

import math
import sys
from datetime import timedelta

from ..errors import InvalidArgumentError

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

MIN_PAUSE = 0.005
"""The shortest pause before a retry that follows a try that could not succeed (a grant that
came too late, a split Redlock vote): every such retry loop waits at least this long, then
longer each time (``Pace``), so that no loop re-sends with no pause."""

MAX_PAUSE = 0.5
"""The longest of those pauses (a wake-up or the caller's deadline may end a wait sooner)."""


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


def wait(value: object, what: str = "timeout", *, zero: bool) -> float | None:
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


class Pace:
    """The pause before each retry of a loop whose last try could not succeed: ``MIN_PAUSE``,
    doubling up to ``MAX_PAUSE``; ``reset()`` after a try that got somewhere."""

    def __init__(self) -> None:
        self._next = MIN_PAUSE

    def pause(self, remaining: float = math.inf) -> float:
        """The pause now (at most ``remaining``, and never below 0)."""
        pause, self._next = self._next, min(MAX_PAUSE, self._next * 2)
        return max(0.0, min(remaining, pause))

    def reset(self) -> None:
        self._next = MIN_PAUSE


FREE_LATE_RETRIES = 2
"""Grants in a row that came too late (and were given back) after which a waiter no longer
waits for a wake-up (its own give-back wakes it at once) but sleeps a growing pause before it
tries again: a lease too short for the round trip never makes a waiter spin."""


class LateGrants:
    """A waiter's grants in a row that came too late (each given back), and the pause before
    its next try (``Pace``); every wait loop of the lock, the rw lock and the lease semaphore
    keeps one."""

    def __init__(self) -> None:
        self._pace = Pace()
        self._count = 0

    def came(self) -> None:
        """A grant came too late and was given back."""
        self._count += 1

    @property
    def must_sleep(self) -> bool:
        """Past ``FREE_LATE_RETRIES``: sleep the pause rather than wait for a wake-up."""
        return self._count > FREE_LATE_RETRIES

    def pause(self, remaining: float = math.inf) -> float:
        return self._pace.pause(remaining)

    def reset(self) -> None:
        """A try that got somewhere (held by another, or granted in time)."""
        self._count = 0
        self._pace.reset()
