"""Issue #36, 2: a counting semaphore whose server lost an acquire (a failover to a replica that
missed it, a restart without persistence) gets that permit back twice: the holder's release
pushes the free count past the total. As in Redisson the release is not refused (the total
follows the count), but it is reported: a WARNING naming the semaphore and the way back
(``set_permits``), a ``semaphore_total_raised`` event, a Prometheus counter. It used to pass
silently, and the semaphore admitted two holders at once for good. Sync and asyncio, every
server binary found, over ``TcpProxy`` links as the lock's failover tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redlease import ServerUnavailableError
from redlease.events import LockEvent
from redlease.testing import ServerBinary

from .test_lock_guarantees import Failover

pytestmark = pytest.mark.timeout(120)
prometheus_client = pytest.importorskip("prometheus_client")


@pytest.fixture
def failover(binary: ServerBinary) -> Iterator[Failover]:
    setup = Failover(binary)
    try:
        yield setup
    finally:
        setup.close()


def _client(side: Any, url: str, events: list[LockEvent], metrics: Any) -> Any:
    client = side.client(url, socket_timeout=2, socket_connect_timeout=2)
    client.add_listener(events.append)
    client.add_listener(metrics)
    return client


def _metrics() -> tuple[Any, Any]:
    """A registry of its own, and the one ``PrometheusMetrics`` on it, per lock."""
    from redlease.metrics import PrometheusMetrics

    registry = prometheus_client.CollectorRegistry()
    return registry, PrometheusMetrics(registry, per_lock=True)


async def _reconnected(side: Any, sem: Any) -> None:
    """A read until it answers: the pooled connections the cut killed are used up."""
    for _ in range(20):
        try:
            await side(sem.available())
            return
        except ServerUnavailableError:
            continue
    raise AssertionError("the client never reconnected")


async def _one_holder_after_set_permits(side: Any, sem: Any) -> None:
    """What the docs say to do after data loss: set the total back; one holder at a time."""
    await side(sem.set_permits(1))
    assert (await side(sem.statistics())).permits == 1
    assert await side(sem.acquire(timeout=0))
    assert not await side(sem.acquire(timeout=0))
    await side(sem.release())


def _over_total(events: list[LockEvent], name: str) -> list[LockEvent]:
    return [e for e in events if e.kind == "semaphore_total_raised" and e.name == name]


async def test_a_release_after_a_failover_that_lost_an_acquire_is_reported(
    side, failover, name, caplog
):
    """One permit; A acquires on the master, the replica misses it and is promoted; B
    acquires there; both release: the second release is reported (and once the total is set
    back, one holder at a time again)."""
    events: list[LockEvent] = []
    registry, metrics = _metrics()
    a = _client(side, failover.link.url, events, metrics)
    b = _client(side, failover.link.url, events, metrics)
    sem_a, sem_b = a.semaphore(name), b.semaphore(name)
    assert await side(sem_a.try_set_permits(1))
    failover.replica_falls_behind()
    assert await side(sem_a.acquire(timeout=1))
    failover.fail_over()
    await _reconnected(side, sem_a)
    await _reconnected(side, sem_b)
    assert await side(sem_b.acquire(timeout=5))  # the new master never saw A's acquire
    with caplog.at_level(logging.WARNING, logger="redlease"):
        await side(sem_a.release())
        await side(sem_b.release())
    assert len(_over_total(events, name)) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(name in m and "set_permits(1)" in m for m in warnings), warnings
    sample = registry.get_sample_value("redlease_semaphore_total_raised_total", {"lock": name})
    assert sample == 1
    await _one_holder_after_set_permits(side, sem_a)


async def test_a_release_after_an_empty_restart_is_reported(side, private_server, name, caplog):
    """One permit, held; the server restarts empty and the application sets the permits up
    again (try_set_permits(1)); the holder's release is reported."""
    events: list[LockEvent] = []
    _, metrics = _metrics()
    client = _client(side, private_server.url, events, metrics)
    sem = client.semaphore(name)
    assert await side(sem.try_set_permits(1))
    assert await side(sem.acquire(timeout=1))
    private_server.restart()
    await _reconnected(side, sem)
    assert await side(sem.try_set_permits(1))  # the application's start-up, after the loss
    with caplog.at_level(logging.WARNING, logger="redlease"):
        await side(sem.release())
    assert len(_over_total(events, name)) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(name in m and "past the 1 permits" in m for m in warnings), warnings
    await _one_holder_after_set_permits(side, sem)


async def test_a_release_within_the_total_is_not_reported(side, server, name):
    """Releases that give back what was taken, and a release after a Redisson-style raise of
    the count alone (its addPermits: the total follows it), say nothing."""
    events: list[LockEvent] = []
    _, metrics = _metrics()
    client = _client(side, server.url, events, metrics)
    sem = client.semaphore(name)
    assert await side(sem.try_set_permits(2))
    assert await side(sem.acquire(2, timeout=1))
    await side(sem.release())
    await side(sem.release())
    assert await side(sem.acquire(timeout=1))
    raw = redis.Redis.from_url(server.url)
    raw.incrby(name, 3)  # a Redisson client's addPermits(3): only the count changes
    raw.close()
    await side(sem.release())
    assert _over_total(events, name) == []
    assert (await side(sem.statistics())).permits == 5
