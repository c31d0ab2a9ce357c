"""Prometheus metrics for redlease, as an event listener (``pip install 'redlease[prometheus]'``).

    metrics = PrometheusMetrics()          # registers on prometheus_client's default registry
    client.add_listener(metrics)
    prometheus_client.start_http_server(9108, addr="127.0.0.1")

By default no metric has a per-lock label: one series per metric (and outcome or cause), however
many locks there are. Ask for a ``lock`` label with ``per_lock=True`` (the lock name as is) or
with ``lock_label=`` (a callable that maps names with ids in them, ``"order:42"``, onto a few
values, ``"order"``, so the number of series stays bounded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from .events import LockEvent

__all__ = ["HOLD_BUCKETS", "WAIT_BUCKETS", "PrometheusMetrics"]

WAIT_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
)
"""Seconds: from a loopback round trip (half a millisecond) to five minutes of waiting."""

HOLD_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
)
"""Seconds: from a millisecond's critical section to an hour-long job."""

CAUSES = ("expired", "forced", "server_lost", "unknown")
"""The values of ``lost_leases_total``'s ``cause`` label (``redlease.LossCause``)."""


class PrometheusMetrics:
    """Counts acquisitions, failures, renewal failures, leases lost while held (by cause),
    semaphore permits that may stay taken, semaphore totals raised by a release and skipped
    runs (scheduled jobs, ``on_busy="skip"``); observes wait and hold times; tracks current
    holds. Use one instance per registry (names are registered once).

    ``per_lock=True`` adds a ``lock`` label (the lock name) to every metric; ``lock_label``
    maps a name onto the label's value (and implies the label). Without either, no metric has
    a per-lock label."""

    def __init__(
        self,
        registry: CollectorRegistry = REGISTRY,
        *,
        namespace: str = "redlease",
        per_lock: bool = False,
        lock_label: Callable[[str], str] | None = None,
        wait_buckets: Sequence[float] = WAIT_BUCKETS,
        hold_buckets: Sequence[float] = HOLD_BUCKETS,
    ) -> None:
        self._label: Callable[[str], str] | None = (
            lock_label if lock_label is not None else (str if per_lock else None)
        )
        lock = ["lock"] if self._label is not None else []
        common: dict[str, Any] = {"namespace": namespace, "registry": registry}
        self.acquisitions = Counter(
            "acquisitions",
            "Lock acquisitions by outcome (acquired, failed: timed out or would block).",
            [*lock, "outcome"],
            **common,
        )
        self.wait_seconds = Histogram(
            "wait_seconds",
            "Seconds an acquire took, waiting included (acquired or failed).",
            lock,
            buckets=tuple(wait_buckets),
            **common,
        )
        self.hold_seconds = Histogram(
            "hold_seconds",
            "Seconds from the first acquisition to the last release of a hold.",
            lock,
            buckets=tuple(hold_buckets),
            **common,
        )
        self.renewal_failures = Counter(
            "renewal_failures",
            "Lease renewals the watchdog could not confirm (the server could not be reached "
            "or did not answer in time), one per hold per failed round.",
            lock,
            **common,
        )
        self.lost_leases = Counter(
            "lost_leases",
            "Holds found lost while held, by cause: expired (not renewed in time, or an "
            "explicit lease ran out), forced (force-released), server_lost (the server lost "
            "its data), unknown.",
            [*lock, "cause"],
            **common,
        )
        self.permits_may_stay_taken = Counter(
            "permits_may_stay_taken",
            "Semaphore requests abandoned (replies lost) whose undo could not be confirmed: "
            "their permits may stay taken.",
            lock,
            **common,
        )
        self.semaphore_total_raised = Counter(
            "semaphore_total_raised",
            "Counting-semaphore releases that pushed the free count past the total the "
            "semaphore was set to (permits given back twice, typically after a failover or a "
            "restart lost an acquire): its total now follows the count.",
            lock,
            **common,
        )
        self.skipped_runs = Counter(
            "skipped_runs",
            "Runs skipped because the lock was taken: scheduled jobs (another instance runs "
            'the job, or ran it less than at_least_for ago) and @exclusive(on_busy="skip").',
            lock,
            **common,
        )
        self.abandoned_holds = Counter(
            "abandoned_holds",
            "Holds whose owning asyncio task ended without releasing them: no longer "
            "renewed, they run out with their lease.",
            lock,
            **common,
        )
        self.holds = Gauge(
            "holds",
            "Locks held now by this process (an owner's reentrant holds count once).",
            lock,
            **common,
        )
        if self._label is None:  # the series exist from the start, at 0
            for outcome in ("acquired", "failed"):
                self.acquisitions.labels(outcome)
            for cause in CAUSES:
                self.lost_leases.labels(cause)

    def __call__(self, event: LockEvent) -> None:
        lock = () if self._label is None else (self._label(event.name),)
        if event.kind == "acquired":
            self.acquisitions.labels(*lock, "acquired").inc()
            self._of(self.wait_seconds, lock).observe(event.wait or 0.0)
            if event.hold_count == 1:
                self._of(self.holds, lock).inc()
        elif event.kind == "acquire_failed":
            self.acquisitions.labels(*lock, "failed").inc()
            self._of(self.wait_seconds, lock).observe(event.wait or 0.0)
        elif event.kind == "released" and event.hold_count == 0:
            self._of(self.hold_seconds, lock).observe(event.held or 0.0)
            self._of(self.holds, lock).dec()
        elif event.kind == "renewal_failed":
            self._of(self.renewal_failures, lock).inc()
        elif event.kind == "permits_may_stay_taken":
            self._of(self.permits_may_stay_taken, lock).inc()
        elif event.kind == "semaphore_total_raised":
            self._of(self.semaphore_total_raised, lock).inc()
        elif event.kind == "skipped":
            self._of(self.skipped_runs, lock).inc()
        elif event.kind == "owner_ended":
            self._of(self.abandoned_holds, lock).inc()
            self._of(self.holds, lock).dec()
        elif event.kind == "lease_lost":
            cause = event.cause if event.cause in CAUSES else "unknown"
            self.lost_leases.labels(*lock, cause).inc()
            self._of(self.holds, lock).dec()

    @staticmethod
    def _of(metric: Any, lock: tuple[str, ...]) -> Any:
        """The metric's child for ``lock`` (the metric itself when it has no labels)."""
        return metric.labels(*lock) if lock else metric
