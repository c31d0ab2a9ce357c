"""Scheduled-job locks (``client.scheduled_lock``, ShedLock's model) and the release that keeps
a lock taken (``release(keep_for=)``), on real servers, sync and asyncio.

Several instances are separate processes (``scheduled_worker.py``); a crashed one is killed
with SIGKILL. Waits poll with a deadline; the only fixed waits are a job's own run time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

import redlease
from redlease import InvalidArgumentError, NotOwnedError, ScheduledRun
from redlease._core.keep import RELEASE_KEEP
from redlease._core.keys import LockKeys
from redlease.metrics import PrometheusMetrics
from redlease.testing import RedisServer, TcpProxy, find_server

from .helpers import eventually, ttl_rises
from .test_semaphore import Background

WORKER = str(Path(__file__).with_name("scheduled_worker.py"))


@pytest.fixture(scope="module")
def one_server() -> Iterator[RedisServer]:
    """The newest server found, for the tests that start processes (run once, not per binary)."""
    with RedisServer(find_server()) as srv:
        yield srv


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url)
    yield client
    client.close()


class _Entered:
    """``async with`` over a sync context manager (the sync side's scheduled lock)."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm

    async def __aenter__(self) -> Any:
        return self._cm.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)


def entered(side: Any, cm: Any) -> Any:
    return cm if side.is_async else _Entered(cm)


def job_of(side: Any, slot: Any, body: Any = None) -> Any:
    """``slot`` decorating a job that records its calls and returns ``("ran", token)``; a
    coroutine function on the asyncio side, a plain one on the sync side."""
    calls: list[int | None] = []

    if side.is_async:

        @slot
        async def job(*, fencing_token: int | None = None) -> tuple[str, int | None]:
            calls.append(fencing_token)
            if body is not None:
                await body()
            return ("ran", fencing_token)

    else:

        @slot
        def job(*, fencing_token: int | None = None) -> tuple[str, int | None]:
            calls.append(fencing_token)
            if body is not None:
                body()
            return ("ran", fencing_token)

    job.calls = calls
    return job


# --- decorator and context manager ------------------------------------------------------------


async def test_decorator_runs_the_job_and_frees_the_slot(side, server, name, raw):
    client = side.client(server.url)
    job = job_of(side, client.scheduled_lock(name, at_most_for=10))
    result = await side(job())
    assert result[0] == "ran" and isinstance(result[1], int) and result[1] > 0
    assert job.calls == [result[1]]
    assert not raw.exists(name)  # at_least_for=0: released, not kept
    again = await side(job())  # a later tick runs again, with a newer token
    assert again[0] == "ran" and again[1] > result[1]


async def test_decorator_skips_at_once_while_another_instance_holds_the_slot(
    side, server, name, caplog
):
    holder = side.client(server.url)
    other = side.client(server.url)
    events: list[Any] = []
    other.add_listener(events.append)
    registry = CollectorRegistry()
    other.add_listener(PrometheusMetrics(registry, per_lock=True))
    job = job_of(side, other.scheduled_lock(name, at_most_for=10))
    async with entered(side, holder.scheduled_lock(name, at_most_for=30)) as run:
        assert run and run.acquired
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger="redlease"):
            assert await side(job()) is None
            assert await side(job()) is None
        took = time.monotonic() - started
    assert job.calls == []
    assert took < 10  # one round trip each, never a wait on a 30 s lease (room for a load)
    assert [e.kind for e in events].count("skipped") == 2
    assert all(e.name == name for e in events if e.kind == "skipped")
    assert caplog.text.count(f"scheduled job {name!r} skipped") == 2
    assert registry.get_sample_value("redlease_skipped_runs_total", {"lock": name}) == 2
    assert (await side(job()))[0] == "ran"  # the slot freed on exit


async def test_context_manager_gives_the_run_and_its_token(side, server, name, raw):
    client = side.client(server.url)
    other = side.client(server.url)
    slot = client.scheduled_lock(name, at_most_for=60)
    async with entered(side, slot) as run:
        assert isinstance(run, ScheduledRun) and run.acquired and bool(run)
        assert run.fencing_token == (await side(client.lock(name).statistics())).fencing_token
        assert 50 < raw.pttl(name) / 1000 <= 60  # the lease while the job runs: at_most_for
        async with entered(side, other.scheduled_lock(name, at_most_for=10)) as elsewhere:
            assert not elsewhere and elsewhere.fencing_token is None
        # the same task (thread) runs it already: taken too
        async with entered(side, slot) as nested:
            assert not nested
        assert raw.exists(name)  # the nested skip left the outer run's hold alone
    assert not raw.exists(name)
    async with entered(side, other.scheduled_lock(name, at_most_for=10)) as later:
        assert later.fencing_token > run.fencing_token


async def test_the_slot_is_freed_when_the_job_raises(side, server, name, raw):
    client = side.client(server.url)
    slot = client.scheduled_lock(name, at_most_for=10)
    with pytest.raises(ZeroDivisionError):
        async with entered(side, slot) as run:
            assert run
            1 / 0  # noqa: B018
    assert not raw.exists(name)


async def test_decorator_on_the_wrong_kind_of_function(side, server, name):
    client = side.client(server.url)
    slot = client.scheduled_lock(name, at_most_for=10)
    if side.is_async:  # a plain function works too, run in the loop

        @slot
        def plain() -> str:
            return "plain"

        assert await plain() == "plain"
    else:

        async def coroutine() -> None: ...

        with pytest.raises(InvalidArgumentError, match="coroutine function"):
            slot(coroutine)


async def test_the_caller_cannot_pass_the_token(side, server, name):
    client = side.client(server.url)
    job = job_of(side, client.scheduled_lock(name, at_most_for=10))
    with pytest.raises(TypeError, match="fencing_token is given by the scheduled lock"):
        await side(job(fencing_token=5))
    assert (await side(client.lock(name).statistics())).locked is False


# --- at_least_for ------------------------------------------------------------------------------


async def test_at_least_for_keeps_the_key_for_what_is_left_after_a_fast_run(
    side, server, name, raw
):
    client = side.client(server.url)
    other = side.client(server.url)
    job = job_of(side, client.scheduled_lock(name, at_most_for=10, at_least_for=1.5))
    started = time.monotonic()
    assert (await side(job()))[0] == "ran"
    ttl = raw.pttl(name) / 1000
    # cut from the 10 s lease to what is left of the 1.5 s (not deleted)
    assert 1.5 - (time.monotonic() - started) - 0.05 <= ttl <= 1.5
    stats = await side(client.lock(name).statistics())
    # held by no owner (field "<owner field>:kept"), kept by the owner that ran it
    assert stats.locked and not stats.owned and stats.holders == {}
    assert stats.kept_by is not None and stats.kept_by.startswith(f"{client.id}:")
    # every instance skips until it expires, the one that ran it included
    assert await side(job()) is None
    assert await side(job_of(side, other.scheduled_lock(name, at_most_for=10))()) is None
    assert job.calls and len(job.calls) == 1
    await eventually(lambda: not raw.exists(name), timeout=5)
    assert time.monotonic() - started >= 1.5 - 0.05
    assert (await side(job()))[0] == "ran"


async def test_a_run_longer_than_at_least_for_frees_the_slot(side, server, name, raw):
    client = side.client(server.url)

    def slow() -> Any:
        return asyncio.sleep(0.3) if side.is_async else time.sleep(0.3)

    job = job_of(side, client.scheduled_lock(name, at_most_for=10, at_least_for=0.2), slow)
    assert (await side(job()))[0] == "ran"
    assert not raw.exists(name)


async def test_at_least_for_longer_than_the_watchdog_lease_with_keep_alive(side, server, name, raw):
    client = side.client(server.url, watchdog_timeout=1.0)
    # at_least_for 6 s: what is left after the run is still well past the 1 s watchdog lease
    # when the run itself is slow (3 s left 0 after a 3 s run at load 11, seen on Python 3.13)
    job = job_of(side, client.scheduled_lock(name, keep_alive=True, at_least_for=6))
    assert (await side(job()))[0] == "ran"
    assert 2 < raw.pttl(name) / 1000 <= 6  # set to what is left, past the 1 s watchdog lease


# --- keep_alive and at_most_for ----------------------------------------------------------------


async def test_keep_alive_renews_the_lease_while_a_long_job_runs(side, server, name, raw):
    # a 2 s watchdog lease (0.3 s was lost by a thread starved that long on a loaded
    # machine, parallel runs; 0.6 s bounds each renewal call by 0.2 s; 1.2 s left a late
    # renewal 0.8 s)
    client = side.client(server.url, watchdog_timeout=2)
    other = side.client(server.url)
    elsewhere = job_of(side, other.scheduled_lock(name, at_most_for=10))
    seen: list[Any] = []
    # the job runs until its lease was renewed 7 times, a third of a lease apart: more than
    # two watchdog leases (waited for, not slept through)
    renewals = 7

    async def async_body() -> None:
        rose, count, deadline = ttl_rises(raw, name), 0, time.monotonic() + 60
        while count < renewals and time.monotonic() < deadline:
            seen.append(await elsewhere())
            seen.append(raw.pttl(name))
            await asyncio.sleep(0.2)
            count += rose()

    def sync_body() -> None:
        rose, count, deadline = ttl_rises(raw, name), 0, time.monotonic() + 60
        while count < renewals and time.monotonic() < deadline:
            seen.append(elsewhere())
            seen.append(raw.pttl(name))
            time.sleep(0.2)
            count += rose()

    job = job_of(
        side,
        client.scheduled_lock(name, keep_alive=True),
        async_body if side.is_async else sync_body,
    )
    assert (await side(job()))[0] == "ran"
    assert sum(1 for ttl in seen[1::2] if ttl > 0) >= renewals  # (not the 60 s bound)
    assert seen[0::2] == [None] * (len(seen) // 2)  # the other instance skipped throughout
    assert all(0 < ttl <= 2000 for ttl in seen[1::2])
    assert elsewhere.calls == []
    assert not raw.exists(name)


async def test_without_keep_alive_the_slot_frees_after_at_most_for(side, server, name, caplog):
    client = side.client(server.url)
    other = side.client(server.url)
    elsewhere = job_of(side, other.scheduled_lock(name, at_most_for=10))

    async def async_body() -> None:  # until the other instance runs it (5 s at most)
        deadline = time.monotonic() + 5
        while await elsewhere() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    def sync_body() -> None:
        deadline = time.monotonic() + 5
        while elsewhere() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    job = job_of(
        side,
        client.scheduled_lock(name, at_most_for=0.3),
        async_body if side.is_async else sync_body,
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="redlease"):
        assert (await side(job()))[0] == "ran"
    assert elsewhere.calls  # the other instance ran it once the 0.3 s lease ran out
    assert time.monotonic() - started >= 0.25
    assert "lease ran out or was lost while it ran" in caplog.text


@pytest.mark.parametrize(
    ("kind", "at_most_for", "keep_alive", "watchdog"),
    [("sync", 1.0, 0, 30.0), ("async", 1.0, 0, 30.0), ("sync", 30.0, 1, 1.0)],
    ids=["sync-at_most_for", "async-at_most_for", "sync-keep_alive"],
)
def test_a_killed_instance_frees_the_slot_within_at_most_for(
    one_server, name, kind, at_most_for, keep_alive, watchdog
):
    numbers = (at_most_for, keep_alive, watchdog)
    proc = subprocess.Popen(
        [sys.executable, WORKER, "crash", kind, one_server.url, name, *map(str, numbers)],
        stdout=subprocess.PIPE,
        text=True,
    )
    bound = watchdog if keep_alive else at_most_for
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "running"
        running_at = time.monotonic()  # the job took the slot before this
        with redlease.Client.from_url(one_server.url) as client:
            slot = client.scheduled_lock(name, at_most_for=10)

            @slot
            def job() -> str:
                return "ran"

            assert job() is None  # taken while the instance lives
            os.kill(proc.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            proc.wait(10)
            # at_most_for counts from the take (before running_at); a kept-alive slot's lease
            # from its last renewal, which may come up to the kill
            since = killed_at if keep_alive else running_at
            deadline = since + bound + 2.0
            result = None
            while result is None and time.monotonic() < deadline:
                result = job()
                if result is None:
                    time.sleep(0.02)
            freed_after = time.monotonic() - since
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert result == "ran", f"the slot was not freed within {bound + 2} s"
    assert freed_after <= bound + 1.0, freed_after  # (room for a loaded machine's poll)


def test_three_instances_run_the_job_once_per_tick(one_server, name):
    """Three processes (two sync, one asyncio) tick the same job at nearly the same times
    (each tick late by a random 0-50 ms); at_least_for keeps a fast run's slot taken past the
    others' ticks: exactly one run per tick. The margins are for a loaded 2-core machine: the
    others may try up to at_least_for (0.5 s) after the run, and the run may start up to
    interval - at_least_for (0.5 s) late, before the next tick finds its slot still taken
    (with 0.4 s ticks and 0.25 s a run 0.15 s late left tick 1 run by no one)."""
    ticks, interval, jitter, at_least = 5, 1.0, 0.05, 0.5
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "ticks", kind, one_server.url, name]
            + [str(a) for a in (at_least, 5.0, ticks, interval, jitter)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for kind in ("sync", "sync", "async")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        start = time.time() + 0.3
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start}\n")
            proc.stdin.flush()
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0 and "done" in out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    with redis.Redis.from_url(one_server.url) as r:
        runs = [int(r.get(f"{name}:runs:{tick}") or 0) for tick in range(ticks)]
    assert runs == [1] * ticks


# --- release(keep_for=) ------------------------------------------------------------------------


async def test_release_keep_for_keeps_the_lock_taken_by_no_one(side, server, name, raw):
    client = side.client(server.url)
    lock = client.lock(name)
    assert await side(lock.acquire(blocking=False, lease=10))
    await side(lock.release(keep_for=2.0))
    assert 1.0 < raw.pttl(name) / 1000 <= 2.0  # (1 s of room for a loaded machine)
    assert lock.fencing_token is None
    assert not await side(lock.acquire(blocking=False))  # not even its own owner takes it
    with pytest.raises(NotOwnedError):
        await side(lock.release())
    await eventually(lambda: not raw.exists(name), timeout=10)
    assert await side(lock.acquire(blocking=False))
    await side(lock.release(keep_for=0))  # 0: a plain release
    assert not raw.exists(name)


async def test_release_keep_for_is_refused_where_it_cannot_apply(side, server, name, raw):
    client = side.client(server.url)
    lock = client.lock(name)
    for bad in (-1, float("nan"), "1", True, 1e12):
        with pytest.raises(InvalidArgumentError, match="keep_for"):
            await side(lock.release(keep_for=bad))
    assert await side(lock.acquire(blocking=False))
    assert await side(lock.acquire(blocking=False))  # re-entered: two holds
    with pytest.raises(InvalidArgumentError, match="only its last release"):
        await side(lock.release(keep_for=1))
    await side(lock.release())
    await side(lock.release(keep_for=0.5))
    assert raw.exists(name)
    write = client.rw_lock(name + ":rw").write_lock()
    assert await side(write.acquire(blocking=False))
    with pytest.raises(InvalidArgumentError, match="cannot be kept"):
        await side(write.release(keep_for=1))
    await side(write.release())
    with pytest.raises(NotOwnedError):
        await side(client.lock(name + ":free").release(keep_for=1))


async def test_a_kept_release_whose_reply_is_lost_is_recognised_by_its_retry(side, server, name):
    """The server ran the release but its reply never came: redis-py sends it again (same
    request id), which the receipt answers as done; without it the retry would find the
    owner's hold gone and raise LeaseLostError."""
    with TcpProxy(("127.0.0.1", server.port)) as proxy:
        client = side.client(proxy.url)
        lock = client.lock(name)
        assert await side(lock.acquire(blocking=False, lease=60))
        with redis.Redis.from_url(server.url) as r:
            r.script_load(RELEASE_KEEP.source)  # so that the first send runs it
            calls = _evalsha_calls(r)
            dropped = proxy.drop_next_reply(RELEASE_KEEP.sha.encode())
            await side(lock.release(keep_for=20))
            assert dropped.is_set()
            assert _evalsha_calls(r) == calls + 2  # sent twice, run twice, one reply
            assert 15 < r.pttl(name) / 1000 <= 20  # kept for keep_for, not the 60 s lease
            assert any(f.endswith(b":kept") for f in r.hkeys(name))


async def test_a_kept_release_keeps_the_receipts_the_lock_carried(side, server, name, raw):
    """A hand-over carries the releaser's receipt in the lock; a kept release of the next
    holder writes it to the receipts key, so it outlives the kept key (its 30 s window)."""
    keys = LockKeys.for_name(name)
    first = side.client(server.url).lock(name)
    second = side.client(server.url).lock(name)
    assert await side(first.acquire(lease=10))
    carried: list[bytes] = []

    def take_and_keep() -> None:
        assert second.acquire(timeout=10)
        carried.extend(raw.hget(name, "redlease:released").split())
        second.release(keep_for=0.2)

    async def take_and_keep_async() -> None:
        assert await second.acquire(timeout=10)
        carried.extend(raw.hget(name, "redlease:released").split())
        await second.release(keep_for=0.2)

    if side.is_async:
        waiter: Any = asyncio.create_task(take_and_keep_async())
    else:
        waiter = threading.Thread(target=take_and_keep)
        waiter.start()
    await eventually(lambda: raw.zcard(keys.line) == 1)  # the second waits in line
    await side(first.release())  # handed over, the receipt carried in the hash
    if side.is_async:
        await asyncio.wait_for(waiter, 10)
    else:
        waiter.join(10)
    assert carried
    await eventually(lambda: not raw.exists(name), timeout=5)
    assert set(carried) <= set(raw.get(keys.receipts).split())


def _evalsha_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


# --- a kept lock: seen and cleared by an operator ----------------------------------------------

WOKEN_WITHIN = 10.0
"""A waiter woken by the unlock message of a force release holds the lock well within this,
however loaded the machine; without the message it would look again only at the end of its
30 s wait (under ``long_recheck``; else at its re-check, ``RECHECK``, 5 s)."""


def _taken_then_released(side: Any, lock: Any, stamp: list[float]) -> Any:
    """Acquire ``lock`` (waiting up to 30 s), note when, release it: in one thread or task."""
    if side.is_async:

        async def run() -> bool:
            got = await lock.acquire(timeout=30)
            stamp.append(time.monotonic())
            if got:
                await lock.release()
            return bool(got)

        return run

    def run_sync() -> bool:
        got = lock.acquire(timeout=30)
        stamp.append(time.monotonic())
        if got:
            lock.release()
        return bool(got)

    return run_sync


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
async def test_a_kept_lock_is_seen_as_kept_and_force_released(side, server, name, raw, kind):
    """After ``release(keep_for=)`` the lock's statistics say it is kept, by whom, for how
    long (nobody holds it); ``force_release()`` deletes it like a held lock (it raised
    WrongTypeError before), the releaser is not told of a lost lease (it had none), and
    the lock can be taken at once."""
    client = side.client(server.url)
    events: list[Any] = []
    client.add_listener(events.append)
    lock = getattr(client, kind)(name)
    assert await side(lock.acquire(blocking=False, lease=120))
    owner = next(iter((await side(lock.statistics())).holders))
    token = lock.fencing_token
    await side(lock.release(keep_for=60))
    stats = await side(lock.statistics())
    assert stats.locked and await side(lock.locked())
    assert stats.kept_by == owner
    assert stats.holders == {} and not stats.owned and stats.hold_count == 0
    assert 50 < stats.ttl <= 60
    assert stats.fencing_token == token
    assert stats.holder_info[owner].pid == os.getpid()
    admin = side.client(server.url)
    assert await side(admin.lock(name).force_release())
    assert not raw.exists(name)
    assert not await side(admin.lock(name).force_release())  # free: nothing to do
    freed = await side(lock.statistics())
    assert not freed.locked and freed.kept_by is None and freed.ttl is None
    assert await side(lock.acquire(blocking=False))
    await side(lock.release())
    assert [e.kind for e in events if e.kind == "lease_lost"] == []


async def test_force_release_of_a_kept_slot_wakes_a_waiter_and_the_next_run_runs(
    side, server, name, raw, long_recheck
):
    """The scheduled job's slot kept by ``at_least_for``: the next run is refused until an
    operator force-releases it; the release publishes the unlock message (a waiter holds at
    once, not at its next re-check) and the next run runs."""
    client = side.client(server.url)
    job = job_of(side, client.scheduled_lock(name, at_most_for=120, at_least_for=60))
    assert (await side(job()))[0] == "ran"
    assert await side(job()) is None  # kept: refused
    assert (await side(client.lock(name).statistics())).kept_by is not None
    stamp: list[float] = []
    waiter = side.client(server.url).lock(name)
    waiting = Background(side, _taken_then_released(side, waiter, stamp))
    await eventually(lambda: raw.zcard(LockKeys.for_name(name).line) == 1)
    started = time.monotonic()
    assert await side(side.client(server.url).lock(name).force_release())
    assert await waiting.result(timeout=25)
    assert stamp[0] - started < WOKEN_WITHIN, "not woken by the force release's message"
    assert (await side(job()))[0] == "ran"
    assert len(job.calls) == 2


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"at_most_for": -1}, "at_most_for"),
        ({"at_most_for": 0}, "at_most_for"),
        ({"at_most_for": "10"}, "at_most_for"),
        ({"at_most_for": 10, "at_least_for": -0.5}, "at_least_for"),
        ({"at_most_for": 10, "at_least_for": float("nan")}, "at_least_for"),
        ({"at_most_for": 10, "at_least_for": None}, "at_least_for"),
        ({"at_most_for": 5, "at_least_for": 6}, "at_least_for"),
        ({}, "at_most_for is required"),
        ({"keep_alive": True, "at_most_for": 1}, "at_most_for=1 is shorter"),
        ({"keep_alive": "yes", "at_most_for": 1}, "keep_alive"),
    ],
)
async def test_bad_arguments_are_named(side, server, name, kwargs, named):
    client = side.client(server.url)
    with pytest.raises(InvalidArgumentError, match=named):
        client.scheduled_lock(name, **kwargs)


async def test_good_arguments(side, server, name):
    client = side.client(server.url, watchdog_timeout=2)
    slot = client.scheduled_lock(name, keep_alive=True, at_least_for=5)
    assert (slot.at_most_for, slot.at_least_for, slot.keep_alive) == (2, 5, True)
    from datetime import timedelta

    slot = client.scheduled_lock(
        name, at_most_for=timedelta(minutes=1), at_least_for=timedelta(seconds=60)
    )
    assert (slot.at_most_for, slot.at_least_for) == (60, 60)
    with pytest.raises(InvalidArgumentError):
        client.scheduled_lock("", at_most_for=1)
