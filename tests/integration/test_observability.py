"""Events, Prometheus metrics, logging and the @exclusive decorator, on a real server."""

from __future__ import annotations

import asyncio
import logging
import threading
import urllib.request

import pytest
import redis
from prometheus_client import CollectorRegistry, start_http_server

from redlease import InvalidArgumentError, LockTimeoutError
from redlease.events import LockEvent
from redlease.metrics import PrometheusMetrics
from redlease.testing import free_port

from .helpers import eventually


async def test_events_tell_acquire_release_failure_and_loss(side, server, name):
    events: list[LockEvent] = []
    # a 3 s watchdog lease: the events are checked one for one, and with 0.6 s a renewal call
    # slower than its 0.2 s bound on a loaded machine adds a "renewal_failed" among them
    client = side.client(server.url, watchdog_timeout=3)
    client.add_listener(events.append)
    lock = client.lock(name)
    assert await side(lock.acquire())
    assert await side(lock.acquire())
    await side(lock.release())
    await side(lock.release())
    other = side.client(server.url).lock(name)
    assert await side(other.acquire())
    assert not await side(lock.acquire(timeout=0.2))
    await side(other.release())
    assert await side(lock.acquire())
    raw = redis.Redis.from_url(server.url)
    raw.delete(name)
    raw.close()
    await eventually(lambda: any(e.kind == "lease_lost" for e in events))
    kinds = [e.kind for e in events]
    assert kinds == [
        "acquired",
        "acquired",
        "released",
        "released",
        "acquire_failed",
        "acquired",
        "lease_lost",
    ]
    first, _, _, last_release, failed, again, lost = events
    assert first.name == name and first.owner and first.hold_count == 1
    assert first.wait is not None and first.wait >= 0
    assert first.fencing_token == last_release.fencing_token
    assert last_release.hold_count == 0
    assert last_release.held is not None and last_release.held >= 0
    assert failed.wait is not None and failed.wait >= 0.2
    assert lost.error is not None and lost.fencing_token == again.fencing_token
    client.remove_listener(events.append)


async def test_a_failing_listener_does_not_break_the_lock(side, server, name, caplog):
    client = side.client(server.url)

    def broken(event: LockEvent) -> None:
        raise RuntimeError("listener bug")

    client.add_listener(broken)
    lock = client.lock(name)
    with caplog.at_level(logging.ERROR, logger="redlease"):
        assert await side(lock.acquire())
        await side(lock.release())
    assert "listener failed" in caplog.text


async def test_log_records_name_the_lock_and_owner(side, server, name, caplog):
    client = side.client(server.url)
    lock = client.lock(name)
    with caplog.at_level(logging.DEBUG, logger="redlease"):
        assert await side(lock.acquire())
        await side(lock.release())
    records = [r for r in caplog.records if r.name == "redlease"]
    # a record about a lock names it and its owner (the client's own records, such as its
    # pub/sub connection coming up in the background, are about a server, not a lock)
    about_locks = [r for r in records if hasattr(r, "lock")]
    assert [r.getMessage().split()[0] for r in about_locks] == ["acquired", "released"]
    assert all(r.lock == name for r in about_locks)
    assert all(str(getattr(r, "owner", "")).startswith(client.id) for r in about_locks)
    others = [r for r in records if not hasattr(r, "lock")]
    assert all(r.getMessage().startswith("subscriber connected") for r in others), others
    assert all(r.levelno <= logging.DEBUG for r in records)  # nothing above DEBUG when all is well


def test_prometheus_metrics_read_back_over_http(server, name):
    import redlease

    registry = CollectorRegistry()
    port = free_port()
    http_server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with redlease.Client.from_url(server.url) as client:
            client.add_listener(PrometheusMetrics(registry, lock_label=lambda n: "orders"))
            lock = client.lock(name)
            for _ in range(3):
                with lock:
                    pass
            with redlease.Client.from_url(server.url) as other, other.lock(name):
                assert not lock.acquire(timeout=0.1)
            with lock:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                text = body.read().decode()
        assert 'redlease_acquisitions_total{lock="orders",outcome="acquired"} 4.0' in text
        assert 'redlease_acquisitions_total{lock="orders",outcome="failed"} 1.0' in text
        assert 'redlease_hold_seconds_count{lock="orders"} 3.0' in text
        assert 'redlease_wait_seconds_count{lock="orders"} 5.0' in text
        assert 'redlease_holds{lock="orders"} 1.0' in text
    finally:
        http_server.shutdown()
        thread.join(10)


def test_locked_decorator_names_the_lock_from_arguments(server):
    import redlease

    with redlease.Client.from_url(server.url) as client:

        @client.exclusive("order:{order_id}:{kind}", timeout=5)
        def ship(order_id: int, kind: str = "parcel") -> str:
            assert client.lock(f"order:{order_id}:{kind}").owned()
            return f"shipped {order_id}"

        assert ship(42) == "shipped 42"
        assert ship.__name__ == "ship"
        assert not client.lock("order:42:parcel").locked()
        # held elsewhere: the bounded wait runs out
        with (
            redlease.Client.from_url(server.url) as other,
            other.lock("order:7:parcel"),
            pytest.raises(LockTimeoutError),
        ):
            client.exclusive("order:{order_id}:parcel", timeout=0.2)(lambda order_id: 1)(7)


def test_locked_decorator_rejects_unknown_fields(server):
    import redlease

    with redlease.Client.from_url(server.url) as client:
        with pytest.raises(InvalidArgumentError, match="order_id"):

            @client.exclusive("order:{order_id}")
            def ship(order: int) -> None: ...

        with pytest.raises(InvalidArgumentError, match="coroutine"):

            @client.exclusive("x:{a}")
            async def coro(a: int) -> None: ...


async def test_async_locked_decorator(server):
    import redlease

    async with redlease.AsyncClient.from_url(server.url) as client:
        inside = 0
        overlaps = 0

        @client.exclusive("job:{job.key}")
        async def run(job: object) -> None:
            nonlocal inside, overlaps
            inside += 1
            overlaps += inside > 1
            await asyncio.sleep(0.01)
            inside -= 1

        class Job:
            key = "nightly"

        await asyncio.gather(*(run(Job()) for _ in range(5)))
        assert overlaps == 0
        with pytest.raises(InvalidArgumentError, match="not a coroutine"):
            client.exclusive("x")(lambda: None)  # type: ignore[arg-type,return-value]  # on purpose


def test_listener_from_the_watchdog_thread(server, name):
    import redlease

    seen = threading.Event()
    with redlease.Client.from_url(server.url, watchdog_timeout=0.6) as client:
        client.add_listener(lambda e: seen.set() if e.kind == "lease_lost" else None)
        lock = client.lock(name)
        lock.acquire()
        lock.force_release()
        assert seen.wait(10)
