"""The watchdog's schedule and failure policy: what to renew, when, and when a lease is lost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import scripts
from .keys import LockKeys, hash_slot
from .lock import Hold, to_ms
from .requests import Call, Replication

BATCH = 256
"""Locks renewed by one script call."""


@dataclass(frozen=True)
class OwnRenewalKeys(LockKeys):
    """Keys of holds that the watchdog renews with a script of their own instead of
    ``lock_renew`` (a read-write lock's sides); ``name`` only labels the holds."""

    def renew_call(
        self,
        owners: Sequence[str],
        lease_ms: int,
        replication: Replication | None,
        *,
        tokens: Sequence[int],
    ) -> Call:
        """One call renewing these owners' holds, each only if the hold there has the token
        given for it (``tokens``, in the same order); its reply: 1 (renewed) or 0 (gone) each."""
        raise NotImplementedError


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

    def next_round(self, due: float, started: float, ok: bool, now: float) -> float:
        """When the round after one that was due at ``due``, began at ``started`` and ended at
        ``now`` is due. After a success, an interval after this one was *due* (fixed rate),
        not after it began: a round that starts late (a busy event loop, a thread starved of
        the GIL) would otherwise add its lateness to the gap between two renewals of a hold,
        eating into the lease left when the next lands; counted from when it was due, a
        steady lateness cancels out. A round more than an interval late is followed at once
        by one more (which finds a hold lost meanwhile gone), never by a burst to catch up.
        Renewing early is always safe: a renewal never shortens a lease, never creates a key
        and acts only on the hold with the owner's token. After a failure, a retry soon."""
        if not ok:
            return now + self.retry_interval
        return max(due + self.interval, started)

    def too_late(self, due: float, started: float) -> bool:
        """A round that began more than half an interval after it was due: a sixth of the
        lease is gone before it is even sent (worth a warning: the process is starved)."""
        return started - due > self.interval / 2

    def calls(
        self, holds: Sequence[Hold], *, by_slot: bool = False
    ) -> list[tuple[list[Hold], Call]]:
        """Renewal calls for ``holds``, at most ``BATCH`` locks each.

        Holds that need replica acknowledgements are renewed together; ``by_slot`` (a cluster)
        keeps each call to the locks of one hash slot, as a cluster requires of a script; holds
        with ``OwnRenewalKeys`` (a read-write lock's sides) are renewed by their own script,
        one lock per call."""
        groups: dict[tuple[OwnRenewalKeys | int | None, Replication | None], list[Hold]] = {}
        for hold in holds:
            if isinstance(hold.keys, OwnRenewalKeys):
                group: OwnRenewalKeys | int | None = hold.keys
            else:
                group = hash_slot(hold.keys.name) if by_slot else None
            groups.setdefault((group, hold.replication), []).append(hold)
        out = []
        lease_ms = to_ms(self.timeout)
        for (group, replication), members in groups.items():
            for start in range(0, len(members), BATCH):
                batch = members[start : start + BATCH]
                owners = [h.owner for h in batch]
                if isinstance(group, OwnRenewalKeys):
                    call = group.renew_call(
                        owners, lease_ms, replication, tokens=[h.token for h in batch]
                    )
                else:
                    # the fencing counters tell a gone hold's cause (server_lost); not on a
                    # cluster, where a slot being migrated may hold a lock and not its counter
                    # and a script whose keys are split fails (TRYAGAIN) until the move ends:
                    # the lock keys alone renew there throughout
                    counters = () if by_slot else tuple(h.keys.fence for h in batch)
                    call = Call(
                        scripts.LOCK_RENEW,
                        (*(h.keys.name for h in batch), *counters),
                        (lease_ms, *owners, *(h.token for h in batch)),
                        replication=replication,
                    )
                out.append((batch, call))
        return out
