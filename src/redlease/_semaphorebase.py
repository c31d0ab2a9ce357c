"""What both semaphore shells share: reporting permits given up or lost."""

from __future__ import annotations

from ._connections import log
from ._core import semaphore as core
from ._core.semaphore import PendingUndo
from .errors import LeaseLostError


def report_expired(expired: list[PendingUndo]) -> None:
    """Log the undos given up: their permits may be taken until a lease ends, or for good."""
    for pending in expired:
        log.error(
            "semaphore %r: gave up giving back the permits of an abandoned request (the server "
            "was unreachable for %.0f s); they may stay taken",
            pending.name,
            core.UNSURE_FOR,
        )


def report_lost(gone: list[tuple[core.Permit, LeaseLostError]]) -> None:
    """Log each lost permit and tell its listeners."""
    for record, error in gone:
        log.warning("%s", error)
        for listener in record.listeners:
            try:
                listener(error)
            except Exception:
                log.exception("lease-lost callback for semaphore %r failed", record.keys.name)
