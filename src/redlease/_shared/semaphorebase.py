"""What both semaphore shells share: reporting permits given up or lost."""

from __future__ import annotations

from .._core import permits as permit_core
from .._core import receipts
from .._core import semaphore as core
from .._core.log import log
from .._core.permits import PendingUndo
from .._core.semaphore import Released
from ..errors import LeaseLostError
from ..events import Listeners, LockEvent


def report_may_stay_taken(listeners: Listeners | None, pending: PendingUndo, why: str) -> None:
    """Say (WARNING, and a ``permits_may_stay_taken`` event) that the undo ``pending`` cannot
    tell whether its request took permits: they may stay taken. Never counted as done."""
    until = "for good" if pending.counting else "until their lease ends"
    log.warning(
        "semaphore %r: %s; the permits of that abandoned request may stay taken (%s)",
        pending.name,
        why,
        until,
    )
    if listeners:
        listeners.send(LockEvent("permits_may_stay_taken", pending.name, None))


def report_expired(listeners: Listeners | None, expired: list[PendingUndo]) -> None:
    """Report the undos given up: the server was not reached within their window."""
    for pending in expired:
        report_may_stay_taken(
            listeners,
            pending,
            "gave up giving back the permits of an abandoned request (the server was not "
            f"reached within {receipts.WINDOWS.unsure_for:.0f} s of the request's first send)",
        )


def report_unsettled(listeners: Listeners | None, pending: PendingUndo, now: float) -> None:
    """Report an undo that reached the server too late to tell whether its request ran."""
    report_may_stay_taken(
        listeners,
        pending,
        f"the undo of an abandoned request landed {now - pending.since:.1f} s after the request "
        "was first sent, when its receipt may be gone: it cannot tell whether the request ran",
    )


def report_lost(gone: list[tuple[permit_core.Permit, LeaseLostError]]) -> None:
    """Log each lost permit and tell its listeners."""
    for record, error in gone:
        log.warning("%s", error)
        for listener in record.listeners:
            try:
                listener(error)
            except Exception:
                log.exception("lease-lost callback for semaphore %r failed", record.keys.name)


def report_over_total(
    listeners: Listeners | None, name: str, owner: str, permits: int, released: Released
) -> None:
    """Say (WARNING, and a ``semaphore_total_raised`` event) that a release pushed a counting
    semaphore's free count past the total it was set to; nothing when it did not."""
    if released.passed is None:
        return
    log.warning("%s", core.over_total(name, permits, released))
    if listeners:
        listeners.send(LockEvent("semaphore_total_raised", name, owner))
