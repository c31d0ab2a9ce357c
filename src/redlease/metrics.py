"""Prometheus metrics for redlease, as an event listener (``pip install 'redlease[prometheus]'``).

    metrics = PrometheusMetrics()          # registers on prometheus_client's default registry
    client.add_listener(metrics)
    prometheus_client.start_http_server(9108, addr="127.0.0.1")

The ``lock`` label is the lock name; pass ``lock_label`` to map names with ids in them
(``"order:42"``) onto a few values (``"order"``), so the number of series stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from .events import LockEvent

__all__ = ["PrometheusMetrics"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class PrometheusMetrics:
    """Counts acquisitions, failures, renewal failures, lost leases, semaphore permits that
    may stay taken and skipped scheduled-job runs; observes wait and hold times; tracks current
    holds. Use one instance per registry (names are registered once)."""

    def __init__(
        self,
        registry: CollectorRegistry = REGISTRY,
        *,
        namespace: str = "redlease",
        lock_label: Callable[[str], str] = str,
    ) -> None:
        self._label = lock_label
        self.acquisitions = Counter(
            "acquisitions",
            "Lock acquisitions by outcome (acquired, failed: timed out or would block).",
            ["lock", "outcome"],
            namespace=namespace,
            registry=registry,
        )
        self.wait_seconds = Histogram(
            "wait_seconds",
            "Seconds an acquire took, waiting included.",
            ["lock"],
            namespace=namespace,
            registry=registry,
            buckets=_BUCKETS,
        )
        self.hold_seconds = Histogram(
            "hold_seconds",
            "Seconds from the first acquisition to the last release of a hold.",
            ["lock"],
            namespace=namespace,
            registry=registry,
            buckets=_BUCKETS,
        )
        self.renewal_failures = Counter(
            "renewal_failures",
            "Lease renewals that could not be confirmed.",
            ["lock"],
            namespace=namespace,
            registry=registry,
        )
        self.lost_leases = Counter(
            "lost_leases",
            "Holds found lost while held (expired, force-released, server restarted).",
            ["lock"],
            namespace=namespace,
            registry=registry,
        )
        self.permits_may_stay_taken = Counter(
            "permits_may_stay_taken",
            "Semaphore requests abandoned (replies lost) whose undo could not be confirmed: "
            "their permits may stay taken.",
            ["lock"],
            namespace=namespace,
            registry=registry,
        )
        self.skipped_runs = Counter(
            "skipped_runs",
            "Scheduled-job runs skipped because the slot was taken (another instance runs the "
            "job, or ran it less than at_least_for ago).",
            ["lock"],
            namespace=namespace,
            registry=registry,
        )
        self.holds = Gauge(
            "holds",
            "Locks held now by this process (an owner's reentrant holds count once).",
            ["lock"],
            namespace=namespace,
            registry=registry,
        )

    def __call__(self, event: LockEvent) -> None:
        lock = self._label(event.name)
        if event.kind == "acquired":
            self.acquisitions.labels(lock, "acquired").inc()
            self.wait_seconds.labels(lock).observe(event.wait or 0.0)
            if event.hold_count == 1:
                self.holds.labels(lock).inc()
        elif event.kind == "acquire_failed":
            self.acquisitions.labels(lock, "failed").inc()
            self.wait_seconds.labels(lock).observe(event.wait or 0.0)
        elif event.kind == "released" and event.hold_count == 0:
            self.hold_seconds.labels(lock).observe(event.held or 0.0)
            self.holds.labels(lock).dec()
        elif event.kind == "renewal_failed":
            self.renewal_failures.labels(lock).inc()
        elif event.kind == "permits_may_stay_taken":
            self.permits_may_stay_taken.labels(lock).inc()
        elif event.kind == "skipped":
            self.skipped_runs.labels(lock).inc()
        elif event.kind == "lease_lost":
            self.lost_leases.labels(lock).inc()
            self.holds.labels(lock).dec()
