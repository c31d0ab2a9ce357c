"""The lease semaphore's scripts under explicit time, lost and late requests, many expired leases.

A property test (Hypothesis's rule-based state machine) over ``engine.py``: every server step
runs the file of ``src/redlease/lua/`` that the client's ``Call`` names, with the KEYS and
ARGV the client code built, on the model's explicit state (the count, the leases with their
ends as ``"@<seconds from now>"``, the receipts with their TTLs). Time is a number the machine
advances (``tick``): leases end and receipts expire with it, and it is the clients' clock.

**Clients run the real decision code.** Each client's acquire is ``_core.semaphore
.lease_acquire`` (the generator the shells drive, ``timeout=0``), fed the server's replies;
its call is sent at most twice, as the driver does (once more on a fresh connection), and
each send is answered, has its reply lost after the server ran it, or is held up in the
network to land any time later (a late copy, after its own lease may have run out). An
acquire that raises is given back as the shells do (``give_back_call``), by a call that may
itself be lost (the watchdog sends it again) or land late. Crashed holders leave permits
behind in bulk (``abandon``: more than the 100 expired leases a call gives back).

**Invariants**, after every step:

* conservation: the free count plus the permits in the leases is the total that was set: a
  permit is never counted twice, nor lost for good;
* belief: a permit a client was granted is in the leases with at least the lease the client
  counts on (its ``Granted.ttl`` from before the request was sent), until then;
* no permit is believed held by two clients, and no client believes more than were set.

``test_the_unfixed_acquire_loses_permits`` runs the same machine on the acquire script from
before issue #36's fix (``unfixed/``): the two traces of the issue break conservation there.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    invariant,
    precondition,
    rule,
)

from redlease._core import lease_semaphore as lease_core
from redlease._core import semaphore as core
from redlease._core.keys import CLASSIC, LeaseSemaphoreKeys
from redlease._core.requests import Call
from redlease.errors import ServerUnavailableError

from . import unfixed
from .engine import KeyState, ServerEngine, State
from .scripted import ScriptedModel, bound, run_model

KEYS = LeaseSemaphoreKeys.for_name("msem", CLASSIC)
TOTAL = 400
"""Permits set (below 950: the engine rounds reply numbers just below a whole second up)."""
CLIENTS = 2
LEASES = (1, 2, 3)
SIZES = (1, 2, 150)
"""Permits one client's acquire takes: one, a few, more than a call gives back expired."""
SENDS = 2
"""A call is sent at most twice (the driver sends it once more on a fresh connection)."""
NETWORK = 4
"""Late copies held in the network at most (a bounded adversary)."""


@dataclass
class Client:
    """One client: an acquire in progress (its generator and the call it waits on), the
    permits it was granted (id -> the time until which it counts on each), and a give-back
    the shell still has to get to the server."""

    number: int
    ids: itertools.count[int]
    op: Any = None
    asked: list[str] = field(default_factory=list)
    """The permit ids of the acquire in progress (or the last one)."""
    call: Call | None = None
    sends: int = 0
    held: dict[str, int] = field(default_factory=dict)
    give_back: Call | None = None

    def fresh_id(self) -> str:
        return f"c{self.number}-{next(self.ids):012d}x".encode().hex()  # 16 ASCII bytes


class LeaseSemaphoreModel(ScriptedModel):
    CHANNELS = frozenset({KEYS.channel})
    TIMES = frozenset({KEYS.leases})

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.state: State = ((KEYS.name, "string", -1, str(TOTAL)),)
        self.clients = [Client(i, itertools.count(1)) for i in range(CLIENTS)]
        self.network: list[Call] = []
        self.abandoned = itertools.count(1)

    # --- the server -----------------------------------------------------------------------

    def key(self, name: str) -> KeyState | None:
        return next((k for k in self.state if k[0] == name), None)

    def leases(self) -> dict[str, int]:
        """Permit id (hex) -> seconds until its lease ends (0 or less: ran out)."""
        found = self.key(KEYS.leases)
        if found is None:
            return {}
        return {m.encode().hex(): int(end[1:]) for m, end in found[3]}

    def count(self) -> int:
        found = self.key(KEYS.name)
        return 0 if found is None else int(found[3])

    # --- a client's acquire, driven as the shells drive it --------------------------------

    def _feed(self, c: Client, method: str, value: Any) -> None:
        """Resume ``c``'s operation with a reply (``send``) or an error (``throw``)."""
        try:
            request = getattr(c.op, method)(value)
        except StopIteration as done:
            c.op, c.call = None, None
            granted = done.value
            if granted is not None:
                for permit in granted.ids:
                    assert permit not in c.held
                    c.held[permit] = granted.requested_at + granted.ttl
            return
        except ServerUnavailableError:  # raised to the caller: the shell gives the permits back
            c.give_back = lease_core.give_back_call(KEYS, c.asked)
            c.op, c.call = None, None
            return
        assert isinstance(request, Call), request  # timeout=0: no Subscribe, no wait
        c.call, c.sends = request, 0

    @precondition(lambda self: any(c.op is None and c.give_back is None for c in self.clients))
    @rule(data=st.data(), permits=st.sampled_from(SIZES), lease=st.sampled_from(LEASES))
    def acquire(self, data: st.DataObject, permits: int, lease: int) -> None:
        idle = [c for c in self.clients if c.op is None and c.give_back is None]
        c = data.draw(st.sampled_from(idle))
        self.start(c.number, permits, lease)

    def start(self, number: int, permits: int, lease: int) -> None:
        c = self.clients[number]
        ids = c.asked = [c.fresh_id() for _ in range(permits)]
        c.op = lease_core.lease_acquire(
            KEYS,
            f"owner-{number}",
            lease=lease,
            timeout=0,
            permit=ids[0],
            more=ids[1:],
            clock=lambda: self.now,
        )
        self._feed(c, "send", None)

    @precondition(lambda self: any(c.call is not None for c in self.clients))
    @rule(data=st.data(), fate=st.sampled_from(["answered", "reply lost", "late"]))
    def send(self, data: st.DataObject, fate: str) -> None:
        """The call a client's acquire waits on is sent: answered, run with its reply lost, or
        held up in the network (it lands later, maybe after the client gave up on it)."""
        c = data.draw(st.sampled_from([c for c in self.clients if c.call is not None]))
        self.send_call(c.number, fate)

    def send_call(self, number: int, fate: str) -> None:
        c = self.clients[number]
        assert c.call is not None
        if fate == "late":
            if len(self.network) >= NETWORK:
                fate = "reply lost"
            else:
                self.network.append(c.call)
        reply = None if fate == "late" else self.run(c.call)
        if fate == "answered":
            self._feed(c, "send", reply)
            return
        c.sends += 1
        if c.sends >= SENDS:
            self._feed(c, "throw", ServerUnavailableError("replies lost (model)", name=KEYS.name))

    @precondition(lambda self: any(c.give_back is not None for c in self.clients))
    @rule(data=st.data(), fate=st.sampled_from(["answered", "reply lost", "late"]))
    def give_back(self, data: st.DataObject, fate: str) -> None:
        """The give-back of an acquire that raised: once it is answered the shell is done; a
        lost or held-up one is sent again (the watchdog's next round)."""
        c = data.draw(st.sampled_from([c for c in self.clients if c.give_back is not None]))
        self.send_give_back(c.number, fate)

    def send_give_back(self, number: int, fate: str) -> None:
        c = self.clients[number]
        assert c.give_back is not None
        if fate == "late" and len(self.network) < NETWORK:
            self.network.append(c.give_back)
            return
        self.run(c.give_back)
        if fate == "answered":
            c.give_back = None

    @precondition(lambda self: self.network)
    @rule(data=st.data())
    def land(self, data: st.DataObject) -> None:
        """A copy held up in the network lands now; nobody reads its reply."""
        self.land_copy(data.draw(st.integers(0, len(self.network) - 1)))

    def land_copy(self, index: int) -> None:
        self.run(self.network.pop(index))

    @precondition(lambda self: any(c.held for c in self.clients))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """A client gives back every permit it holds (``release_many``: all or none)."""
        c = data.draw(st.sampled_from([c for c in self.clients if c.held]))
        self.release_all(c.number)

    def release_all(self, number: int) -> None:
        c = self.clients[number]
        permits = sorted(c.held)
        ids = [core.new_request_id() for _ in permits]
        self.run(lease_core.release_many_call(KEYS, permits, ids))
        c.held.clear()  # given back, or refused for a lease that ran out: either way forgotten

    @rule(permits=st.sampled_from((60, 101)), lease=st.sampled_from(LEASES))
    def abandon(self, permits: int, lease: int) -> None:
        """Holders that crash leave ``permits`` behind, each under ``lease``."""
        ids = [f"dead-{next(self.abandoned):011d}".encode().hex() for _ in range(permits)]
        self.run(lease_core.lease_acquire_call(KEYS, "owner-dead", ids[0], lease, False, ids[1:]))

    @rule(seconds=st.integers(1, 3))
    def tick(self, seconds: int) -> None:
        """Time passes: leases run out, receipts expire, the clients' clocks move on."""
        self.now += seconds
        state = []
        for name, kind, ttl, value in self.state:
            if ttl > 0:
                ttl -= seconds
                if ttl <= 0:
                    continue
            if name == KEYS.leases:
                value = tuple((m, f"@{int(end[1:]) - seconds}") for m, end in value)
            state.append((name, kind, ttl, value))
        self.state = tuple(state)

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def conservation(self) -> None:
        leases = self.leases()
        assert self.count() + len(leases) == TOTAL, (
            f"free {self.count()} + leased {len(leases)} != {TOTAL} set"
        )

    @invariant()
    def belief(self) -> None:
        leases = self.leases()
        believed: set[str] = set()
        for c in self.clients:
            for permit, until in c.held.items():
                assert permit not in believed
                believed.add(permit)
                if until > self.now:
                    left = leases.get(permit)
                    assert left is not None and left >= until - self.now, (
                        f"client {c.number} counts on {permit} for {until - self.now} s more; "
                        f"the server has {left}"
                    )
        assert len(believed) <= TOTAL


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_lease_semaphore_model(engine: ServerEngine) -> None:
    run_model(LeaseSemaphoreModel, engine, SETTINGS)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_lease_semaphore_model_long(engine: ServerEngine) -> None:
    run_model(
        LeaseSemaphoreModel, engine, settings(SETTINGS, max_examples=400, stateful_step_count=50)
    )


# --- issue #36's traces, on today's script and on the one before the fix -------------------


def retry_behind_expired_leases(model: LeaseSemaphoreModel) -> None:
    """101 abandoned leases end; a client's acquire(lease=2) runs with its reply lost, its
    resend lands after its own lease ran out (its give-back, after the too-late grant, lost)."""
    model.abandon(101, 1)
    model.start(0, 1, 2)
    model.send_call(0, "reply lost")
    model.tick(2)
    model.send_call(0, "answered")  # the resend: GRANTED, too late by the client's clock


def retry_of_many(model: LeaseSemaphoreModel) -> None:
    """acquire_many(150, lease=1) runs with its reply lost; the resend lands after its own
    lease ran out: more of its own expired permits than a call gives back."""
    model.start(0, 150, 1)
    model.send_call(0, "reply lost")
    model.tick(2)
    model.send_call(0, "answered")


def late_copy_after_a_give_back(model: LeaseSemaphoreModel) -> None:
    """Both sends of acquire_many(150) are held up; the client raises and its give-back finds
    nothing; the copies land after their lease would have ended, behind 101 expired leases."""
    model.abandon(101, 1)
    model.start(0, 150, 1)
    model.send_call(0, "late")
    model.send_call(0, "late")
    model.send_give_back(0, "answered")
    model.land_copy(0)
    model.tick(2)
    model.land_copy(0)


TRACES = [retry_behind_expired_leases, retry_of_many, late_copy_after_a_give_back]


def play(engine: ServerEngine, trace: Any, overrides: dict[str, bytes] | None = None) -> None:
    model = bound(LeaseSemaphoreModel, engine, overrides)()
    for step in (trace, settle):
        step(model)
        model.conservation()
        model.belief()


def settle(model: LeaseSemaphoreModel) -> None:
    """Every pending call answered, every lease run out: all permits come back."""
    for c in model.clients:
        while c.call is not None:
            model.send_call(c.number, "answered")
        if c.give_back is not None:
            model.send_give_back(c.number, "answered")
    while model.network:
        model.land_copy(0)
    model.tick(5)
    for _ in range(5):  # each call gives back at most 100 expired leases of others
        model.start(1, 1, 1)
        model.send_call(1, "answered")
        model.release_all(1)
    assert model.count() == TOTAL, model.count()


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t.__name__)
def test_issue_36_traces_keep_every_permit(engine: ServerEngine, trace: Any) -> None:
    play(engine, trace)


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t.__name__)
def test_the_unfixed_acquire_loses_permits(engine: ServerEngine, trace: Any) -> None:
    old = {"lease_semaphore_acquire": unfixed.script("lease_semaphore_acquire")}
    with pytest.raises(AssertionError, match=r"free \d+ \+ leased \d+ != 400 set"):
        play(engine, trace, old)
