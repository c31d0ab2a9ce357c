"""Stateful adversarial test of the read-write lock on a real server, sync and asyncio.

Three owners, each a client over its own ``TcpProxy`` (``helpers.World``; two clients in one
client process and one in another, as far as the wait ids they mint go: ``helpers.Process``),
take and release read and write holds (blocking with a short timeout, or not; re-entrant)
while rules lose replies (the server ran the script, the client never hears), deliver a call
late on a frozen link, freeze a link, lose a renewal's reply, force-release a side and let a
short explicit lease run out. Every call of an owner is made by one thread (sync) or one task
(asyncio) of its own: the lock is owned per thread or task.

A fault leaves the owner's hold on that side *unsettled* (the client may not know what the
server has: an unknown outcome, a hold taken away) until the owner's next call on that side
that reaches the server, which must settle it. After every step, against the server:

- (a) never a writer together with any other holder (the writer's own reads aside), on the
  server, nor among the holds the owners believe they have (settled ones);
- (b) an owner's local hold count of each side equals the server's, once settled;
- (c) no writer's place in line outlives the call that waited;
- (d) a lease is reported lost (``on_lease_lost``, ``LeaseLostError`` at release) only when
  the hold was really taken away (force-released, or an explicit lease ran out).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
)

from redlease import LeaseLostError, NotOwnedError, ServerUnavailableError
from redlease._core import rwlock as core
from redlease._core.requests import Call
from redlease.errors import LockUpgradeError
from redlease.testing import RedisServer

from .conftest import DEFAULT, SLOW
from .helpers import CALL_TIMEOUT, Actor, Process, World, run_machine, unique_name, wait_until

OWNERS = 3
owners = st.integers(0, OWNERS - 1)
sides = st.sampled_from(core.SIDES)
delays = st.floats(0.02, 0.15)
picks = st.integers(0, 5)
WATCHDOG = 1.5
"""The clients' watchdog timeout: renewed every 0.5 s, far more often than a freeze lasts."""
SHORT = 0.25
"""Seconds of an explicit lease that a rule lets run out."""
WAIT = 0.15
"""The timeout of a blocking acquire."""


class RwMachine(RuleBasedStateMachine):
    """Owners of one read-write lock under faults; see the module's docstring."""

    def __init__(self, server: RedisServer, is_async: bool) -> None:
        super().__init__()
        self.world = World(server, OWNERS, is_async=is_async, watchdog_timeout=WATCHDOG)
        for script in core.SCRIPTS:  # a dropped reply is then always the script's own
            self.world.raw.script_load(script.source)
        self.name = unique_name("stateful-rw")
        self.keys = core.RwKeys.for_name(self.name)
        processes = [Process(), Process()]  # owners 0 and 1 share one, 2 has the other
        self.actors = [Actor(self.world.loop, processes[o // 2]) for o in range(OWNERS)]
        self.rws = [
            o.client.rw_lock(self.name, on_lease_lost=self._reporter(i))
            for i, o in enumerate(self.world.owners)
        ]
        pairs = zip(self.actors, self.world.owners, strict=True)
        self.fields = [a.run(o.client._owner) for a, o in pairs]
        self.unsettled: set[tuple[int, str]] = set()
        """(owner, side) whose local count may differ from the server's until its next call."""
        self.taken: set[tuple[int, str]] = set()
        """(owner, side) whose hold was taken away: it may be reported lost."""
        self.reported: list[tuple[int, str]] = []

    # --- helpers ------------------------------------------------------------------------------

    def _reporter(self, o: int) -> Callable[[LeaseLostError], None]:
        def report(error: LeaseLostError) -> None:
            side = core.WRITE if str(error.name).endswith("(write)") else core.READ
            self.reported.append((o, side))

        return report

    def lock(self, o: int, side: str) -> Any:
        return self.rws[o].write_lock() if side == core.WRITE else self.rws[o].read_lock()

    def local(self, o: int, side: str) -> int:
        client = self.world.owners[o].client
        return int(client._state.count(self.keys.label(side), self.fields[o]))

    def server(self) -> core.RwStatus:
        call = next(core.status(self.keys, "nobody"))
        assert isinstance(call, Call)
        return core.parse_status(
            self.world.raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        )

    def server_count(self, status: core.RwStatus, o: int, side: str) -> int:
        if side == core.WRITE:
            return status.write_count if status.writer == self.fields[o] else 0
        return status.readers.get(self.fields[o], 0)

    def settled(self, o: int, side: str) -> None:
        """The owner's call on ``side`` reached the server: its count is known again."""
        self.unsurely(o, side, False)

    def unsurely(self, o: int, side: str, unsure: bool = True) -> None:
        if unsure:
            self.unsettled.add((o, side))
        else:
            self.unsettled.discard((o, side))

    def upgrade(self, o: int, side: str) -> bool:
        """Whether the server must refuse this acquire as an upgrade: a first write hold of an
        owner that reads there (whatever its local counts say)."""
        status = self.server()
        return (
            side == core.WRITE
            and not self.server_count(status, o, core.WRITE)
            and self.server_count(status, o, core.READ) > 0
        )

    def outcome(self, o: int, side: str, upgrade: bool, call: Callable[[], Any]) -> Any:
        """The result of an acquire ``call()`` (run by the owner), or ``LockUpgradeError``;
        the server decides an upgrade, which no local count may change."""
        try:
            got = call()
        except LockUpgradeError:
            assert upgrade, "LockUpgradeError, but the owner holds no read hold"
            return LockUpgradeError
        # (an unsettled read hold may have run out meanwhile)
        assert not upgrade or (o, core.READ) in self.unsettled, "an upgrade was not refused"
        self.settled(o, side)
        if got:
            assert self.local(o, side) >= 1
        return got

    def acquire(self, o: int, side: str, blocking: bool, **kwargs: Any) -> Any:
        """One acquire by owner ``o``; returns its result, or ``LockUpgradeError``."""
        lock = self.lock(o, side)
        kwargs = kwargs if blocking else {**kwargs, "blocking": False}
        upgrade = self.upgrade(o, side)
        return self.outcome(
            o, side, upgrade, lambda: self.actors[o].run(lambda: lock.acquire(**kwargs))
        )

    # --- rules: calls -------------------------------------------------------------------------

    @rule(o=owners, side=sides, blocking=st.booleans())
    def take(self, o: int, side: str, blocking: bool) -> None:
        self.acquire(o, side, blocking, timeout=WAIT) if blocking else self.acquire(o, side, False)

    def pick(self, k: int, *, settled: bool = False) -> tuple[int, str] | None:
        """The ``k``-th hold (modulo) of those the owners have on record (``settled``: only
        settled ones), or ``None``. Rules draw ``k`` whatever the state, so that a replay
        draws the same data even when a background thread changed the state."""
        held = [
            (o, s)
            for o in range(OWNERS)
            for s in core.SIDES
            if self.local(o, s) and not (settled and (o, s) in self.unsettled)
        ]
        return held[k % len(held)] if held else None

    @rule(k=picks)
    def reenter(self, k: int) -> None:
        if (held := self.pick(k)) is None:
            return
        o, side = held
        before = self.local(o, side)
        unsettled = (o, side) in self.unsettled
        assert self.acquire(o, side, False) or unsettled, "a re-entry was refused"
        if not unsettled:
            assert self.local(o, side) == before + 1

    @rule(k=picks, delay=st.one_of(st.none(), delays))
    def release(self, k: int, delay: float | None) -> None:
        if (held := self.pick(k)) is None:
            return
        o, side = held
        lock, owner = self.lock(o, side), self.world.owners[o]
        try:
            if delay is None:
                self.actors[o].run(lock.release)
            else:  # delivered late, both ways
                owner.proxy.freeze()
                try:
                    future = self.actors[o].start(lock.release)
                    time.sleep(delay)  # the fault itself: a bounded delay
                finally:
                    owner.proxy.thaw()
                future.result(CALL_TIMEOUT)
        except LeaseLostError:
            assert (o, side) in self.taken, "a release reported a hold lost that was not"
        except NotOwnedError:  # the watchdog dropped it meanwhile (taken away)
            assert (o, side) in self.taken, "a hold on record could not be released"
        self.settled(o, side)

    @rule(o=owners, side=sides, delay=delays)
    def take_late(self, o: int, side: str, delay: float) -> None:
        """A non-blocking acquire delivered late (both ways) on a frozen link."""
        lock, owner = self.lock(o, side), self.world.owners[o]
        upgrade = self.upgrade(o, side)
        owner.proxy.freeze()
        try:
            future = self.actors[o].start(lambda: lock.acquire(blocking=False))
            time.sleep(delay)  # the fault itself: a bounded delay
        finally:
            owner.proxy.thaw()
        self.outcome(o, side, upgrade, lambda: future.result(CALL_TIMEOUT))

    # --- rules: faults ------------------------------------------------------------------------

    @rule(o=owners, side=sides, every=st.booleans(), blocking=st.booleans())
    def take_replies_lost(self, o: int, side: str, every: bool, blocking: bool) -> None:
        """One reply lost: the retry is recognised and counts once. Every reply lost: the
        call raises and its outcome is unknown (a blocking one may ride it out)."""
        script = core.RW_READ_ACQUIRE if side == core.READ else core.RW_WRITE_ACQUIRE
        self.world.owners[o].lose_replies(script, 2 if every else 1)
        try:
            self.acquire(o, side, blocking, timeout=WAIT) if blocking else self.acquire(
                o, side, False
            )
        except ServerUnavailableError:
            assert every, "one lost reply made the call fail"
            self.unsurely(o, side)

    @rule(k=picks)
    def release_replies_lost(self, k: int) -> None:
        """The release ran, the caller cannot know: settled by the owner's next call. (Only
        a settled hold: the release surely sends the script whose replies are dropped.)"""
        if (held := self.pick(k, settled=True)) is None:
            return
        o, side = held
        script = core.RW_READ_RELEASE if side == core.READ else core.RW_WRITE_RELEASE
        self.world.owners[o].lose_replies(script)
        try:
            self.actors[o].run(self.lock(o, side).release)
        except ServerUnavailableError:
            self.unsurely(o, side)
        else:
            raise AssertionError("every reply was lost, yet it returned")

    @rule(o=owners, delay=delays)
    def freeze(self, o: int, delay: float) -> None:
        self.world.owners[o].freeze_for(delay)

    @rule(k=picks)
    def renewal_reply_lost(self, k: int) -> None:
        """A renewal ran but its reply was lost: nothing may be reported lost for it."""
        if (held := self.pick(k, settled=True)) is None:
            return
        o = held[0]
        event = self.world.owners[o].proxy.drop_next_reply(core.RW_RENEW.sha.encode())
        event.wait(3 * WATCHDOG)  # bounded: a watched hold is renewed every 0.5 s

    @rule(side=sides)
    def force_release(self, side: str) -> None:
        status = self.server()
        for o in range(OWNERS):
            if self.server_count(status, o, side) or self.local(o, side):
                self.taken.add((o, side))
                self.unsurely(o, side)
        call = next(core.force_release(self.keys, side))
        assert isinstance(call, Call)
        self.world.raw.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)

    @rule(o=owners, side=sides)
    def short_lease_runs_out(self, o: int, side: str) -> None:
        """``acquire(lease=...)`` and no release: when the lease ran out the hold is gone
        (not lost), and the owner's next acquire takes the side afresh."""
        if self.local(o, side) or (o, side) in self.unsettled:
            return  # a re-entry joins a hold the watchdog renews
        if self.acquire(o, side, False, lease=SHORT) is not True:
            return
        self.taken.add((o, side))
        self.unsurely(o, side)
        wait_until(lambda: not self.server_count(self.server(), o, side), 5)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def one_writer_alone(self) -> None:
        """(a) on the server and among the holds the owners believe they have."""
        status = self.server()
        if status.writer is not None:
            assert set(status.readers) <= {status.writer}, status
        believed = {
            side: {
                o for o in range(OWNERS) if self.local(o, side) and (o, side) not in self.unsettled
            }
            for side in core.SIDES
        }
        writers, readers = believed[core.WRITE], believed[core.READ]
        assert len(writers) <= 1, believed
        assert not writers or readers <= writers, believed

    @invariant()
    def local_counts_match_the_server(self) -> None:
        """(b) once settled; and (c) no place in line is left behind."""
        status = self.server()
        for o in range(OWNERS):
            for side in core.SIDES:
                if (o, side) not in self.unsettled:
                    assert self.local(o, side) == self.server_count(status, o, side), (
                        o,
                        side,
                        status,
                    )
        assert status.waiters == 0, "a writer's place in line outlived its wait"

    @invariant()
    def lost_only_when_taken(self) -> None:
        """(d) a loss is reported only for a hold that was taken away."""
        for report in self.reported:
            assert report in self.taken, report

    def teardown(self) -> None:
        try:
            for actor in self.actors:
                actor.stop()
        finally:
            self.world.close()


# --- the tests ------------------------------------------------------------------------------


def test_rwlock(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: RwMachine(stateful_server, is_async), DEFAULT)


@pytest.mark.slow
def test_rwlock_long(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: RwMachine(stateful_server, is_async), SLOW)
