"""The lock machine of ``test_lock_stateful.py`` with the server's data lost (Hypothesis
stateful tests on real servers, sync and asyncio).

The lock lives on a master with a replica fed through a ``TcpProxy`` (``helpers.Replicated``).
On top of the lock machine's rules (tries, waits, re-entry, releases, lost replies), a rule
loses data: either a failover (the master killed, the replica promoted, every owner's links
moved to it and cut) or a restart of the master with no data. A failover goes to the replica
as it was some changes ago: the lock's keys are ``DUMP``ed after every step that changed them,
and the chosen moment's keys are ``RESTORE``d on the promoted replica, with the expiry times
they had, before any client reaches it (a replica that stopped replicating then; 0 changes
ago: the replica as it is, in sync or nearly). Another rule has an owner that the server has a
hold of, while it knows of none (a hold the loss brought back, or a grant it never heard of),
try the lock. The lock machine's rules for late wake-ups, forced releases and leases left to
run out stay there: here they would only thin out the runs that lose data. The tests at the
end go through the cases of issue #23 step by step, with replication really stalled.

Owners live in two client processes as far as ids go (``helpers.Process``): wait ids and
release ids are minted by the library's own code as two processes mint them.

After a loss of data the invariants are those of issue #23:

- I5 no fencing token is ever handed out twice, across the loss (the servers' clock does not
  step back here);
- I6 (in the release rules) an owner whose hold went with the data is told so
  (``LeaseLostError``, or ``NotOwnedError`` after ``on_lease_lost``), never that its release
  succeeded;
- I1 no two owners believe they hold the lock at once outside data loss: only the holds that
  went with the data are left out (until their owners hear of it), and the server agrees with
  every other believer;
- I2-I4 as in the lock machine, leaving out only what the loss brought back from the past (a
  hold the stale copy still has of an owner that released it since, or handed over to such a
  place, places in line of waits that ended since, counts of re-entries the copy missed: each
  stays until its lease ends, I3 checks it has one); a loss of lease may be reported to an
  owner that held, waited or had an unknown outcome when the data was lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import redis
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from integration.helpers import reply_str_hash, reply_strs

import redlease
from redlease._core import fair as fair_core
from redlease._core import scripts
from redlease.testing import RedisServer

from .conftest import FAILOVER, SLOW
from .helpers import Replicated, wait_until
from .test_lock_stateful import LEASE, OWNERS, LockMachine, LockOwner

pytestmark = [pytest.mark.timeout(600)]

FENCE = "redlease:fence"
WAIT = "redlease:wait"
HISTORY = 12
"""How many changes back a failover may go."""


@dataclass(frozen=True)
class Snapshot:
    """The keys of one lock name on a server at one moment: each key's ``DUMP`` and when it
    expires (by the test's clock; ``None``: never)."""

    name: str
    keys: dict[str, tuple[bytes, float | None]]

    @classmethod
    def take(cls, raw: redis.Redis, name: str) -> Snapshot:
        """``raw``: a client that does not decode replies (dumps are binary)."""
        names = sorted({k.decode() for k in raw.scan_iter(match=f"*{name}*", count=1000)})
        pipe = raw.pipeline(transaction=True)
        for key in names:
            pipe.dump(key)
            pipe.pttl(key)
        replies = pipe.execute() if names else []
        now = time.monotonic()
        keys: dict[str, tuple[bytes, float | None]] = {}
        for key, dumped, ttl in zip(names, replies[::2], replies[1::2], strict=True):
            if dumped is not None and ttl != -2:
                keys[key] = (dumped, None if ttl == -1 else now + ttl / 1000)
        return cls(name, keys)

    def same_data(self, other: Snapshot) -> bool:
        return {k: v[0] for k, v in self.keys.items()} == {k: v[0] for k, v in other.keys.items()}

    def restore(self, server: RedisServer) -> None:
        """Make the lock's keys on ``server`` what they were then: those that have expired
        since are gone, the others expire when they would have (a replica keeps each key's
        expiry time)."""
        raw = redis.Redis.from_url(server.url)
        try:
            now_there = [k.decode() for k in raw.scan_iter(match=f"*{self.name}*", count=1000)]
            pipe = raw.pipeline(transaction=True)
            for key in {*now_there, *self.keys}:
                pipe.delete(key)
            now = time.monotonic()
            for key, (dumped, expires) in self.keys.items():
                if expires is None:
                    pipe.restore(key, 0, dumped, replace=True)
                elif expires > now + 0.001:
                    pipe.restore(key, max(1, int((expires - now) * 1000)), dumped, replace=True)
            pipe.execute()
        finally:
            raw.close()


class FailoverLockMachine(LockMachine):
    topology: Replicated

    def __init__(self) -> None:
        if self.topology.stalled:  # each run starts with the replica in sync
            self.topology.heal()
        self.server = self.topology.master
        super().__init__()
        self.dumps = redis.Redis.from_url(self.server.url)
        """Reads the server's keys as they are (binary), for ``history``."""
        self.history: list[Snapshot] = []
        """The lock's keys after each step that changed them (and at the start), for
        failovers to a replica that stopped replicating then."""
        self.brought_back: set[int] = set()
        """Fencing tokens of holds that a loss of data brought back from the past."""
        self.stale_waits: set[str] = set()
        """Wait ids of places in line that a loss of data brought back."""
        self.straddling: set[int] = set()
        """Owners whose wait was under way at a loss, its grant not classified yet."""

    # --- data loss ----------------------------------------------------------------------------

    @rule(restart=st.booleans(), back=st.integers(0, HISTORY))
    def lose_data(self, restart: bool, back: int) -> None:
        """A failover (``fail_over``) or a restart with no data (``restart_empty``): one rule,
        so that a run that draws it draws both."""
        if restart:
            self.restart_empty()
        else:
            self.fail_over(back)

    def fail_over(self, back: int) -> None:
        """The master dies; its replica takes over, with the lock's keys as they were
        ``back`` changes ago (0: as replicated, all of it or nearly)."""
        back %= max(1, len(self.history))  # at the start of a run, few moments to go back to
        past = self.history[-1 - back] if back else None
        self._lose_data(lambda: self.topology.failover(past.restore if past else None))

    @rule(lease=st.sampled_from([None, LEASE]))
    def acquire_where_an_old_hold_is(self, lease: float | None) -> None:
        """An owner that the server has a hold of, while it knows of none, tries the lock: a
        hold a loss brought back after its owner released it, or one whose grant it never
        heard of. Its call is another call than the one that made that hold."""
        state = self.raw.hgetall(self.name)
        for owner in self.owners:
            if owner.busy is None and owner.record() is None and int(state.get(owner.owner, 0)):

                def acquire(o: Any = owner) -> Any:
                    return o.lock.acquire(blocking=False, lease=lease)

                self._call(owner, acquire)
                return

    # not rules here (see the module's docstring)
    def force_release(self) -> None:
        raise NotImplementedError

    def hold_back_wakeups(self, i: int) -> None:
        raise NotImplementedError

    def deliver_wakeups_late(self, i: int) -> None:
        raise NotImplementedError

    def let_an_explicit_lease_run_out(self) -> None:
        raise NotImplementedError

    def restart_empty(self) -> None:
        """The master dies and comes back with no data."""
        self._lose_data(self.topology.restart_empty)

    def stall_replication(self) -> None:
        """From now on the replica misses every write (until ``heal_replication``)."""
        if not self.topology.stalled:
            self.topology.stall()

    def heal_replication(self) -> None:
        if self.topology.stalled:
            self.topology.heal()

    @invariant()
    def keep_history(self) -> None:
        """Not a check: the lock's keys now, for a later failover to this moment."""
        now = Snapshot.take(self.dumps, self.name)
        if self.history and self.history[-1].same_data(now):
            self.history[-1] = now  # nothing changed but expiry times: one moment
        else:
            self.history.append(now)
        del self.history[: -HISTORY - 1]

    def _lose_data(self, action: Callable[[], RedisServer]) -> None:
        master = action()
        self.server = master
        self.raw.close()
        self.raw = redis.Redis.from_url(master.url, decode_responses=True)
        self.dumps.close()
        self.dumps = redis.Redis.from_url(master.url)
        for script in (*scripts.ALL, *fair_core.SCRIPTS):  # a dropped reply is the script's
            self.raw.script_load(script.source)
        for owner in self.owners:  # the clients' address now leads to the new master
            for proxy in (owner.commands, owner.wakeups):
                proxy.retarget(("127.0.0.1", master.port))
                proxy.cut()
        for owner in self.owners:
            if owner.busy is None:  # (a wait under way finds the new master by itself)
                self._reconnect(owner)
        state = reply_str_hash(self.raw.hgetall(self.name))
        mine: set[int] = set()
        for i, owner in enumerate(self.owners):
            hold = owner.record()
            if owner.busy is not None or owner.unknown or hold is not None:
                owner.ever_revoked = True  # it may be told of a loss from now on
            if owner.busy is not None:
                self.straddling.add(i)
            if hold is None:
                continue
            if self._on_server(owner, hold.token, state):
                mine.add(hold.token)
                self.revoked.discard(hold.token)  # gone once, now back (an older copy)
                if int(state[owner.owner]) != hold.count:
                    self.recounted.add(hold.token)
            else:
                self.revoked.add(hold.token)  # gone with the data
        if FENCE in state and int(state[FENCE]) not in mine:
            self.brought_back.add(int(state[FENCE]))
        places = reply_strs(self.raw.zrange(self.keys.line, 0, -1))
        self.stale_places.update(places)
        self.stale_waits.update(p.split(" ")[1] for p in places if p.count(" ") >= 1)

    def _reconnect(self, owner: LockOwner) -> None:
        """A read until it answers: it uses up the owner's pooled connections that the cut
        closed (a call is sent at most twice, so right after a cut a call may meet two of
        them and raise although the server answers), so that the rules after a loss see the
        client as it is once it found the new master."""
        for _ in range(20):
            try:
                owner.run(owner.lock.statistics)
                return
            except redlease.ServerUnavailableError:
                continue
        raise AssertionError(f"{owner.owner} never reached the new master")

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.dumps.close()

    def _on_server(self, owner: LockOwner, token: int, state: dict[str, str]) -> bool:
        return int(state.get(owner.owner, 0)) > 0 and state.get(FENCE) == str(token)

    # --- what the loss leaves out of the invariants ---------------------------------------------

    def _revoked(self, owner: LockOwner) -> bool:
        i = self.owners.index(owner)
        if i in self.straddling:  # a wait under way at the loss: granted on which server?
            hold = owner.record()
            if hold is not None:
                state = reply_str_hash(self.raw.hgetall(self.name))
                if not self._on_server(owner, hold.token, state):
                    self.revoked.add(hold.token)
                self.straddling.discard(i)
            elif owner.busy is None:
                self.straddling.discard(i)
        return super()._revoked(owner)

    def _brought_back(self) -> bool:
        """The hold on the server is one the loss brought back: a hold the stale copy had
        of an owner that released it since, or with fewer re-entries than its owner counted
        (its owner is told, the copy stays until its lease ends: nobody renews it), or one
        handed over to a place in line brought back."""
        fence, wait = self.raw.hmget(self.name, FENCE, WAIT)
        old = self.brought_back | self.recounted
        return (fence is not None and int(fence) in old) or (
            wait is not None and wait in self.stale_waits
        )


def _run(topology: Replicated, is_async: bool, fair: bool, config: Any) -> None:
    class Machine(FailoverLockMachine):
        pass

    Machine.topology, Machine.is_async, Machine.fair = topology, is_async, fair
    test = Machine.TestCase
    test.settings = config
    test().runTest()


def test_lock_protocol_holds_across_data_loss(replicated, is_async):
    _run(replicated, is_async, False, FAILOVER)


@pytest.mark.slow
@pytest.mark.parametrize("fair", [False, True], ids=["lock", "fair"])
def test_lock_protocol_holds_across_data_loss_longer(replicated, is_async, fair):
    _run(replicated, is_async, fair, SLOW)


# --- the cases of issue #23, step by step -----------------------------------------------------


def _machine(topology: Replicated, is_async: bool = False) -> FailoverLockMachine:
    class Steps(FailoverLockMachine):
        pass

    cls = Steps
    cls.topology, cls.is_async, cls.fair = topology, is_async, False
    return cls()


def _check(machine: FailoverLockMachine) -> None:
    machine.i1_one_holder_and_the_server_agrees()
    machine.i2_counts_match_when_nothing_is_unknown()
    machine.i3_no_stale_place_and_no_stranded_lock()
    machine.i4_lost_only_when_taken_away()
    machine.i5_no_token_handed_out_twice()


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_new_acquire_after_a_failover_gets_a_new_token(replicated, side):
    """Owner a holds (token T) on the master and the replica; replication stalls; a releases
    on the master alone; failover: the promoted replica still has a's hold. a's next acquire
    is another call than the one that made it: it must get a new token, not T again."""
    machine = _machine(replicated, side == "async")
    try:
        a = machine.owners[0]
        assert machine._call(a, lambda: a.lock.acquire(blocking=False))
        _check(machine)
        machine.stall_replication()
        machine.release(0)
        _check(machine)
        machine.fail_over(0)
        _check(machine)
        machine.try_acquire(0, None)
        _check(machine)
        assert a.record() is not None
        machine.release(0)
        _check(machine)
    finally:
        machine.teardown()


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_release_after_a_failover_hands_over_a_new_token(replicated, side):
    """Issue #23, defect 1: a holds (T) everywhere; replication stalls; b waits, a releases
    (hand-over to b: T + 1 on the master alone), a takes the lock again; failover: the replica
    has a's hold T and b's place. c waits; a releases there, which hands over. The token
    handed over must not be T + 1 again (nor any token b or a had), and a hold that went
    with the data is not released as if it were there."""
    machine = _machine(replicated, side == "async")
    try:
        a, b = machine.owners[0], machine.owners[1]
        assert machine._call(a, lambda: a.lock.acquire(blocking=False))
        machine.stall_replication()
        b.busy = b.start(lambda: b.lock.acquire(timeout=5))
        wait_until(lambda: machine.raw.zcard(machine.keys.line) == 1)  # b is in line
        machine.release(0)
        machine.collect(1)
        _check(machine)
        assert b.record() is not None
        machine.release(1)
        machine.try_acquire(0, None)
        _check(machine)
        machine.fail_over(0)
        _check(machine)
        machine.start_waiting(2, 1.0)
        machine.release(0)
        machine.collect(2)
        _check(machine)
        for i in range(OWNERS):
            machine.release(i)
            _check(machine)
    finally:
        machine.teardown()


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_hold_lost_in_a_failover_is_not_released_as_if_there(replicated, side):
    """a holds (T) everywhere; replication stalls; a releases and takes the lock again on the
    master alone (T'); failover: the replica has a's old hold T with the same count. a's
    release (of T') must say the lease was lost, not act on the old hold T."""
    machine = _machine(replicated, side == "async")
    try:
        a = machine.owners[0]
        assert machine._call(a, lambda: a.lock.acquire(blocking=False))
        machine.stall_replication()
        machine.release(0)
        machine.try_acquire(0, None)
        _check(machine)
        machine.fail_over(0)
        _check(machine)
        machine.release(0)  # I6 is checked here
        assert not a.returned
        _check(machine)
    finally:
        machine.teardown()


@pytest.mark.parametrize("side", ["sync", "async"])
def test_tokens_keep_increasing_across_an_empty_restart(replicated, side):
    """a holds, releases; the master restarts empty; b and then a take the lock: new tokens."""
    machine = _machine(replicated, side == "async")
    try:
        a, b = machine.owners[0], machine.owners[1]
        before = []
        for owner, i in ((a, 0), (b, 1)):
            assert machine._call(owner, partial(owner.lock.acquire, blocking=False))
            before.append(owner.record().token)
            machine.release(i)
        machine.restart_empty()
        for owner, i in ((b, 1), (a, 0)):
            assert machine._call(owner, partial(owner.lock.acquire, blocking=False))
            _check(machine)
            assert owner.record().token > max(before)
            machine.release(i)
        _check(machine)
    finally:
        machine.teardown()
