"""How long a request whose outcome is not known stays resolvable: the receipts every
semaphore and latch request leaves on the server (``Windows``, ``WINDOWS``, ``receipt_ms``) and
the client's record of a request sent without a reply (``Unsure``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .lock import drift


@dataclass(frozen=True)
class Windows:
    """How long a request whose outcome is not known stays resolvable, in one place.

    A request (an acquire, a drain, a release, an add, a count-down...) leaves a receipt on
    the server when it runs, so that a retry or an undo of it is recognised. The client sends
    retries and undos of a request only within ``unsure_for`` seconds of its FIRST send, and
    every receipt lives ``receipt_ms``: ``unsure_for`` plus ``margin`` (a retry or undo still
    on its way at the end of the window, the server's clock running faster than the
    client's). Since a request runs after it is sent, its receipt outlives every retry and
    undo the client sends of it. Tests lower these through ``WINDOWS``; everything reads it
    when it needs it.
    """

    unsure_for: float = 45.0
    """Seconds after the first send of a request during which it may be sent again or undone."""
    margin: float = 15.0
    """How much longer than ``unsure_for`` a receipt lives."""

    @property
    def receipt_ms(self) -> int:
        """How long a receipt (or an undo's tombstone) lives on the server, ms."""
        return round((self.unsure_for + self.margin) * 1000)

    @property
    def conclusive_for(self) -> float:
        """How long after a request's first send a reply read by the client still proves what
        the receipt says: "no receipt" then means the request never ran (or was undone). The
        receipt's life less the drift allowance (the server's clock may run faster)."""
        life = self.receipt_ms / 1000
        return life - drift(life)


WINDOWS = Windows()
"""The windows in force (production values; a test may replace it)."""


def receipt_ms() -> int:
    """How long a receipt is kept, ms (``WINDOWS.receipt_ms``): what every script is sent."""
    return WINDOWS.receipt_ms


@dataclass
class Unsure:
    """When a request whose outcome is not known was first sent (client clock), shared by
    the operation that sends it and the shell that undoes it. ``since`` is ``None`` while
    every try sent has been answered; it is set (before the send) by the first try whose
    reply has not come, and cleared by a reply that settles the outcome."""

    since: float | None = None
    tries: int = 0
    """Tries sent since ``since`` (the first included)."""

    def sending(self, now: float) -> None:
        if self.since is None:
            self.since = now
        self.tries += 1

    def answered(self) -> None:
        self.since, self.tries = None, 0

    def retry_until(self) -> float:
        """The latest time a try of the request may be sent again (``inf``: nothing unknown):
        the first half of its window, so that its undo has the other half at least."""
        return math.inf if self.since is None else self.since + WINDOWS.unsure_for / 2

    def conclusive(self, now: float) -> bool:
        """Whether a reply read at ``now`` still proves what a receipt of this request says."""
        return self.since is None or now - self.since <= WINDOWS.conclusive_for
