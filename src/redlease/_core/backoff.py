"""Full-jitter exponential backoff (randomness injected, so tests can fix it)."""

from __future__ import annotations

import random
from collections.abc import Callable

from .limits import MIN_PAUSE


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
