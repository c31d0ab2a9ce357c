"""Stateful adversarial tests of the semaphore and the lease semaphore on a real server.

Three owners, each a client over its own ``TcpProxy``, take and give back permits while rules
lose replies (the server ran the script, the client never hears), delay a call on a frozen
link, freeze a link for a moment or cut every connection of an owner. A call whose replies
were lost raises ``ServerUnavailableError``; the model then holds its outcome as unknown and
resolves it from the server or by the next call. After every step, against the server:

- (a) no permit is lost for good: free permits + permits held (as the owners know them) ==
  capacity, once the clients' pending undos are sent and unknown outcomes resolved;
- (b) a permit is reported lost (``on_lease_lost``, ``LeaseLostError``) only when it really is
  gone from the server, and a permit whose release ran is never reported lost.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from integration.helpers import reply_bytes, reply_int

from redlease import LeaseLostError, ServerUnavailableError
from redlease._core import lease_semaphore as lease_core
from redlease._core import semaphore as core
from redlease._core.keys import LeaseSemaphoreKeys, SemaphoreKeys
from redlease.testing import RedisServer

from .conftest import DEFAULT, SLOW
from .helpers import World, run_machine, unique_name, wait_until

OWNERS = 3
owners = st.integers(0, OWNERS - 1)
delays = st.floats(0.02, 0.1)
sometimes = st.sampled_from([False, False, True])
"""For faults whose resolution waits for a watchdog round: drawn a third of the time."""


# --- the counting semaphore -----------------------------------------------------------------


class SemaphoreMachine(RuleBasedStateMachine):
    """Permits of a counting semaphore: nothing counted twice, nothing lost for good."""

    CAPACITY = 4

    def __init__(self, server: RedisServer, is_async: bool) -> None:
        super().__init__()
        self.world = World(server, OWNERS, is_async=is_async, watchdog_timeout=0.6)
        self.name = unique_name("stateful-sem")
        self.keys = SemaphoreKeys.for_name(self.name)
        self.sems = [o.client.semaphore(self.name) for o in self.world.owners]
        self.raised: list[Any] = []  # semaphore_total_raised events: none without data loss
        for o in self.world.owners:
            o.client.add_listener(
                lambda e: self.raised.append(e) if e.kind == "semaphore_total_raised" else None
            )
        assert self.world.owners[0].run(lambda: self.sems[0].try_set_permits(self.CAPACITY))
        self.held = [0] * OWNERS
        self.unsure: tuple[int, int] | None = None  # (owner, permits) of a release unknown

    def free(self) -> int:
        return self.CAPACITY - sum(self.held)

    def _took(self, o: int, permits: int, granted: bool) -> None:
        assert granted == (self.free() >= permits), (granted, self.free(), permits)
        if granted:
            self.held[o] += permits

    @rule(o=owners, permits=st.integers(1, 3))
    def acquire(self, o: int, permits: int) -> None:
        owner, sem = self.world.owners[o], self.sems[o]
        self._took(o, permits, owner.run(lambda: sem.acquire(permits, timeout=0)))

    @rule(o=owners, permits=st.integers(1, 3))
    def acquire_one_reply_lost(self, o: int, permits: int) -> None:
        """The first reply is lost, the retry (same request id) answers: counted once. (If
        the client's pooled connection was cut before, that stale connection costs the call
        its retry: it raises, and holds nothing.)"""
        owner, sem = self.world.owners[o], self.sems[o]
        owner.lose_replies(core.SEMAPHORE_ACQUIRE, 1)
        try:
            granted = owner.run(lambda: sem.acquire(permits, timeout=0))
        except ServerUnavailableError:
            return
        self._took(o, permits, granted)

    @rule(o=owners, permits=st.integers(1, 3), undo_lost=sometimes)
    def acquire_replies_lost(self, o: int, permits: int, undo_lost: bool) -> None:
        """Every reply lost (maybe the undo's too): the call raises and holds nothing; its
        permits, if it took any, come back (at once, or by the watchdog's retry)."""
        owner, sem = self.world.owners[o], self.sems[o]
        owner.lose_replies(core.SEMAPHORE_ACQUIRE)
        if undo_lost:
            owner.lose_replies(core.SEMAPHORE_UNDO)
        with pytest.raises(ServerUnavailableError):
            owner.run(lambda: sem.acquire(permits, timeout=0))

    @rule(o=owners, permits=st.integers(1, 3), delay=delays)
    def acquire_delayed(self, o: int, permits: int, delay: float) -> None:
        owner, sem = self.world.owners[o], self.sems[o]
        self._took(o, permits, owner.frozen(lambda: sem.acquire(permits, timeout=0), delay))

    @precondition(lambda self: any(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        o = data.draw(st.sampled_from([i for i in range(OWNERS) if self.held[i]]))
        permits = data.draw(st.integers(1, self.held[o]))
        self.world.owners[o].run(lambda: self.sems[o].release(permits))
        self.held[o] -= permits

    @precondition(lambda self: any(self.held))
    @rule(data=st.data())
    def release_replies_lost(self, data: st.DataObject) -> None:
        """The release ran but the caller cannot know: resolved from the server below."""
        o = data.draw(st.sampled_from([i for i in range(OWNERS) if self.held[i]]))
        permits = data.draw(st.integers(1, self.held[o]))
        owner = self.world.owners[o]
        owner.lose_replies(core.SEMAPHORE_RELEASE)
        with pytest.raises(ServerUnavailableError):
            owner.run(lambda: self.sems[o].release(permits))
        self.unsure = (o, permits)
        self._resolve()

    @precondition(lambda self: any(self.held))
    @rule(data=st.data())
    def waiter_woken_by_a_release(self, data: st.DataObject) -> None:
        """A blocking acquire that cannot be served now is served by another owner's release
        (its pub/sub wake-up, or its own re-check if that message was lost)."""
        giver = data.draw(st.sampled_from([i for i in range(OWNERS) if self.held[i]]))
        o = data.draw(st.sampled_from([i for i in range(OWNERS) if i != giver]))
        permits = self.free() + 1
        owner, sem = self.world.owners[o], self.sems[o]
        waiter = owner.start(lambda: sem.acquire(permits, timeout=20))
        wait_until(lambda: owner.waiting(self.keys.channel))
        self.world.owners[giver].run(lambda: self.sems[giver].release(1))
        self.held[giver] -= 1
        assert waiter.result(20) is True
        self.held[o] += permits

    @rule(o=owners, delay=delays)
    def freeze(self, o: int, delay: float) -> None:
        self.world.owners[o].freeze_for(delay)

    @rule(o=owners)
    def cut(self, o: int) -> None:
        self.world.owners[o].cut(self.sems[o].available)

    def _resolve(self) -> None:
        """An unknown release: it ran iff the server has its permits back."""
        assert self.unsure is not None
        o, permits = self.unsure
        self.unsure = None
        free = reply_int(self.world.raw.get(self.name))
        if free == self.free() + permits:
            self.held[o] -= permits
        else:
            assert free == self.free(), (free, self.held, permits)

    @invariant()
    def no_permit_lost_for_good(self) -> None:
        self.world.settle()
        assert reply_int(self.world.raw.get(self.name)) == self.free()
        assert reply_int(self.world.raw.get(self.keys.total)) == self.CAPACITY
        assert self.raised == [], "a release reported past the total, with no data lost"

    def teardown(self) -> None:
        self.world.close()


# --- the lease semaphore --------------------------------------------------------------------


class LeaseSemaphoreMachine(RuleBasedStateMachine):
    """Permits with ids and leases: renewed while held, reported lost only when gone, and a
    retried release recognised as the same release."""

    CAPACITY = 3
    SHORT = 0.4
    """Seconds of an explicit lease that the test lets run out."""
    MARGIN = 0.15
    """Seconds around a short lease's end where either outcome of a release is right."""

    def __init__(self, server: RedisServer, is_async: bool) -> None:
        super().__init__()
        self.world = World(server, OWNERS, is_async=is_async, watchdog_timeout=1.2)
        self.name = unique_name("stateful-lsem")
        self.keys = LeaseSemaphoreKeys.for_name(self.name)
        self.lost: list[list[str]] = [[] for _ in range(OWNERS)]
        self.sems = [
            o.client.lease_semaphore(self.name, on_lease_lost=self._reporter(i))
            for i, o in enumerate(self.world.owners)
        ]
        assert self.world.owners[0].run(lambda: self.sems[0].try_set_permits(self.CAPACITY))
        self.held: dict[str, int] = {}  # renewed permit -> owner
        self.short: dict[str, tuple[int, float, float]] = {}  # permit -> (owner, ends between)
        self.unsure: dict[str, int] = {}  # permit whose release's outcome is unknown -> owner
        self.released: set[str] = set()  # renewed permits given back (never to be reported)

    def _reporter(self, o: int) -> Any:
        def report(error: LeaseLostError) -> None:
            self.lost[o].append(str(error.owner))

        return report

    def _taken(self, before: float, after: float) -> tuple[int, int]:
        """Permits surely taken throughout a call made between ``before`` and ``after``, and
        permits that may have been taken then (a release of unknown outcome may have run; a
        short lease near its end may be over or not)."""
        short = self.short.values()
        surely = len(self.held) + sum(1 for _, early, _ in short if early > after + self.MARGIN)
        maybe = len(self.held) + len(self.unsure)
        maybe += sum(1 for _, _, late in short if late + self.MARGIN > before)
        return surely, maybe

    @rule(o=owners, short=st.booleans())
    def acquire(self, o: int, short: bool) -> None:
        owner, sem = self.world.owners[o], self.sems[o]
        lease = self.SHORT if short else None
        before = time.monotonic()
        permit = owner.run(lambda: sem.acquire(timeout=0, lease=lease))
        after = time.monotonic()
        surely, maybe = self._taken(before, after)
        if permit is None:
            assert maybe >= self.CAPACITY, "no permit given although one was free"
            return
        assert surely < self.CAPACITY, "a permit given although none was free"
        assert permit not in self.held and permit not in self.short
        if lease is None:
            self.held[permit] = o
        else:
            self.short[permit] = (o, before + lease, after + lease)

    @rule(o=owners, give_back_lost=sometimes)
    def acquire_replies_lost(self, o: int, give_back_lost: bool) -> None:
        """Every reply lost: the call raises and holds nothing; a permit it took comes back
        at once (or by the watchdog's retry), not when its lease runs out."""
        owner, sem = self.world.owners[o], self.sems[o]
        owner.lose_replies(lease_core.LEASE_SEMAPHORE_ACQUIRE)
        if give_back_lost:
            owner.lose_replies(lease_core.LEASE_SEMAPHORE_RELEASE)
        with pytest.raises(ServerUnavailableError):
            owner.run(lambda: sem.acquire(timeout=0))

    @precondition(lambda self: self.held)
    @rule(
        data=st.data(),
        lost=st.integers(0, 2),
        delay=st.one_of(st.none(), delays),
        retry_now=st.booleans(),
    )
    def release(self, data: st.DataObject, lost: int, delay: float | None, retry_now: bool) -> None:
        """Release a renewed permit: its replies lost (2: outcome unknown; maybe retried at
        once, else later by ``retry_release``), or delayed."""
        permit = data.draw(st.sampled_from(sorted(self.held)))
        o = self.held.pop(permit)
        owner, sem = self.world.owners[o], self.sems[o]
        owner.lose_replies(lease_core.LEASE_SEMAPHORE_RELEASE, lost)
        try:
            if delay is not None:
                owner.frozen(lambda: sem.release(permit), delay)
            else:
                owner.run(lambda: sem.release(permit))
        except ServerUnavailableError:
            assert lost, "nothing was lost"  # 1: its connection had been cut before
            self.unsure[permit] = o
            if retry_now:
                self._retry(permit)
            return
        assert lost < 2, "every reply was lost, yet it returned"
        self.released.add(permit)

    @precondition(lambda self: self.unsure)
    @rule(data=st.data())
    def retry_release(self, data: st.DataObject) -> None:
        """The retry of a release whose outcome was unknown: recognised, no LeaseLostError."""
        self._retry(data.draw(st.sampled_from(sorted(self.unsure))))

    def _retry(self, permit: str) -> None:
        o = self.unsure.pop(permit)
        self.world.owners[o].run(lambda: self.sems[o].release(permit))
        self.released.add(permit)

    @precondition(lambda self: self.short)
    @rule(data=st.data())
    def release_short(self, data: st.DataObject) -> None:
        """A permit under an explicit lease: released while its lease lasts, LeaseLostError
        once it surely ended (near the end, either)."""
        permit = data.draw(st.sampled_from(sorted(self.short)))
        o, early, late = self.short.pop(permit)
        before = time.monotonic()
        try:
            self.world.owners[o].run(lambda: self.sems[o].release(permit))
        except LeaseLostError:
            assert time.monotonic() >= early - self.MARGIN, "reported lost before its lease end"
        else:
            assert before <= late + self.MARGIN, "released although its lease had ended"

    @rule(o=owners, delay=delays)
    def freeze(self, o: int, delay: float) -> None:
        self.world.owners[o].freeze_for(delay)

    @rule(o=owners)
    def cut(self, o: int) -> None:
        self.world.owners[o].cut(self.sems[o].available)

    @invariant()
    def no_permit_lost_for_good(self) -> None:
        """Every permit taken on the server is one an owner knows of (held, being released,
        or under a short lease), and free + taken == capacity."""
        self.world.settle()
        raw = self.world.raw
        taken = {reply_bytes(m).hex() for m in raw.zrange(self.keys.leases, 0, -1)}
        assert reply_int(raw.get(self.name)) + len(taken) == self.CAPACITY
        assert taken <= set(self.held) | set(self.unsure) | set(self.short), "a stray permit"

    @invariant()
    def lost_only_when_gone(self) -> None:
        """Held permits are alive on the server; a permit reported lost is really gone."""
        raw, now = self.world.raw, self.world.server_ms()
        for permit in self.held:
            score = raw.zscore(self.keys.leases, bytes.fromhex(permit))
            assert score is not None and score > now, f"held permit {permit} is gone"
        for reports in self.lost:
            for permit in reports:
                assert permit not in self.held and permit not in self.unsure, permit
                assert permit not in self.released, f"{permit} was released, reported lost"
                score = raw.zscore(self.keys.leases, bytes.fromhex(permit))
                assert score is None or score <= now, f"{permit} reported lost but alive"

    def teardown(self) -> None:
        self.world.close()


# --- the tests ------------------------------------------------------------------------------


def test_semaphore(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: SemaphoreMachine(stateful_server, is_async), DEFAULT)


def test_lease_semaphore(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: LeaseSemaphoreMachine(stateful_server, is_async), DEFAULT)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_semaphore_long(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: SemaphoreMachine(stateful_server, is_async), SLOW)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_lease_semaphore_long(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: LeaseSemaphoreMachine(stateful_server, is_async), SLOW)
