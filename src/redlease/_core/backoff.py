"""Full-jitter exponential backoff (randomness injected, so tests can fix it)."""

from __future__ import annotations

from collections.abc import Callable


def full_jitter(attempt: int, *, base: float, cap: float, random: Callable[[], float]) -> float:
    """A delay drawn uniformly from ``[0, min(cap, base * 2**attempt))``."""
    return float(random() * min(cap, base * (2 ** min(attempt, 32))))
