"""The reentrant lock and the fair lock under arbitrary interleavings and faults (Hypothesis
stateful tests on a real server, sync and asyncio).

Three owners, each one thread (or one asyncio task) with a client of its own whose commands go
through one ``TcpProxy`` and whose wake-ups go through another; two of the clients live in one
client process and the third in another, as far as the ids they mint go (``helpers.Process``:
wait ids and release ids minted by the library's own code, as two processes mint them). Rules:
non-blocking tries, waits started in the background and collected later, re-entry, release (by
the owner drawn or, if it holds nothing, the next that holds), replies lost after the server
ran a script (the call raises: its outcome is unknown until the owner's next call), wake-ups
held back and delivered late, a final release that keeps the lock taken a moment
(``release(keep_for=)``, its reply maybe lost), a force-release by an operator (of a held or
a kept lock), an explicit lease left to run out. After every step the invariants are checked
against the server:

- I1 exclusion: at most one owner believes it holds the lock, and the server agrees with it
  (an owner believes while its record lasts and, for an explicit lease, until that lease ran
  out by its clock; a hold force-released behind its back is exempt until it hears of it);
- I2 counts: an owner with no call in flight and no unknown outcome has on the server the
  count it has on record (none when it has no record);
- I3 no stranded lock and no stale place: an owner with no call in flight has no place in line
  and no hold it does not know of; a lock nobody believes it holds always has a lease;
- I4 a lease is reported lost only for a hold that was really taken away (force-released);
- I5 no fencing token is handed out twice: every new hold an owner records has a token no hold
  had before;
- I6 (checked in the release rules) a release of a hold that was taken away never returns as
  if it released it: its owner is told (``LeaseLostError``, or ``NotOwnedError`` once
  ``on_lease_lost`` ran).

``test_lock_failover_stateful.py`` runs the same machine with a master and a replica, and rules
that fail over to the replica (behind or not) or restart the master empty.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from integration.helpers import reply_str

import redlease
from redlease import LeaseLostError, LockTimeoutError
from redlease._asyncio.subscriber import Subscriber as AsyncSubscriber
from redlease._core import fair as fair_core
from redlease._core import lock as lock_core
from redlease._core import scripts
from redlease._core.fair import REDISSON_FAIR
from redlease._core.keep import RELEASE_KEEP
from redlease._core.keys import CLASSIC
from redlease._core.requests import Call
from redlease._threads.subscriber import Subscriber
from redlease.testing import RedisServer, TcpProxy

from .conftest import DEFAULT, SLOW
from .helpers import CALL_TIMEOUT, Actor, LoopThread, Process, unique_name, wait_until

pytestmark = [pytest.mark.timeout(300)]

OWNERS = 3
PROCESS_OF = (0, 0, 1)
"""The client process of each owner: owners 0 and 1 are two clients of one process."""
LEASE = 0.3
"""The explicit lease some acquires ask for (left to run out by a rule)."""
KEEP = 0.5
"""How long a final release that keeps the lock keeps it taken."""
MARGIN = 0.15
"""An explicit lease counts as believed only up to this long before it runs out by the
owner's clock, so that reading the server just after never races its expiry."""


class LockOwner:
    """One owner (an ``Actor``: one thread, or one task on the loop) with a client of its
    own whose commands go through ``commands`` and whose wake-ups go through ``wakeups``."""

    def __init__(
        self,
        server: RedisServer,
        name: str,
        *,
        fair: bool | str,
        loop: LoopThread | None,
        process: Process | None = None,
    ) -> None:
        self.loop = loop
        self.commands = TcpProxy(("127.0.0.1", server.port)).start()
        self.wakeups = TcpProxy(("127.0.0.1", server.port)).start()
        self.lost: list[LeaseLostError] = []
        self.busy: concurrent.futures.Future[Any] | None = None
        """A wait started in the background and not collected yet."""
        self.unknown = False
        """Its last call raised with an unknown outcome (settled by its next call)."""
        self.ever_revoked = False
        """A hold of its was force-released behind its back (or lost with the server's data)
        at some point."""
        self.returned = False
        """Its last call returned (no error)."""
        self._actor = Actor(loop, process)
        self.client: Any = self.run(lambda: self._connect(server))
        if fair == "redisson":  # the fair lock in Redisson's RedissonFairLock layout
            self.lock: Any = self.client.fair_lock(
                name, on_lease_lost=self.lost.append, layout="redisson"
            )
        else:
            make = self.client.fair_lock if fair else self.client.lock
            self.lock = make(name, on_lease_lost=self.lost.append)
        self.owner: str = self.run(self.client._owner)

    def _connect(self, server: RedisServer) -> Any:
        factory = redlease.AsyncClient if self.loop else redlease.Client
        client = factory.from_url(self.commands.url, socket_timeout=5, watchdog_timeout=6)
        if self.loop is not None:
            client._subscriber = AsyncSubscriber(redis.asyncio.Redis.from_url(self.wakeups.url))
        else:
            client._subscriber = Subscriber(redis.Redis.from_url(self.wakeups.url))
        return client

    def start(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Have the owner run ``call()`` (awaited if it returns an awaitable)."""
        return self._actor.start(call)

    def run(self, call: Callable[[], Any]) -> Any:
        return self._actor.run(call)

    # --- what it has on record ------------------------------------------------------------

    def record(self) -> Any:
        state = self.client._state
        with state.mutex:
            return state.holds.get(self.lock.name, self.owner)

    def believes(self) -> bool:
        """Whether it holds the lock by its own record and clock."""
        hold = self.record()
        if hold is None or hold.release_id is not None:
            return False
        if hold.watched:
            return True
        lease = hold.leases[0]
        assert lease is not None
        # counted from before the request; the margin covers the check's own time
        return time.monotonic() < hold.renewed_at + lease - MARGIN

    def watched(self) -> bool:
        hold = self.record()
        return hold is not None and hold.watched

    def close(self) -> None:
        self.wakeups.thaw()
        if self.busy is not None:
            self.busy.exception(CALL_TIMEOUT)
        try:
            self.run(self.client.close)
        finally:
            self._actor.stop()
            self.commands.close()
            self.wakeups.close()


class LockMachine(RuleBasedStateMachine):
    server: RedisServer
    is_async: bool
    fair: bool | str
    """``"redisson"``: the fair lock in Redisson's layout."""

    def __init__(self) -> None:
        super().__init__()
        self.name = unique_name("stateful-lock")
        self.layout = REDISSON_FAIR if self.fair == "redisson" else lock_core.REDLEASE
        self.keys = self.layout.keys(self.name, CLASSIC)
        self.raw = redis.Redis.from_url(self.server.url, decode_responses=True)
        for script in (
            *scripts.ALL,
            *fair_core.SCRIPTS,
            RELEASE_KEEP,
        ):  # a dropped reply is the script's
            self.raw.script_load(script.source)
        self.loop = LoopThread() if self.is_async else None
        self.processes = [Process() for _ in range(max(PROCESS_OF) + 1)]
        self.owners: list[LockOwner] = []
        for i in range(OWNERS):
            process = self.processes[PROCESS_OF[i]]
            self.owners.append(
                LockOwner(self.server, self.name, fair=self.fair, loop=self.loop, process=process)
            )
        self.revoked: set[int] = set()
        """Fencing tokens of holds force-released behind their owners' backs (an owner
        believes in such a hold until it hears of it: exempt from the invariants)."""
        self.tokens: dict[int, str] = {}
        """Every fencing token an owner recorded for a hold, and which hold (owner, epoch)."""
        self.epochs: list[int | None] = [None] * OWNERS
        """The epoch of each owner's hold at the last check (a new epoch: a new hold)."""
        self.recounted: set[int] = set()
        """Tokens of holds the server has with another count than their owner's (re-entries
        lost with the server's data; none here): left out of I2."""
        self.stale_places: set[str] = set()
        """Places in line that a loss of data brought back (none here; see the failover
        machine): left out of I3."""

    def teardown(self) -> None:
        for owner in self.owners:
            owner.close()
        if self.loop is not None:
            self.loop.close()
        self.raw.close()

    # --- helpers ----------------------------------------------------------------------------

    def _call(self, owner: LockOwner, call: Callable[[], Any]) -> Any:
        """Run ``call`` as ``owner``; an error with an unknown outcome is remembered."""
        owner.returned = False
        try:
            result = owner.run(call)
        except redlease.ServerUnavailableError:
            owner.unknown = True
            return None
        except (LeaseLostError, redlease.NotOwnedError):
            owner.unknown = False
            return None
        owner.unknown = False
        owner.returned = True
        return result

    def _release(self, owner: LockOwner, keep_for: float | None = None) -> None:
        """``owner.lock.release()``; I6: a hold taken away is never reported released."""
        hold = owner.record()
        gone = hold is not None and hold.token in self.revoked and hold.release_id is None
        self._call(owner, lambda: owner.lock.release(keep_for=keep_for))
        assert not (gone and owner.returned), (
            f"{owner.owner}'s hold (token {hold.token if hold else None}) was taken away, "
            "yet its release returned as if it released it"
        )

    def _idle(self, i: int) -> LockOwner | None:
        owner = self.owners[i]
        return None if owner.busy is not None else owner

    def _holder(self, i: int) -> LockOwner | None:
        """Owner ``i`` if it is idle and has a hold on record, else the next one (in turn)
        that has: a release rule then always releases something when anyone holds."""
        for k in range(OWNERS):
            owner = self._idle((i + k) % OWNERS)
            if owner is not None and owner.record() is not None:
                return owner
        return None

    def _revoked(self, owner: LockOwner) -> bool:
        hold = owner.record()
        return hold is not None and hold.token in self.revoked

    def _brought_back(self) -> bool:
        """Whether the hold on the server now is one that a loss of data brought back from
        the past (never here; see the failover machine)."""
        return False

    def _server_count(self, owner: LockOwner) -> int:
        return int(self.raw.hget(self.name, owner.owner) or 0)

    def _drop_leftovers(self, owner: LockOwner) -> None:
        with owner.commands._mutex:  # drops armed for a call that did not need them all
            owner.commands._pending_drops.clear()

    # --- rules ------------------------------------------------------------------------------

    @rule(i=st.integers(0, OWNERS - 1), lease=st.sampled_from([None, LEASE]))
    def try_acquire(self, i: int, lease: float | None) -> None:
        owner = self._idle(i)
        if owner is not None:
            self._call(owner, lambda: owner.lock.acquire(blocking=False, lease=lease))

    @rule(i=st.integers(0, OWNERS - 1), timeout=st.sampled_from([0.2, 1.0]))
    def start_waiting(self, i: int, timeout: float) -> None:
        owner = self._idle(i)
        if owner is not None:
            owner.busy = owner.start(lambda: owner.lock.acquire(timeout=timeout))

    @rule(i=st.integers(0, OWNERS - 1))
    def collect(self, i: int) -> None:
        owner = self.owners[i]
        if owner.busy is None:
            return
        busy, owner.busy = owner.busy, None
        try:
            try:
                busy.result(5)
            except concurrent.futures.TimeoutError:
                owner.wakeups.thaw()  # its subscription may wait for held-back replies
                busy.result(CALL_TIMEOUT)
        except redlease.ServerUnavailableError:
            owner.unknown = True
        except (LeaseLostError, LockTimeoutError):
            owner.unknown = False
        else:
            owner.unknown = False

    @rule(i=st.integers(0, OWNERS - 1))
    def release(self, i: int) -> None:
        owner = self._holder(i)
        if owner is not None:
            self._release(owner)

    @rule(i=st.integers(0, OWNERS - 1), lose=st.sampled_from([1, 2]))
    def acquire_losing_replies(self, i: int, lose: int) -> None:
        """The server runs the acquire; ``lose`` replies are lost (2: the call raises)."""
        owner = self._idle(i)
        if owner is None:
            return
        redisson = self.fair == "redisson"
        acquire = fair_core.REDISSON_FAIR_ACQUIRE if redisson else scripts.LOCK_ACQUIRE
        for _ in range(lose):
            owner.commands.drop_next_reply(acquire.sha.encode())
        self._call(owner, lambda: owner.lock.acquire(blocking=False))
        self._drop_leftovers(owner)

    @rule(i=st.integers(0, OWNERS - 1), lose=st.sampled_from([1, 2]))
    def release_losing_replies(self, i: int, lose: int) -> None:
        owner = self._holder(i)
        if owner is None:
            return
        redisson = self.fair == "redisson"
        release = fair_core.REDISSON_FAIR_RELEASE if redisson else scripts.LOCK_RELEASE
        for _ in range(lose):
            owner.commands.drop_next_reply(release.sha.encode())
        self._release(owner)
        self._drop_leftovers(owner)

    @rule(i=st.integers(0, OWNERS - 1), lose=st.sampled_from([0, 1]))
    def release_keeping_the_lock(self, i: int, lose: int) -> None:
        """A final release that keeps the lock taken ``KEEP`` s (``release(keep_for=)``; not
        in Redisson's fair layout, which refuses it); ``lose`` replies lost (redis-py sends
        it again). The kept lock runs out, or the force release rule clears it."""
        owner = self._holder(i)
        if self.fair == "redisson" or owner is None or owner.record().count != 1:
            return
        for _ in range(lose):
            owner.commands.drop_next_reply(RELEASE_KEEP.sha.encode())
        self._release(owner, keep_for=KEEP)
        self._drop_leftovers(owner)

    @rule(i=st.integers(0, OWNERS - 1))
    def hold_back_wakeups(self, i: int) -> None:
        self.owners[i].wakeups.freeze()

    @rule(i=st.integers(0, OWNERS - 1))
    def deliver_wakeups_late(self, i: int) -> None:
        self.owners[i].wakeups.thaw()

    @rule()
    def force_release(self) -> None:
        """An operator force-releases the lock (as ``Lock.force_release`` does), reading in
        the same transaction whose hold that was (a wait may be under way meanwhile)."""
        call = next(lock_core.force_release(self.keys, self.layout))
        assert isinstance(call, Call)
        pipe = self.raw.pipeline(transaction=True)
        pipe.hgetall(self.name)
        pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        fields, _ = pipe.execute()
        if "redlease:fence" in fields:
            self.revoked.add(int(fields["redlease:fence"]))
        for owner in self.owners:
            if owner.owner in fields:
                owner.ever_revoked = True

    @rule()
    def let_an_explicit_lease_run_out(self) -> None:
        """Wait until a hold taken with an explicit lease (and nothing else) is gone."""
        fence = self.raw.hget(self.name, "redlease:fence")
        for holder in self.owners:
            hold = holder.record()
            mine = hold is not None and fence is not None and int(fence) == hold.token
            if holder.busy is None and mine and not hold.watched:

                def released(h: Any = holder) -> bool:
                    return self._server_count(h) == 0

                wait_until(released, 10)

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def i1_one_holder_and_the_server_agrees(self) -> None:
        believers = [o for o in self.owners if not self._revoked(o) and o.believes()]
        assert len(believers) <= 1, f"two owners believe they hold it: {believers}"
        for owner in believers:
            if owner.busy is None and not owner.unknown and owner.watched():
                assert self._server_count(owner) > 0, (
                    f"owner {owner.owner} believes it holds {self.name!r}, the server says "
                    f"{self.raw.hgetall(self.name)}"
                )

    @invariant()
    def i2_counts_match_when_nothing_is_unknown(self) -> None:
        for owner in self.owners:
            if owner.busy is not None or owner.unknown or self._revoked(owner):
                continue
            hold = owner.record()
            on_server = self._server_count(owner)
            if hold is None:
                if on_server and self._brought_back():
                    continue
                assert on_server == 0, f"{owner.owner} holds {on_server} it does not know of"
            elif hold.token in self.recounted:
                continue
            elif owner.watched():
                assert on_server == hold.count, (hold.count, on_server)
            elif owner.believes():
                assert on_server in (0, hold.count), (hold.count, on_server)

    @invariant()
    def i3_no_stale_place_and_no_stranded_lock(self) -> None:
        for owner in self.owners:
            if owner.busy is None:
                place: object
                if self.fair == "redisson":  # Redisson's line (a list) and places (a zset)
                    place = self.raw.zscore(self.keys.places, owner.owner)
                    assert owner.owner not in self.raw.lrange(self.keys.line, 0, -1)
                else:  # redlease's line: a zset of "<owner> <wait id> <hand-over lease>"
                    places = [reply_str(p) for p in self.raw.zrange(self.keys.line, 0, -1)]
                    mine = [
                        p
                        for p in places
                        if p.startswith(owner.owner + " ") and p not in self.stale_places
                    ]
                    place = mine[0] if mine else None
                assert place is None, f"{owner.owner} kept a place in line after its wait"
        if not any(o.believes() or o.busy or o.unknown for o in self.owners):
            assert self.raw.pttl(self.name) != -1, "a lock nobody holds has no lease"

    @invariant()
    def i4_lost_only_when_taken_away(self) -> None:
        for owner in self.owners:
            if owner.lost:
                assert owner.ever_revoked, f"{owner.owner} was told of a loss: {owner.lost}"

    @invariant()
    def i5_no_token_handed_out_twice(self) -> None:
        for i, owner in enumerate(self.owners):
            hold = owner.record()
            epoch = None if hold is None else hold.epoch
            if hold is not None and epoch != self.epochs[i] and hold.token:
                first = self.tokens.setdefault(hold.token, f"{owner.owner} (hold {epoch})")
                assert first == f"{owner.owner} (hold {epoch})", (
                    f"fencing token {hold.token} handed out twice: to {first}, then to "
                    f"{owner.owner} (hold {epoch})"
                )
            self.epochs[i] = epoch


def _run(server: RedisServer, is_async: bool, fair: bool | str, config: Any) -> None:
    class Machine(LockMachine):
        pass

    Machine.server, Machine.is_async, Machine.fair = server, is_async, fair
    test = Machine.TestCase
    test.settings = config
    test().runTest()


@pytest.mark.parametrize("fair", [False, True, "redisson"], ids=["lock", "fair", "redisson-fair"])
def test_lock_protocol_holds_under_faults(stateful_server, is_async, fair):
    _run(stateful_server, is_async, fair, DEFAULT)


@pytest.mark.slow
@pytest.mark.parametrize("fair", [False, True, "redisson"], ids=["lock", "fair", "redisson-fair"])
def test_lock_protocol_holds_under_faults_longer(stateful_server, is_async, fair):
    _run(stateful_server, is_async, fair, SLOW)


def test_the_invariants_catch_two_holders(stateful_server):
    """The exclusion invariant is not vacuous: two believers fail it."""

    class Probe(LockMachine):
        pass

    machine_cls = Probe
    machine_cls.server, machine_cls.is_async, machine_cls.fair = stateful_server, False, False
    machine = machine_cls()
    try:
        a, b = machine.owners[:2]
        assert a.run(lambda: a.lock.acquire(blocking=False))
        machine.raw.delete(machine.name)  # behind a's back, and a is not marked revoked
        assert b.run(lambda: b.lock.acquire(blocking=False))
        with pytest.raises(AssertionError, match="two owners"):
            machine.i1_one_holder_and_the_server_agrees()
        b.run(b.lock.release)
    finally:
        machine.teardown()
