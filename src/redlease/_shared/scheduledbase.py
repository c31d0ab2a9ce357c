"""The part of ``ScheduledLock`` and ``AsyncScheduledLock`` that does no I/O: the arguments,
what a run is told, the at-least time left, and the reports of a skip or a failed release."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._core.arguments import Seconds, lease_seconds, non_negative_seconds
from ..errors import ArgumentTypeError, InvalidArgumentError, LeaseLostError, RedleaseError
from ..events import LockEvent
from .state import ClientState

__all__ = ["TOKEN_PARAMETER", "ScheduledBase", "ScheduledRun"]

log = logging.getLogger("redlease")

TOKEN_PARAMETER = "fencing_token"
"""A decorated job that has a parameter of this name is given its run's fencing token."""


@dataclass(frozen=True)
class ScheduledRun:
    """What ``with client.scheduled_lock(...) as run:`` gives: ``run`` is true when this
    instance got the slot (run the job), false when another instance holds it (skip).
    ``fencing_token`` is the run's token (strictly greater than any earlier run's), for the
    resources the job writes to; ``None`` when skipped."""

    name: str
    """The job's lock name."""
    acquired: bool
    """Whether this instance got the slot (run the job)."""
    fencing_token: int | None = None
    """The run's token; ``None`` when skipped."""

    def __bool__(self) -> bool:
        return self.acquired


class ScheduledBase:
    """Shared by both shells: the arguments, checked once, and the reports."""

    def __init__(
        self,
        state: ClientState,
        name: str,
        *,
        at_most_for: Seconds | None,
        at_least_for: Seconds,
        keep_alive: bool,
    ) -> None:
        if not isinstance(keep_alive, bool):
            raise ArgumentTypeError(f"keep_alive must be True or False, got {keep_alive!r}")
        most = None if at_most_for is None else lease_seconds(at_most_for, "at_most_for")
        least = non_negative_seconds(at_least_for, "at_least_for")
        watchdog = state.watchdog_timeout
        if most is None and not keep_alive:
            raise InvalidArgumentError(
                "at_most_for is required: how long the slot stays taken if the instance "
                "running the job dies (or keep_alive=True: renewed while the job runs)"
            )
        if most is not None and keep_alive and most < watchdog:
            raise InvalidArgumentError(
                f"at_most_for={at_most_for!r} is shorter than the client's watchdog_timeout "
                f"({watchdog:g} s), the lease that keep_alive renews (a dead instance's slot "
                "frees within it): leave at_most_for out, or use a client with a "
                "watchdog_timeout no longer than at_most_for"
            )
        if most is not None and least > most:
            raise InvalidArgumentError(
                f"at_least_for ({least:g} s) must not be longer than at_most_for ({most:g} s)"
            )
        self._state = state
        self.at_most_for: float = watchdog if most is None else most
        """How long a dead instance keeps the slot at most (with ``keep_alive``: the
        client's ``watchdog_timeout``, the lease the watchdog renews)."""
        self.at_least_for = least
        """How long the slot stays taken after a run began, however soon it ended."""
        self.keep_alive = keep_alive
        """Whether the watchdog renews the slot while the job runs."""
        self._lease = None if keep_alive else most
        """The lock's lease while the job runs (``None``: the watchdog's)."""

    def _kept_for(self, acquired_at: float) -> float:
        """How long the slot must stay taken after the job, which began at ``acquired_at``
        (monotonic clock): what is left of ``at_least_for``, or 0."""
        return max(0.0, self.at_least_for - (time.monotonic() - acquired_at))

    def _skipped(self, name: str, owner: str, started: float) -> None:
        """The slot was taken: log it (INFO) and tell the listeners (``skipped``)."""
        log.info(
            "scheduled job %r skipped: its slot is taken (another instance runs it, or ran it "
            "less than at_least_for ago)",
            name,
            extra={"lock": name, "owner": owner},
        )
        if self._state.listeners:
            self._state.listeners.send(
                LockEvent("skipped", name, owner, wait=time.monotonic() - started)
            )

    @staticmethod
    def _end_failed(name: str, exc: RedleaseError) -> None:
        """The release after the job raised: the job's outcome stands, the lease frees the
        slot in time; a lost lease means another instance may have run the job meanwhile."""
        if isinstance(exc, LeaseLostError):
            log.warning(
                "scheduled job %r: its lease ran out or was lost while it ran (%s); another "
                "instance may have run it meanwhile: make at_most_for longer than the job, or "
                "use keep_alive=True",
                name,
                exc,
                extra={"lock": name},
            )
        else:
            log.warning(
                "scheduled job %r: could not release its slot (%s); it frees when its lease "
                "runs out",
                name,
                exc,
                extra={"lock": name},
            )

    @staticmethod
    def _wants_token(fn: Callable[..., Any]) -> bool:
        """Whether ``fn`` takes a ``fencing_token`` argument by keyword."""
        try:
            parameters = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return False
        parameter = parameters.get(TOKEN_PARAMETER)
        return parameter is not None and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )

    @staticmethod
    def _give_token(run: ScheduledRun, kwargs: dict[str, Any], fn: Callable[..., Any]) -> None:
        if TOKEN_PARAMETER in kwargs:
            raise ArgumentTypeError(
                f"{getattr(fn, '__qualname__', fn)}: {TOKEN_PARAMETER} is given by the "
                "scheduled lock, not by the caller"
            )
        kwargs[TOKEN_PARAMETER] = run.fencing_token
