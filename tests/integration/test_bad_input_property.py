"""Arbitrary arguments to the public constructors and methods (issue #12): every call either
works or raises a ``RedleaseError``, and a call that raised wrote nothing (the server's
keyspace is compared before and after). A private server of the test's own; each example
starts from an empty database. Calls are chosen so that none can block: a lock is free, a
semaphore has every permit free, a latch is waited on only while open."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redlease
from redlease import RedleaseError
from redlease._core.arguments import MAX_COUNT, MAX_LEASE, MIN_LEASE
from redlease.testing import RedisServer, find_server

from .helpers import reply_bytes

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

names = st.one_of(
    st.text(max_size=24),
    st.just(""),
    st.just("n" * 20_000),
    st.sampled_from(["{}", "}{", "{a}b", "é✓\u0000", "\ud800", " "]),
    st.integers(),
    st.none(),
    st.binary(max_size=8),
    st.floats(),
)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(
        [
            0,
            1,
            0.002,
            MIN_LEASE,
            0.5,
            1e11,
            1e14,
            1e300,
            MAX_LEASE,
            MAX_COUNT,
            MAX_COUNT + 1,
            2**63 - 1,
            2**63,
            -(2**63),
            10**400,
        ]
    ),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=5000)),
)


@pytest.fixture(scope="module")
def own_server() -> Iterator[RedisServer]:
    binary = find_server()
    if binary is None:
        pytest.skip("no redis-server or valkey-server found")
    with RedisServer(binary) as srv:
        yield srv


@pytest.fixture(scope="module")
def raw(own_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=own_server.port)
    yield client
    client.close()


@pytest.fixture(scope="module")
def client(own_server: RedisServer) -> Iterator[redlease.Client]:
    c = redlease.Client.from_url(own_server.url)
    yield c
    c.close()


class Checker:
    """Runs calls; each works or raises a ``RedleaseError`` that left the keyspace as it was."""

    def __init__(self, raw: redis.Redis) -> None:
        self.raw = raw
        self.failures: list[str] = []

    def keys(self) -> set[bytes]:
        # a client's holder record (written at its first use, not by the call) left out
        keys = [reply_bytes(k) for k in self.raw.keys("*")]
        return {k for k in keys if not k.startswith(b"redlease:client:")}

    def __call__(self, what: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        before = self.keys()
        try:
            return True, call()
        except RedleaseError as exc:
            after = self.keys()
            assert after <= before, f"{what} raised {exc!r} but wrote {after - before}"
            return False, exc
        except Exception as exc:  # anything not a RedleaseError is a finding
            raise AssertionError(f"{what} raised a raw {type(exc).__name__}: {exc!r}") from exc


@pytest.fixture
def check(raw: redis.Redis) -> Checker:
    return Checker(raw)


def fresh(raw: redis.Redis) -> None:
    raw.flushall()


@SETTINGS
@given(name=names, lease=numbers, timeout=numbers, fair=st.booleans())
def test_lock_calls_work_or_raise_redlease_errors(
    client: redlease.Client,
    raw: redis.Redis,
    check: Checker,
    name: Any,
    lease: Any,
    timeout: Any,
    fair: bool,
) -> None:
    fresh(raw)
    factory = client.fair_lock if fair else client.lock
    ok, lock = check("lock(name, lease)", lambda: factory(name, lease=lease))
    if not ok:
        ok, lock = check("lock(name)", lambda: factory(name))
        if not ok:
            return
    ok, got = check("acquire(timeout, lease)", lambda: lock.acquire(timeout=timeout, lease=lease))
    if ok and got:
        check("release()", lock.release)
    ok, got = check("acquire(False, lease)", lambda: lock.acquire(blocking=False, lease=lease))
    if ok and got:
        check("release()", lock.release)
    check("ttl()", lock.ttl)


@SETTINGS
@given(name=names, lease=numbers, timeout=numbers)
def test_rw_lock_calls_work_or_raise_redlease_errors(
    client: redlease.Client,
    raw: redis.Redis,
    check: Checker,
    name: Any,
    lease: Any,
    timeout: Any,
) -> None:
    fresh(raw)
    ok, rw = check("rw_lock(name, lease)", lambda: client.rw_lock(name, lease=lease))
    if not ok:
        ok, rw = check("rw_lock(name)", lambda: client.rw_lock(name))
        if not ok:
            return
    for side in (rw.read_lock(), rw.write_lock()):
        ok, got = check("acquire", partial(side.acquire, timeout=timeout, lease=lease))
        if ok and got:
            check("release()", side.release)


@SETTINGS
@given(name=names, permits=numbers, more=numbers, timeout=numbers)
def test_semaphore_calls_work_or_raise_redlease_errors(
    client: redlease.Client,
    raw: redis.Redis,
    check: Checker,
    name: Any,
    permits: Any,
    more: Any,
    timeout: Any,
) -> None:
    fresh(raw)
    ok, sem = check("semaphore(name)", lambda: client.semaphore(name))
    if not ok:
        return
    check("try_set_permits", lambda: sem.try_set_permits(permits))
    check("add_permits", lambda: sem.add_permits(more))
    if raw.exists(sem.name):
        check("add_permits(MAX_COUNT)", lambda: sem.add_permits(MAX_COUNT))
        # every permit is free now: an acquire of at most the total is granted at once
        total = sem.statistics().permits
        assert total is None or total <= MAX_COUNT
        if total is not None and sem.available() == total:
            ok, got = check("acquire", lambda: sem.acquire(more, timeout=timeout))
            if ok and got:
                check("release", lambda: sem.release(more))
        check("release(permits)", lambda: sem.release(permits))
        check("set_permits", lambda: sem.set_permits(more))
        fewer = -permits if isinstance(permits, int) else permits
        check("add_permits(-permits)", lambda: sem.add_permits(fewer))
        check("acquire(timeout=0)", lambda: sem.acquire(permits, timeout=0))
    check("available()", sem.available)


@SETTINGS
@given(name=names, permits=numbers, lease=numbers, timeout=numbers, ctor_lease=numbers)
def test_lease_semaphore_calls_work_or_raise_redlease_errors(
    client: redlease.Client,
    raw: redis.Redis,
    check: Checker,
    name: Any,
    permits: Any,
    lease: Any,
    timeout: Any,
    ctor_lease: Any,
) -> None:
    fresh(raw)
    ok, sem = check(
        "lease_semaphore(name, lease)", lambda: client.lease_semaphore(name, lease=ctor_lease)
    )
    if not ok:
        ok, sem = check("lease_semaphore(name)", lambda: client.lease_semaphore(name))
        if not ok:
            return
    check("try_set_permits", lambda: sem.try_set_permits(permits))
    if sem.available() > 0:  # a permit is free: the acquire cannot block
        ok, permit = check("acquire", lambda: sem.acquire(timeout=timeout, lease=lease))
        if ok and permit is not None:
            check("update_lease_time", lambda: sem.update_lease_time(permit, lease))
            check("release", lambda: sem.release(permit))
    check("release(garbage)", lambda: sem.release(permits))
    check("add_permits", lambda: sem.add_permits(permits))
    ok, ids = check("acquire_many", lambda: sem.acquire_many(permits, timeout=0, lease=lease))
    if ok and ids:
        check("release_many", lambda: sem.release_many(ids))
    check("release_many(garbage)", lambda: sem.release_many(permits))
    check("set_permits", lambda: sem.set_permits(permits))
    check("expire", lambda: sem.expire(timeout))


@SETTINGS
@given(name=names, count=numbers, timeout=numbers)
def test_latch_calls_work_or_raise_redlease_errors(
    client: redlease.Client,
    raw: redis.Redis,
    check: Checker,
    name: Any,
    count: Any,
    timeout: Any,
) -> None:
    fresh(raw)
    ok, gate = check("latch(name)", lambda: client.latch(name))
    if not ok:
        return
    check("wait (open)", lambda: gate.wait(timeout=timeout))  # never set: open, no wait
    ok, done = check("try_set_count", lambda: gate.try_set_count(count))
    if ok and done:
        assert 1 <= gate.count() <= MAX_COUNT
        check("count_down", gate.count_down)
        check("wait(0)", lambda: gate.wait(timeout=0))
    check("delete", gate.delete)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=names, lease=numbers, timeout=numbers, count=numbers)
def test_asyncio_calls_work_or_raise_redlease_errors(
    own_server: RedisServer,
    raw: redis.Redis,
    check: Checker,
    name: Any,
    lease: Any,
    timeout: Any,
    count: Any,
) -> None:
    fresh(raw)

    async def run() -> None:
        client = redlease.AsyncClient.from_url(own_server.url)
        try:
            for make in (client.lock, client.fair_lock):
                ok, lock = check("lock", partial(make, name))
                if not ok:
                    continue
                before = check.keys()
                try:
                    got = await lock.acquire(timeout=timeout, lease=lease)
                except RedleaseError:
                    assert check.keys() <= before
                else:
                    if got:
                        with contextlib.suppress(redlease.LeaseLostError):  # a 10 ms lease
                            await lock.release()
            ok, gate = check("latch", lambda: client.latch(name))
            if ok:
                before = check.keys()
                try:
                    assert await gate.wait(timeout=timeout)
                    await gate.try_set_count(count)  # the key is the name: set last
                except RedleaseError:
                    assert check.keys() <= before
            raw.flushall()  # the latch and the semaphore share a key: the name
            ok, sem = check("semaphore", lambda: client.semaphore(name))
            if ok:
                before = check.keys()
                try:
                    await sem.try_set_permits(count)
                except RedleaseError:
                    assert check.keys() <= before
        finally:
            await client.close()

    try:
        asyncio.run(run())
    except RedleaseError:
        raise
    except AssertionError:
        raise
    except Exception as exc:
        raise AssertionError(f"a raw {type(exc).__name__}: {exc!r}") from exc
