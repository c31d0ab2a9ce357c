"""Leader election (``client.election``), sync and asyncio, on real servers: one candidate leads
and the others wait; leaving the block hands over; terms' tokens only grow; ``leader()`` and
``observe()``; ``term.lost`` when the lock is force-released or the server loses its data;
``cancel_on_loss``; candidates in processes of their own, the leader killed (SIGKILL) or
stopped past its lease (SIGSTOP, then SIGCONT); an observer riding out a server outage."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import redlease
from redlease._core import scripts
from redlease._core.keys import LockKeys
from redlease._core.lock import OUTAGE_TOLERANCE
from redlease.testing import RedisServer, find_server

from .helpers import eventually, reply_bytes

L = 1.5
"""The candidates' lease (their clients' ``watchdog_timeout``): the watchdog renews every 0.5 s."""

WORKER = str(Path(__file__).with_name("election_worker.py"))

OUTAGE = OUTAGE_TOLERANCE
"""How long an observer rides out a server outage before it raises (as a lock's waiters)."""


@pytest.fixture(scope="module")
def newest() -> Iterator[RedisServer]:
    """One server (the newest binary found) for the tests that need no other."""
    with RedisServer(find_server()) as srv:
        yield srv


async def _wait(event: Any, timeout: float) -> bool:
    """Wait for a ``threading.Event`` or an ``asyncio.Event`` from the test's loop."""
    if isinstance(event, asyncio.Event):
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True
    return await asyncio.to_thread(event.wait, timeout)


class _AsyncView:
    """``async with`` over a sync context manager (the sync side's ``leadership()``)."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm

    async def __aenter__(self) -> Any:
        return self._cm.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)


def _leadership(side: Any, election: Any, **kwargs: Any) -> Any:
    """``async with _leadership(side, election, timeout=...)`` on either side."""
    cm = election.leadership(**kwargs)
    return cm if side.is_async else _AsyncView(cm)


class Candidate:
    """Campaigns in a thread (sync) or a task (asyncio), leads until told to resign, and
    keeps what it saw: its term, when it was elected, and how the block ended."""

    def __init__(self, side: Any, election: Any, **leadership: Any) -> None:
        self.term: Any = None
        self.error: BaseException | None = None
        self.elected_at = 0.0
        self.elected = threading.Event()
        self.done = threading.Event()
        if side.is_async:
            self._resign: Any = asyncio.Event()
            self.task = asyncio.ensure_future(self._async(election, leadership))
        else:
            self._resign = threading.Event()
            threading.Thread(target=self._sync, args=(election, leadership), daemon=True).start()

    def _sync(self, election: Any, leadership: dict[str, Any]) -> None:
        try:
            with election.leadership(**leadership) as term:
                self._lead(term)
                self._resign.wait(30)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    async def _async(self, election: Any, leadership: dict[str, Any]) -> None:
        try:
            async with election.leadership(**leadership) as term:
                self._lead(term)
                await asyncio.wait_for(self._resign.wait(), 30)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def _lead(self, term: Any) -> None:
        self.term = term
        self.elected_at = time.monotonic()
        self.elected.set()

    async def leads(self, timeout: float = 10.0) -> bool:
        return await _wait(self.elected, timeout)

    async def resign(self) -> float:
        """Leave the block; returns when it began leaving (monotonic)."""
        left = time.monotonic()
        self._resign.set()
        assert await _wait(self.done, 10), "the block did not end"
        return left


async def test_one_leads_the_other_waits_and_takes_over(side, server, name):
    """Two candidates: one leads, the other waits; leaving the block hands over at once; each
    new term's token is greater than the last; ``leader()`` names the leader, then ``None``."""
    a = side.client(server.url, watchdog_timeout=L).election(name, identity="host-a:1")
    b = side.client(server.url, watchdog_timeout=L).election(name, identity="host-b:2")
    assert await side(a.leader()) is None
    first = Candidate(side, a)
    assert await first.leads()
    second = Candidate(side, b)
    assert not await second.leads(timeout=0.5)  # waits while the first leads
    assert await side(a.leader()) == await side(b.leader()) == "host-a:1"
    left = await first.resign()
    assert first.error is None
    assert await second.leads(timeout=5)
    handover = second.elected_at - left
    assert handover < 1.0, f"the next candidate led {handover:.3f} s after the first left"
    assert second.term.token > first.term.token
    assert await side(a.leader()) == "host-b:2"
    third = Candidate(side, a)  # the first campaigns again: a third term
    await second.resign()
    assert await third.leads(timeout=5)
    assert third.term.token > second.term.token
    await third.resign()
    assert [c.error for c in (first, second, third)] == [None, None, None]
    assert await side(a.leader()) is None  # the record is still there, the lock is free


async def test_timeout_raises_lock_timeout(side, newest, name):
    """A bounded campaign that runs out raises ``LockTimeoutError`` (``0``: one try)."""
    a = side.client(newest.url).election(name, identity="a")
    b = side.client(newest.url).election(name, identity="b")
    leader = Candidate(side, a)
    assert await leader.leads()
    for timeout in (0, 0.2):
        started = time.monotonic()
        with pytest.raises(redlease.LockTimeoutError, match="not elected within"):
            async with _leadership(side, b, timeout=timeout):
                raise AssertionError("led while another leads")
        assert time.monotonic() - started < 10  # not held up by the leader (room for a load)
    await leader.resign()
    async with _leadership(side, b, timeout=0) as term:  # free: one try is enough
        assert term.identity == "b"
        assert await side(a.leader()) == "b"


async def test_terms_do_not_nest(side, newest, name):
    election = side.client(newest.url).election(name)
    async with _leadership(side, election) as term:
        assert term.identity == f"{socket.gethostname()}:{os.getpid()}"  # the default
        with pytest.raises(redlease.InvalidArgumentError, match="do not nest"):
            async with _leadership(side, election):
                pass
    with pytest.raises(redlease.InvalidArgumentError):
        side.client(newest.url).election(name, identity="")
    with pytest.raises(redlease.InvalidArgumentError):
        side.client(newest.url).election("a}b{")


async def test_leader_is_none_once_the_lock_is_free(side, newest, name):
    """A dead leader is reported until its lease runs out, never after; a deposed one never
    after the lock was freed (its record stays, but names a term the lock no longer has)."""
    dying = side.client(newest.url, watchdog_timeout=L)
    observer = side.client(newest.url).election(name)
    candidate = Candidate(side, dying.election(name, identity="dies"))
    assert await candidate.leads()
    await side(dying.close())  # as a killed process: the hold stays until its lease runs out
    assert await side(observer.leader()) == "dies"
    gone = time.monotonic()

    async def no_leader() -> bool:
        return await side(observer.leader()) is None

    await eventually(no_leader, timeout=L + 10)
    assert time.monotonic() - gone < L + 4  # (room for a loaded machine's calls)
    raw = redis.Redis.from_url(newest.url)
    try:
        assert reply_bytes(raw.get(observer.record_key)).endswith(
            b" dies"
        )  # the record outlives the term
        other = Candidate(side, side.client(newest.url).election(name, identity="next"))
        assert await other.leads()
        assert await side(observer.leader()) == "next"
        assert await side(observer.lock.force_release())  # freed without a word
        assert await side(observer.leader()) is None
        assert reply_bytes(raw.get(observer.record_key)).endswith(b" next")
        intruder = side.client(newest.url).lock(observer.lock_name)  # not a candidate
        assert await side(intruder.acquire(timeout=5))
        assert await side(observer.leader()) is None  # the record names an older term
        await side(intruder.release())
        await other.resign()
        assert isinstance(other.error, redlease.LeaseLostError)
    finally:
        raw.close()
    await candidate.resign()  # on its closed client
    assert isinstance(candidate.error, redlease.ClientClosedError)


async def _observed(side: Any, election: Any, poll: float) -> tuple[list[Any], Any, Any]:
    """Start observing in a thread or task: the changes seen (identity, when), a stop event,
    and the thread or task."""
    seen: list[Any] = []
    if side.is_async:
        stop: Any = asyncio.Event()

        async def run() -> None:
            async for leader in election.observe(poll=poll, stop=stop):
                seen.append((leader, time.monotonic()))

        return seen, stop, asyncio.ensure_future(run())
    stop = threading.Event()

    def run_sync() -> None:
        for leader in election.observe(poll=poll, stop=stop):
            seen.append((leader, time.monotonic()))

    thread = threading.Thread(target=run_sync, daemon=True)
    thread.start()
    return seen, stop, thread


async def test_observe_yields_each_change(side, newest, name):
    """``observe()`` yields the leader now, then each change: announced ones (a term begins or
    ends) at once, well before its poll; unannounced ones (the lock freed under the leader)
    within its poll; it ends once ``stop`` is set, or its client closed."""
    client = side.client(newest.url, watchdog_timeout=L)
    election = client.election(name, identity="one")
    seen, stop, runner = await _observed(side, election, poll=30)  # only announcements count
    fast, stop_fast, fast_runner = await _observed(side, election, poll=0.2)

    async def changes_seen(count: int, since: float, within: float) -> Any:
        await eventually(lambda: len(seen) >= count and len(fast) >= count, timeout=within)
        assert [s[0] for s in seen] == [s[0] for s in fast]
        leader, at = seen[count - 1]
        assert at - since < within
        return leader

    # announced changes: within a few seconds on a loaded machine, far from the 30 s poll
    announced = 10.0

    assert await changes_seen(1, time.monotonic(), 10) is None
    leader = Candidate(side, election)
    assert await leader.leads()
    assert await changes_seen(2, leader.elected_at, announced) == "one"
    left = await leader.resign()
    assert await changes_seen(3, left, announced) is None
    second = Candidate(side, side.client(newest.url).election(name, identity="two"))
    assert await second.leads()
    assert await changes_seen(4, second.elected_at, announced) == "two"
    assert [s[0] for s in seen] == [None, "one", None, "two"]
    freed = time.monotonic()
    assert await side(election.lock.force_release())  # nobody announces this one
    await eventually(lambda: len(fast) == 5, timeout=20)
    assert fast[-1][0] is None
    assert fast[-1][1] - freed < 0.2 + 10  # a 0.2 s poll (room for a loaded machine)
    assert len(seen) == 4  # not announced: the slow observer polls every 30 s
    await second.resign()  # its term was lost: the block ended with LeaseLostError
    assert isinstance(second.error, redlease.LeaseLostError)
    stopped = time.monotonic()
    stop_fast.set()
    if side.is_async:
        await asyncio.wait_for(fast_runner, 20)
        assert time.monotonic() - stopped < 0.2 + 10
        runner.cancel()  # its poll is 30 s: cancelling ends it at once
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(runner, 10)  # (a cancellation lost: TimeoutError)
    else:
        await eventually(lambda: not fast_runner.is_alive(), timeout=20)
        assert time.monotonic() - stopped < 0.2 + 10
        closed = time.monotonic()
        await side(client.close())  # closing the client ends it at once
        await eventually(lambda: not runner.is_alive(), timeout=20)
        assert time.monotonic() - closed < 10  # not its 30 s poll
    assert stop.is_set() is False


async def test_term_lost_when_force_released(side, newest, name):
    """``election.force_release()`` deposes the leader: the next candidate leads at once; the
    deposed one's ``term.lost`` is set at its watchdog's next round, and its block ends with
    ``LeaseLostError``."""
    a = side.client(newest.url, watchdog_timeout=L).election(name, identity="a")
    b = side.client(newest.url, watchdog_timeout=L).election(name, identity="b")
    first = Candidate(side, a)
    assert await first.leads()
    second = Candidate(side, b)
    deposed = time.monotonic()
    assert await side(b.force_release())
    assert await second.leads(timeout=10)
    assert second.term.token > first.term.token
    # at its watchdog's next round (every L / 3), with room for a loaded machine; not at its
    # release
    assert await _wait(first.term.lost, L / 3 + 10)
    assert time.monotonic() - deposed < L / 3 + 10
    assert isinstance(first.term.error, redlease.LeaseLostError)
    await first.resign()
    assert isinstance(first.error, redlease.LeaseLostError)
    assert "lost the leadership of term" in str(first.error)
    assert await side(a.leader()) == "b"  # the deposed leader's resignation freed nothing
    await second.resign()
    assert second.error is None


async def test_term_lost_when_the_server_loses_its_data(side, private_server, name):
    """The server restarts empty: the leader's ``term.lost`` is set (the watchdog finds the hold
    gone) and its block ends with ``LeaseLostError``; campaigning again works."""
    election = side.client(private_server.url, watchdog_timeout=L).election(name)
    leader = Candidate(side, election)
    assert await leader.leads()
    private_server.restart()
    assert await _wait(leader.term.lost, L + 5)
    await leader.resign()
    assert isinstance(leader.error, redlease.LeaseLostError)
    again = Candidate(side, election)
    assert await again.leads()
    assert await side(election.leader()) == election.identity
    await again.resign()
    assert again.error is None


async def test_cancel_on_loss_cancels_the_leader_task(newest, name):
    """With ``cancel_on_loss=True`` the task running the block is cancelled the moment the
    leadership is lost, and the block ends with ``LeaseLostError`` (the task itself goes on,
    not cancelled); without it the block runs on. A cancellation from elsewhere stays one."""
    # a watchdog lease far above the test: the forced releases below are what end the terms
    # (heard at once); with a short one a loaded machine can lose the term first
    async with (
        redlease.AsyncClient.from_url(newest.url, watchdog_timeout=60) as client,
        redlease.AsyncClient.from_url(newest.url) as admin,
    ):
        election = client.election(name)
        steps: list[str] = []

        async def lead(cancel: bool) -> None:
            try:
                async with election.leadership(cancel_on_loss=cancel) as term:
                    steps.append("leading")
                    if cancel:
                        await asyncio.sleep(60)  # cancelled when the leadership is lost
                    else:
                        await asyncio.wait_for(term.lost.wait(), 60)
                    steps.append(f"went on, lost={term.lost.is_set()}")
            except redlease.LeaseLostError:
                steps.append("lost")
            await asyncio.sleep(0)  # the task is not left cancelled
            steps.append("after")

        def listening() -> bool:
            """The client listens where a force release of its hold tells it (a channel it
            subscribes in the background: a release before that is heard only by the
            watchdog, 20 s later)."""
            return bool(newest.command("PUBSUB", "CHANNELS", f"redlease:holder:*{name}*"))

        task = asyncio.ensure_future(lead(True))
        await eventually(lambda: steps == ["leading"], timeout=10)
        await eventually(listening, timeout=10)
        assert await admin.election(name).force_release()
        await asyncio.wait_for(task, 10)  # long before the watchdog (20 s) could tell
        assert steps == ["leading", "lost", "after"]
        if sys.version_info >= (3, 11):
            assert task.cancelling() == 0

        steps.clear()  # without the option the block runs to its end, then raises
        task = asyncio.ensure_future(lead(False))
        await eventually(lambda: steps == ["leading"], timeout=10)
        await eventually(listening, timeout=10)
        assert await admin.election(name).force_release()
        await asyncio.wait_for(task, 10)
        assert steps == ["leading", "went on, lost=True", "lost", "after"]

        steps.clear()  # cancelled by someone else while leading: CancelledError, resigned
        task = asyncio.ensure_future(lead(True))
        await eventually(lambda: steps == ["leading"], timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await election.leader() is None


# --- candidates in processes of their own ---------------------------------------------------


class Worker:
    """``election_worker.py`` in a child process; stopped, resumed and killed by its PID."""

    def __init__(self, side: str, url: str, name: str, identity: str, lease: float = L) -> None:
        self.identity = identity
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, side, url, name, str(lease), identity],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[list[str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.split())

    def next(self, timeout: float) -> list[str]:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.identity} said nothing within {timeout} s") from None

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def _next_leader(workers: list[Worker], timeout: float) -> tuple[Worker, int, float]:
    """The first of ``workers`` to say it leads: it, its term's token, when."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            try:
                words = worker.lines.get(timeout=0.01)
            except queue.Empty:
                continue
            if words[0] == "leading":
                return worker, int(words[1]), float(words[2])
    raise AssertionError(f"nobody led within {timeout} s")


@pytest.fixture
def workers(newest: RedisServer, name: str) -> Iterator[Any]:
    started: list[Worker] = []

    def start(side: str, count: int) -> list[Worker]:
        batch = [Worker(side, newest.url, name, f"w{i}") for i in range(count)]
        started.extend(batch)
        for worker in batch:
            assert worker.next(30) == ["ready"]
        return batch

    yield start
    for worker in started:
        worker.stop()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_killed_leader_is_replaced_within_its_lease(kind, workers):
    """Three candidate processes; the leader is killed (SIGKILL): another leads within its
    lease (+ 1 s), with a greater token."""
    candidates = workers(kind, 3)
    leader, token, _ = _next_leader(candidates, 30)
    killed = time.monotonic()
    leader.signal(signal.SIGKILL)
    leader.stop()
    rest = [c for c in candidates if c is not leader]
    _, new_token, led_at = _next_leader(rest, L + 10)
    # within the lease (the TTL tells the others when to try), with room for a loaded machine
    assert led_at - killed <= L + 3, f"took over {led_at - killed:.3f} s after the kill"
    assert new_token > token


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_frozen_leader_learns_of_its_loss_as_it_resumes(kind, workers):
    """The leader is stopped (SIGSTOP) past its lease: another leads within the lease (+ 1 s);
    resumed (SIGCONT), the stopped one's ``term.lost`` is set at once (its watchdog's round is
    overdue: it finds the hold gone)."""
    candidates = workers(kind, 2)
    leader, token, _ = _next_leader(candidates, 30)
    frozen = time.monotonic()
    leader.signal(signal.SIGSTOP)
    try:
        other = next(c for c in candidates if c is not leader)
        _, new_token, led_at = _next_leader([other], L + 10)
        assert led_at - frozen <= L + 3  # as a killed leader's
        assert new_token > token
    finally:
        resumed = time.monotonic()
        leader.signal(signal.SIGCONT)
    words = leader.next(10)
    assert words[0] == "lost"
    late = float(words[1]) - resumed
    assert late < 5.0, f"learnt {late:.3f} s late"  # at once, not at its release


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_leader_frozen_during_a_renewal_learns_at_once(kind, newest, name):
    """The leader is stopped while its watchdog waits for a renewal's reply (the server holds
    the renewal back with ``CLIENT PAUSE WRITE`` until the leader is stopped). Resumed after its
    hold ran out, it reads "renewed": a reply from before the stop. Renewals count from when
    they were sent, so the next round is due at once (the round began more than an interval
    ago), not an interval after the late reply: it finds the hold gone."""
    # the watchdog renews every 3 s: "an interval after the late reply" (3 s) stays far from
    # "at once" on a loaded machine (1.5 s of room; a 3 s lease left 0.5 s)
    lease = 9.0
    worker = Worker(kind, newest.url, name, "frozen", lease=lease)
    raw = redis.Redis.from_url(newest.url, decode_responses=True)
    try:
        assert worker.next(30) == ["ready"]
        assert worker.next(30)[0] == "leading"
        raw.script_load(scripts.LOCK_RENEW.source)  # so that the renewal runs, not NOSCRIPT
        raw.execute_command("CLIENT", "PAUSE", int((lease + 10) * 1000), "WRITE")
        try:
            deadline = time.monotonic() + lease / 3 + 5
            while not any(
                "b" in c["flags"] and c["cmd"] == "evalsha" for c in raw.client_list()
            ):  # the next renewal, held back
                assert time.monotonic() < deadline, "no renewal came"
                time.sleep(0.005)
            worker.signal(signal.SIGSTOP)
        finally:
            raw.execute_command("CLIENT", "UNPAUSE")  # the renewal runs, its reply waits
        deadline = time.monotonic() + lease + 5
        while raw.exists(f"redlease:election:{{{name}}}"):  # until the hold runs out
            assert time.monotonic() < deadline, "the hold did not run out"
            time.sleep(0.01)
        resumed = time.monotonic()
        worker.signal(signal.SIGCONT)
        words = worker.next(10)
        assert words[0] == "lost"
        late = float(words[1]) - resumed
        assert late < lease / 3 / 2, f"learnt {late:.3f} s after it resumed"
    finally:
        worker.signal(signal.SIGCONT)
        worker.stop()
        raw.close()


FOREVER = 600.0
"""A watchdog lease whose first round (200 s) comes long after any bound of the tests below:
what tells the leader within them can only be the force release's message."""


async def _leader_listens(url: str, client: Any, election: Any) -> None:
    """Wait until the leader's client listens on its own channel of the election's lock (the
    subscription is made in the background once it leads)."""
    channel = LockKeys.for_name(election.lock_name).holder(f"{client.id}:1")
    raw = redis.Redis.from_url(url)
    try:
        await eventually(lambda: int(raw.pubsub_numsub(channel)[0][1]) > 0, timeout=10)
    finally:
        raw.close()


async def test_term_lost_at_once_when_force_released(side, newest, name):
    """``election.force_release()`` deposes the leader, and the leader hears it at once (its
    client is told on its own channel of the lock, not at a watchdog round 200 s away):
    ``term.lost`` is set, the error's cause is ``"forced"``."""
    client = side.client(newest.url, watchdog_timeout=FOREVER)
    a = client.election(name, identity="a")
    admin = side.client(newest.url).election(name)
    first = Candidate(side, a)
    assert await first.leads()
    await _leader_listens(newest.url, client, a)
    assert await side(admin.force_release())
    assert await _wait(first.term.lost, 20)
    assert first.term.error.cause == "forced"
    await first.resign()
    assert isinstance(first.error, redlease.LeaseLostError)
    assert first.error.cause == "forced"


async def test_cancel_on_loss_cancels_at_once_when_force_released(newest, name):
    """``cancel_on_loss=True``: a force release cancels the leader's block within about a
    round trip (told on its client's channel), not at the watchdog's round 200 s away."""
    async with (
        redlease.AsyncClient.from_url(newest.url, watchdog_timeout=FOREVER) as client,
        redlease.AsyncClient.from_url(newest.url) as admin,
    ):
        election = client.election(name)
        steps: list[str] = []

        async def lead() -> None:
            try:
                async with election.leadership(cancel_on_loss=True):
                    steps.append("leading")
                    await asyncio.sleep(FOREVER)  # cancelled when the leadership is lost
            except redlease.LeaseLostError as exc:
                steps.append(f"lost: {exc.cause}")

        task = asyncio.ensure_future(lead())
        await eventually(lambda: steps == ["leading"], timeout=10)
        await _leader_listens(newest.url, client, election)
        assert await admin.election(name).force_release()
        await asyncio.wait_for(task, 20)
        assert steps == ["leading", "lost: forced"]


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of this test's own (the newest binary found), to stop and start again."""
    with RedisServer(find_server()) as srv:
        yield srv


class Observer:
    """``observe()`` in a thread (sync) or a task (asyncio): the leaders seen, in order, and
    the error it ended with, if any."""

    def __init__(self, side: Any, election: Any, poll: float) -> None:
        self.seen: list[str | None] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        if side.is_async:
            self.stop: Any = asyncio.Event()
            self.task = asyncio.ensure_future(self._async(election, poll))
        else:
            self.stop = threading.Event()
            threading.Thread(target=self._sync, args=(election, poll), daemon=True).start()

    def _sync(self, election: Any, poll: float) -> None:
        try:
            for leader in election.observe(poll=poll, stop=self.stop):
                self.seen.append(leader)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    async def _async(self, election: Any, poll: float) -> None:
        try:
            async for leader in election.observe(poll=poll, stop=self.stop):
                self.seen.append(leader)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    async def saw(self, *leaders: str | None, timeout: float = 10.0) -> None:
        """Wait until the last leaders seen are ``leaders``."""
        n = len(leaders)
        await eventually(lambda: tuple(self.seen[-n:]) == leaders, timeout=timeout)


async def test_observe_rides_out_a_server_outage(side, own_server, name):
    """An observer (a dashboard, a follower waiting to campaign) keeps observing through a
    server restart, as a lock's waiters do: nothing is raised nor yielded while the server is
    down; once it is back (empty: the leader's term is lost with the data) the observer sees
    that nobody leads, then the next leader."""
    url = own_server.url
    observer = Observer(side, side.client(url).election(name), poll=0.2)
    await observer.saw(None)
    leader = Candidate(side, side.client(url, watchdog_timeout=L).election(name, identity="a"))
    assert await leader.leads()
    await observer.saw(None, "a")
    own_server.kill()
    down = time.monotonic()
    # several of the observer's reads fail meanwhile (one every 0.5 s at most)
    await eventually(lambda: time.monotonic() - down > 3, timeout=10)
    assert not observer.done.is_set(), observer.error
    assert observer.seen == [None, "a"]  # the leader is unknown: nothing yielded
    own_server.start()  # same port, data lost
    await observer.saw(None, timeout=OUTAGE + 10)
    assert observer.error is None
    follower = Candidate(side, side.client(url, watchdog_timeout=L).election(name, identity="b"))
    assert await follower.leads(timeout=10)
    await observer.saw(None, "b")
    assert await _wait(leader.term.lost, L + 5)
    observer.stop.set()
    assert await _wait(observer.done, 10)
    assert observer.error is None
    assert observer.seen == [None, "a", None, "b"]
    await follower.resign()
    await leader.resign()
    assert isinstance(leader.error, redlease.LeaseLostError)


async def test_observe_raises_once_the_outage_lasts(side, own_server, name):
    """A server that stays down: ``observe()`` raises ``ServerUnavailableError`` once it has
    ridden out ``OUTAGE`` seconds of it, not before."""
    observer = Observer(side, side.client(own_server.url).election(name), poll=0.2)
    await observer.saw(None)
    own_server.kill()
    down = time.monotonic()
    assert await _wait(observer.done, OUTAGE + 20)
    assert isinstance(observer.error, redlease.ServerUnavailableError), observer.error
    assert time.monotonic() - down >= OUTAGE - 1  # rode it out first
    assert observer.seen == [None]
