"""Prometheus metrics (redlease.metrics) scraped from the registry's real text output after
real lock activity on a real server: the labels a user gets by default (no per-lock label)
and on request, hold and wait histograms, renewal failures, leases lost by cause, skipped
runs."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from redlease import LeaseLostError, NotOwnedError
from redlease.events import LockEvent
from redlease.metrics import HOLD_BUCKETS, PrometheusMetrics
from redlease.testing import TcpProxy

from .helpers import eventually

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """The registry's exposition text, parsed back as a scraper reads it."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample of ``name`` with ``labels``, which the test expects to be there."""
    found = samples.get((name, frozenset(labels.items())))
    assert found is not None, (name, labels)
    return found


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels) in samples if n == name]


async def enter(side: Any, cm: Any) -> Any:
    return await cm.__aenter__() if side.is_async else cm.__enter__()


async def leave(side: Any, cm: Any) -> None:
    if side.is_async:
        await cm.__aexit__(None, None, None)
    else:
        cm.__exit__(None, None, None)


async def test_default_metrics_have_no_per_lock_label(side, server, name):
    registry = CollectorRegistry()
    client = side.client(server.url)
    client.add_listener(PrometheusMetrics(registry))
    other = side.client(server.url)
    for suffix in ("a", "b", "c"):
        lock = client.lock(f"{name}:{suffix}")
        assert await side(lock.acquire())
        time.sleep(0.02)  # (a hold of some length, for the histogram's sum)
        await side(lock.release())
    taken = other.lock(f"{name}:a")
    assert await side(taken.acquire())
    assert not await side(client.lock(f"{name}:a").acquire(timeout=0.1))
    held = client.lock(f"{name}:d")
    assert await side(held.acquire())

    samples = scrape(registry)
    assert value(samples, "redlease_acquisitions_total", outcome="acquired") == 4
    assert value(samples, "redlease_acquisitions_total", outcome="failed") == 1
    assert value(samples, "redlease_wait_seconds_count") == 5
    assert value(samples, "redlease_wait_seconds_sum") >= 0.1  # the failed wait
    assert value(samples, "redlease_hold_seconds_count") == 3
    assert value(samples, "redlease_hold_seconds_sum") >= 0.06
    assert value(samples, "redlease_hold_seconds_bucket", le="3600.0") == 3
    assert value(samples, "redlease_holds") == 1
    for cause in ("expired", "forced", "server_lost", "unknown"):
        assert value(samples, "redlease_lost_leases_total", cause=cause) == 0
    # one series per metric (and outcome, cause, bucket), whatever the number of locks
    assert not any("lock" in labels for (_, labels_) in samples for labels in [dict(labels_)])
    await side(held.release())
    await side(taken.release())
    assert value(scrape(registry), "redlease_holds") == 0


async def test_per_lock_and_a_name_mapping_add_the_lock_label(side, server, name):
    per_lock, mapped = CollectorRegistry(), CollectorRegistry()
    client = side.client(server.url)
    client.add_listener(PrometheusMetrics(per_lock, per_lock=True))
    client.add_listener(PrometheusMetrics(mapped, lock_label=lambda n: n.rsplit(":", 1)[0]))
    for order in (1, 2):
        lock = client.lock(f"{name}:{order}")
        assert await side(lock.acquire())
        await side(lock.release())

    samples = scrape(per_lock)
    for order in (1, 2):
        lock_name = f"{name}:{order}"
        assert (
            value(samples, "redlease_acquisitions_total", lock=lock_name, outcome="acquired") == 1
        )
        assert value(samples, "redlease_hold_seconds_count", lock=lock_name) == 1
        assert value(samples, "redlease_holds", lock=lock_name) == 0
    samples = scrape(mapped)
    assert value(samples, "redlease_acquisitions_total", lock=name, outcome="acquired") == 2
    assert value(samples, "redlease_wait_seconds_count", lock=name) == 2
    assert {labels["lock"] for labels in series(samples, "redlease_hold_seconds_count")} == {name}


async def test_a_lease_that_cannot_be_renewed_counts_renewal_failures_and_expired(
    side, server, name
):
    """The server goes silent (the network holds every byte): the watchdog's renewals fail,
    and once a whole lease went by unrenewed the hold is lost, cause ``expired``."""
    registry = CollectorRegistry()
    events: list[LockEvent] = []
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        client = side.client(proxy.url, watchdog_timeout=0.6)
        client.add_listener(PrometheusMetrics(registry))
        client.add_listener(events.append)
        lock = client.lock(name)
        assert await side(lock.acquire())
        proxy.freeze()
        try:
            await eventually(lambda: any(e.kind == "lease_lost" for e in events), timeout=10)
        finally:
            proxy.thaw()
        lost = next(e for e in events if e.kind == "lease_lost")
        assert lost.cause == "expired" and isinstance(lost.error, LeaseLostError)
        assert lost.error.cause == "expired"
        samples = scrape(registry)
        assert value(samples, "redlease_renewal_failures_total") >= 1
        assert value(samples, "redlease_lost_leases_total", cause="expired") == 1
        assert value(samples, "redlease_lost_leases_total", cause="unknown") == 0
        assert value(samples, "redlease_holds") == 0
        with pytest.raises(LeaseLostError) as raised:
            await side(lock.release())
        assert raised.value.cause == "expired"
        assert value(scrape(registry), "redlease_lost_leases_total", cause="expired") == 1


async def test_a_force_release_by_another_client_is_a_lost_lease(side, server, name):
    """Another client force-releases our hold. With a long watchdog_timeout the holder may
    learn it only at its release: either way it is counted once, with the cause the holder
    was told (``forced`` when the force reached it, else ``unknown``), and the hold gauge
    goes back to 0."""
    registry = CollectorRegistry()
    events: list[LockEvent] = []
    client = side.client(server.url, watchdog_timeout=60)
    client.add_listener(PrometheusMetrics(registry))
    client.add_listener(events.append)
    lock = client.lock(name)
    assert await side(lock.acquire())
    assert await side(lock.acquire())  # re-entered: one hold in the gauge all the same
    operator = side.client(server.url)
    assert await side(operator.lock(name).force_release())
    with pytest.raises(LeaseLostError) as raised:
        await side(lock.release())
    with pytest.raises(NotOwnedError):  # the re-entered hold went with it
        await side(lock.release())
    lost = [e for e in events if e.kind == "lease_lost"]
    assert len(lost) == 1 and lost[0].cause in ("forced", "unknown")
    assert raised.value.cause == lost[0].cause
    samples = scrape(registry)
    assert value(samples, "redlease_lost_leases_total", cause=lost[0].cause) == 1
    assert sum(v for (n, _), v in samples.items() if n == "redlease_lost_leases_total") == 1
    assert value(samples, "redlease_holds") == 0


async def test_a_server_that_lost_its_data_is_cause_server_lost(side, private_server, name):
    """The server restarts empty (no persistence): the watchdog finds the hold gone and the
    lock's fencing counter below the hold's token, so the server lost the grant: cause
    ``server_lost``, as the error the release raises says too."""
    registry = CollectorRegistry()
    events: list[LockEvent] = []
    client = side.client(private_server.url, watchdog_timeout=1.5)
    client.add_listener(PrometheusMetrics(registry))
    client.add_listener(events.append)
    lock = client.lock(name)
    assert await side(lock.acquire())
    private_server.restart()
    await eventually(lambda: any(e.kind == "lease_lost" for e in events), timeout=30)
    lost = next(e for e in events if e.kind == "lease_lost")
    assert lost.cause == "server_lost"
    with pytest.raises(LeaseLostError) as raised:
        await side(lock.release())
    assert raised.value.cause == "server_lost"
    samples = scrape(registry)
    assert value(samples, "redlease_lost_leases_total", cause="server_lost") == 1
    assert value(samples, "redlease_holds") == 0


async def test_an_explicit_lease_that_ran_out_before_release_is_expired(side, server, name):
    registry = CollectorRegistry()
    client = side.client(server.url)
    client.add_listener(PrometheusMetrics(registry, per_lock=True))
    lock = client.lock(name)
    assert await side(lock.acquire(lease=0.05))
    raw = redis.Redis.from_url(server.url)
    try:
        await eventually(lambda: not raw.exists(name), timeout=5)
    finally:
        raw.close()
    with pytest.raises(LeaseLostError) as raised:
        await side(lock.release())
    assert raised.value.cause == "expired"
    samples = scrape(registry)
    assert value(samples, "redlease_lost_leases_total", lock=name, cause="expired") == 1
    assert value(samples, "redlease_holds", lock=name) == 0


async def test_skipped_scheduled_runs_are_counted(side, server, name):
    registry = CollectorRegistry()
    holder, other = side.client(server.url), side.client(server.url)
    other.add_listener(PrometheusMetrics(registry))
    slot = holder.scheduled_lock(name, at_most_for=30)
    run = await enter(side, slot)
    try:
        assert run.acquired
        for _ in range(2):
            skipped = other.scheduled_lock(name, at_most_for=30)
            assert not (await enter(side, skipped)).acquired
            await leave(side, skipped)
    finally:
        await leave(side, slot)
    assert value(scrape(registry), "redlease_skipped_runs_total") == 2


async def test_calls_skipped_by_on_busy_skip_are_counted(side, server, name):
    """``@client.exclusive(..., on_busy="skip")`` on a lock held elsewhere: the call does not run,
    and ``redlease_skipped_runs_total`` counts it (with the lock label when asked for)."""
    registry = CollectorRegistry()
    client = side.client(server.url)
    client.add_listener(PrometheusMetrics(registry, per_lock=True))
    runs: list[int] = []
    if side.is_async:

        @client.exclusive(name, on_busy="skip")
        async def job() -> int:
            runs.append(1)
            return 1

    else:

        @client.exclusive(name, on_busy="skip")
        def job() -> int:
            runs.append(1)
            return 1

    holder = side.client(server.url).lock(name)
    assert await side(holder.acquire())
    assert await side(job()) is None
    assert await side(job()) is None
    await side(holder.release())
    assert await side(job()) == 1
    assert runs == [1]
    samples = scrape(registry)
    assert value(samples, "redlease_skipped_runs_total", lock=name) == 2
    assert value(samples, "redlease_acquisitions_total", lock=name, outcome="acquired") == 1


def test_hold_buckets_reach_from_milliseconds_to_an_hour():
    assert HOLD_BUCKETS[0] <= 0.001 and HOLD_BUCKETS[-1] >= 3600
    assert list(HOLD_BUCKETS) == sorted(HOLD_BUCKETS)
