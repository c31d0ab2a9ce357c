"""Stateful adversarial test of the count-down latch on a real server.

Three owners, each a client over its own ``TcpProxy``, arm the latch, count it down, check it
and wait on it (in the background) while rules lose replies, delay a call on a frozen link,
freeze a link for a moment or cut every connection of an owner (its subscriber's too). After
every step, against the server:

- (c) the count never goes below 0 and is what the model says (a count-down whose replies
  were lost has an unknown outcome: resolved from the server, it counted at most once);
- every waiter is released once the count is 0 (within a re-check interval, even when its
  wake-up message was lost), and none is released while it is above 0.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from redlease import ServerUnavailableError
from redlease._core import latch as core
from redlease._core.lock import RECHECK
from redlease.testing import RedisServer

from .conftest import DEFAULT, SLOW
from .helpers import World, results, run_machine, unique_name, wait_until

OWNERS = 3
owners = st.integers(0, OWNERS - 1)
delays = st.floats(0.02, 0.1)
RELEASED_WITHIN = RECHECK + 5.0
"""A waiter whose wake-up was lost re-checks within ``RECHECK``; plus slack for a busy box."""


class LatchMachine(RuleBasedStateMachine):
    def __init__(self, server: RedisServer, is_async: bool) -> None:
        super().__init__()
        self.world = World(server, OWNERS, is_async=is_async)
        self.name = unique_name("stateful-latch")
        self.latches = [o.client.latch(self.name) for o in self.world.owners]
        self.count = 0
        self.waiters: list[concurrent.futures.Future[Any]] = []

    def _owner(self, o: int) -> Any:
        return self.world.owners[o]

    @rule(o=owners, count=st.integers(1, 4))
    def try_set_count(self, o: int, count: int) -> None:
        done = self._owner(o).run(lambda: self.latches[o].try_set_count(count))
        assert done == (self.count == 0)
        if done:
            self.count = count

    @rule(o=owners, lost=st.integers(0, 2), delay=st.one_of(st.none(), delays))
    def count_down(self, o: int, lost: int, delay: float | None) -> None:
        """Count down; its replies lost (1: the retry is recognised, counted once; 2: the
        outcome is unknown) or delayed."""
        owner, latch = self._owner(o), self.latches[o]
        owner.lose_replies(core.LATCH_COUNT_DOWN, lost)
        try:
            if delay is None:
                owner.run(latch.count_down)
            else:
                owner.frozen(latch.count_down, delay)
        except ServerUnavailableError:
            assert lost, "nothing was lost"  # 1: its pooled connection had been cut before
            now = self._server_count()
            assert now in (self.count, max(0, self.count - 1)), (now, self.count)
            self.count = now
            return
        assert lost < 2, "every reply was lost, yet it returned"
        self.count = max(0, self.count - 1)

    @rule(o=owners)
    def check(self, o: int) -> None:
        owner, latch = self._owner(o), self.latches[o]
        assert owner.run(lambda: latch.wait(timeout=0)) == (self.count == 0)
        assert owner.run(latch.count) == self.count

    @precondition(lambda self: len(self.waiters) < 6)
    @rule(o=owners)
    def start_waiter(self, o: int) -> None:
        """A waiter in the background; once it listens, it rides out cuts and freezes."""
        owner, latch = self._owner(o), self.latches[o]
        waiter = owner.start(lambda: latch.wait(timeout=60))
        wait_until(lambda: waiter.done() or owner.waiting(latch._keys.channel))
        self.waiters.append(waiter)

    @rule(o=owners, delay=delays)
    def freeze(self, o: int, delay: float) -> None:
        self._owner(o).freeze_for(delay)

    @rule(o=owners)
    def cut(self, o: int) -> None:
        self._owner(o).cut(self.latches[o].count)

    def _server_count(self) -> int:
        value = self.world.raw.get(self.name)
        return 0 if value is None else int(value)

    @invariant()
    def count_matches_and_never_below_zero(self) -> None:
        value = self.world.raw.get(self.name)
        assert value is None or int(value) > 0, f"a latch key at {value!r}"
        assert self._server_count() == self.count

    @invariant()
    def waiters_released_at_zero_only(self) -> None:
        if self.count == 0:
            assert all(results(self.waiters, RELEASED_WITHIN))
            self.waiters.clear()
        else:
            assert not any(w.done() for w in self.waiters), "a waiter left a closed latch"

    def teardown(self) -> None:
        try:
            if self.waiters:  # open the latch: every waiter must then return True
                for _ in range(self.count):
                    self._owner(0).run(self.latches[0].count_down)
                assert all(results(self.waiters, RELEASED_WITHIN))
        finally:
            self.world.close()


def test_latch(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: LatchMachine(stateful_server, is_async), DEFAULT)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_latch_long(stateful_server: RedisServer, is_async: bool) -> None:
    run_machine(lambda: LatchMachine(stateful_server, is_async), SLOW)
