"""How long a retry loop pauses: full-jitter exponential backoff (randomness injected, so
tests can fix it), riding out an outage, and the pace of retries after a try that could
not succeed."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MIN_PAUSE = 0.005
"""The shortest pause before a retry that follows a try that could not succeed (a grant that
came too late, a split Redlock vote): every such retry loop waits at least this long, then
longer each time (``Pace``), so that no loop re-sends with no pause."""

MAX_PAUSE = 0.5
"""The longest of those pauses (a wake-up or the caller's deadline may end a wait sooner)."""


def full_jitter(
    attempt: int, *, base: float, cap: float, random: Callable[[], float], floor: float = 0.0
) -> float:
    """A delay drawn uniformly from ``[0, min(cap, base * 2**attempt))``, at least ``floor``
    (a retry loop passes ``MIN_PAUSE``: a draw near 0 must not make its retry immediate)."""
    return max(floor, float(random() * min(cap, base * (2 ** min(attempt, 32)))))


class Outage:
    """A waiter riding out a server outage: how long to pause before the next try, or ``None``
    when it must give up (it was not listening yet, its deadline passed, or the outage has lasted
    ``tolerance`` seconds). Shared by every primitive's wait loop."""

    def __init__(
        self, clock: Callable[[], float], deadline: float | None, tolerance: float
    ) -> None:
        self._clock = clock
        self._deadline = deadline
        self._tolerance = tolerance
        self._since: float | None = None
        self._failures = 0

    def failed(self, listening: bool) -> float | None:
        now = self._clock()
        self._since = now if self._since is None else self._since
        out_of_time = self._deadline is not None and now >= self._deadline
        if not listening or out_of_time or now - self._since >= self._tolerance:
            return None
        self._failures += 1
        pause = full_jitter(
            self._failures, base=0.02, cap=0.5, random=random.random, floor=MIN_PAUSE
        )
        return pause if self._deadline is None else min(pause, self._deadline - now)

    def ended(self) -> None:
        self._since, self._failures = None, 0


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


@dataclass(frozen=True)
class ExponentialBackoff:
    """How a spin lock's waiter paces its tries (Redisson's ``LockOptions.ExponentialBackOff``):
    it tries, and while the lock is held pauses ``initial`` seconds, then ``multiplier`` times
    longer after each failed try, at most ``maximum``, each pause plus a random ``[0,
    jitter)`` so that waiters that started together drift apart. The defaults are Redisson's
    (1 ms, doubling, up to 128 ms) with 2 ms of jitter. A pause never runs past the caller's
    ``timeout``: the last try is made at the deadline.

    Raises:
        InvalidArgumentError: ``initial`` or ``maximum`` not a positive number of seconds,
            ``maximum`` below ``initial``, ``multiplier`` below 1, ``jitter`` negative; the
            error names the argument.
    """

    initial: float = 0.001
    """The first pause, in seconds (``> 0``)."""
    maximum: float = 0.128
    """The longest pause before the jitter, in seconds (``>= initial``)."""
    multiplier: float = 2.0
    """How much longer each pause is than the one before (``>= 1``; 1: a constant pause)."""
    jitter: float = 0.002
    """Up to this many seconds, drawn at random, are added to each pause (``>= 0``)."""

    def __post_init__(self) -> None:
        from .arguments import backoff_fields

        fields = backoff_fields(self.initial, self.maximum, self.multiplier, self.jitter)
        for name, value in zip(("initial", "maximum", "multiplier", "jitter"), fields, strict=True):
            object.__setattr__(self, name, value)

    def pauses(self, random: Callable[[], float] = random.random) -> Iterator[float]:
        """The pauses of one acquire call, one after each failed try (endless)."""
        pause = self.initial
        while True:
            yield pause + random() * self.jitter
            pause = min(self.maximum, pause * self.multiplier)
