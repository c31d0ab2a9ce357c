"""The watchdog's schedule and failure policy: what to renew, when, and when a lease is lost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import scripts
from .keys import hash_slot
from .lock import Hold, to_ms
from .requests import Call, Replication

BATCH = 256
"""Locks renewed by one script call."""


@dataclass(frozen=True)
class RenewalPolicy:
    """Renew every ``timeout / 3``; after a failed round, retry sooner; a hold not renewed for
    a whole ``timeout`` has certainly expired on the server and is reported lost."""

    timeout: float

    @property
    def interval(self) -> float:
        return self.timeout / 3

    @property
    def retry_interval(self) -> float:
        return min(1.0, self.timeout / 10)

    def next_delay(self, ok: bool) -> float:
        return self.interval if ok else self.retry_interval

    def expired(self, last_renewed: float, now: float) -> bool:
        return now - last_renewed >= self.timeout

    def calls(
        self, holds: Sequence[Hold], *, by_slot: bool = False
    ) -> list[tuple[list[Hold], Call]]:
        """Renewal calls for ``holds``, at most ``BATCH`` locks each; ``by_slot`` (a cluster)
        keeps each call to the locks of one hash slot, as a cluster requires of a script."""
        groups: dict[tuple[Replication | None, int], list[Hold]] = {}
        for hold in holds:  # holds that need replica acks are renewed with them
            slot = hash_slot(hold.keys.name) if by_slot else 0
            groups.setdefault((hold.replication, slot), []).append(hold)
        out = []
        for (replication, _), group in groups.items():
            for start in range(0, len(group), BATCH):
                batch = group[start : start + BATCH]
                call = Call(
                    scripts.LOCK_RENEW,
                    tuple(h.keys.name for h in batch),
                    (to_ms(self.timeout), *(h.owner for h in batch)),
                    replication=replication,
                )
                out.append((batch, call))
        return out
