"""The counting semaphore's scripts under lost replies, late copies and data loss.

A property test (Hypothesis's rule-based state machine) over ``engine.py``, as
``test_lease_semaphore_model.py``: every server step runs the script's own source, with the
KEYS and ARGV the client code built, on the model's explicit state (the count, the total, the
receipts). Clients run ``_core.semaphore.acquire`` (``timeout=0``) and ``release``, each call
sent at most twice (the driver's resend); each send is answered, has its reply lost after the
server ran it, or (an acquire, an undo) is held up in the network and lands later. An acquire
that raises is undone by its request id as the shells do (``undo_call``), by a call that may
itself be lost (the watchdog sends it again) or land late. The adversary also copies the
server's state to a replica, fails over to that copy (any earlier state), or restarts the
server empty, after which the application sets the permits up again (``try_set_permits``).

**Invariants**, after every step:

* conservation, with no data lost on the path: the free count is the total set, less the
  permits of every acquire whose receipt says granted, plus those of every release that ran;
  the total stays what was set; no release reports passing it (no false alarm);
* never silent: once the total the server keeps is above the one set, some release said so
  (``Released.passed``, which the shells turn into a WARNING, an event and a metric), or its
  caller got ``ServerUnavailableError`` (every reply of that release lost: the one way the
  passing cannot be told; a release's first reply lost is told by its resend, from the
  receipt).

``test_the_unfixed_release_raises_the_total_silently`` runs issue #36's failover trace on the
release script from before the fix (``unfixed/``): the total grows and nothing says so.
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

from redlease._core import semaphore as core
from redlease._core.keys import CLASSIC, SemaphoreKeys
from redlease._core.requests import Call
from redlease.errors import InvalidArgumentError, ServerUnavailableError

from . import unfixed
from .engine import ServerEngine, State
from .scripted import ScriptedModel, bound, run_model

KEYS = SemaphoreKeys.for_name("msem", CLASSIC)
TOTAL = 2
CLIENTS = 2
SENDS = 2
NETWORK = 3


@dataclass
class Client:
    """One client: the operation in progress (acquire or release) and the call it waits on,
    the permits it holds, and an undo the shell still has to get to the server."""

    number: int
    op: Any = None
    kind: str = ""
    permits: int = 0
    request_id: str = ""
    call: Call | None = None
    sends: int = 0
    held: int = 0
    undo: Call | None = None
    acquires: dict[str, int] = field(default_factory=dict)
    releases: dict[str, int] = field(default_factory=dict)
    """Request id -> permits, of every acquire and release it sent."""


class SemaphoreModel(ScriptedModel):
    CHANNELS = frozenset({KEYS.channel})

    def __init__(self) -> None:
        super().__init__()
        self.state: State = ()
        self.ids = itertools.count(1)
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.network: list[Call] = []
        self.lost = False
        self.reports = 0
        self.unknown = 0
        """Releases whose caller got ``ServerUnavailableError`` (outcome unknown): one that
        passed the total could not say so."""
        assert self.run(self.try_set_call()) == 1
        self.replica: State = self.state

    # --- the server -----------------------------------------------------------------------

    def value(self, key: str) -> str | None:
        return next((v for k, _, _, v in self.state if k == key), None)

    def try_set_call(self) -> Call:
        request = f"set-{next(self.ids)}"
        op = core.try_set_permits(KEYS, TOTAL, request)
        call = next(op)
        op.close()
        assert isinstance(call, Call)
        return call

    # --- the clients, driven as the shells drive them -------------------------------------

    def _feed(self, c: Client, method: str, value: Any) -> None:
        try:
            request = getattr(c.op, method)(value)
        except StopIteration as done:
            self._done(c, done.value)
        except ServerUnavailableError:
            if c.kind == "acquire":  # the shell undoes it by its request id
                c.undo = core.undo_call(KEYS, c.permits, c.request_id)
            else:  # a release sent twice, both replies lost: it ran (no copy is held up)
                c.held -= c.permits
                self.unknown += 1  # its caller got ServerUnavailableError, not the report
            c.op = c.call = None
        except InvalidArgumentError:  # a release to a semaphore never set (after a restart)
            c.held = 0 if c.kind == "release" else c.held
            c.op = c.call = None
        else:
            assert isinstance(request, Call), request
            c.call, c.sends = request, 0

    def _done(self, c: Client, result: Any) -> None:
        if c.kind == "acquire" and result:
            c.held += c.permits
        elif c.kind == "release":
            c.held -= c.permits
            if result.passed is not None:
                assert result.passed >= 0
                self.reports += 1
        c.op = c.call = None

    def idle(self) -> list[Client]:
        return [c for c in self.clients if c.op is None and c.undo is None]

    @precondition(lambda self: self.idle())
    @rule(data=st.data(), permits=st.integers(1, TOTAL))
    def acquire(self, data: st.DataObject, permits: int) -> None:
        self.start_acquire(data.draw(st.sampled_from(self.idle())).number, permits)

    def start_acquire(self, number: int, permits: int) -> None:
        c = self.clients[number]
        c.kind, c.permits, c.request_id = "acquire", permits, f"a{number}-{next(self.ids)}"
        c.acquires[c.request_id] = permits
        c.op = core.acquire(
            KEYS,
            f"owner-{number}",
            permits=permits,
            timeout=0,
            request_id=c.request_id,
            clock=lambda: 0.0,
        )
        self._feed(c, "send", None)

    @precondition(lambda self: any(c.held > 0 for c in self.idle()))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from([c for c in self.idle() if c.held > 0]))
        self.start_release(c.number, data.draw(st.integers(1, c.held)))

    def start_release(self, number: int, permits: int) -> None:
        c = self.clients[number]
        c.kind, c.permits, c.request_id = "release", permits, f"r{number}-{next(self.ids)}"
        c.releases[c.request_id] = permits
        c.op = core.release(KEYS, permits=permits, request_id=c.request_id)
        self._feed(c, "send", None)

    @precondition(lambda self: any(c.call is not None for c in self.clients))
    @rule(data=st.data(), fate=st.sampled_from(["answered", "reply lost", "late"]))
    def send(self, data: st.DataObject, fate: str) -> None:
        c = data.draw(st.sampled_from([c for c in self.clients if c.call is not None]))
        self.send_call(c.number, fate)

    def send_call(self, number: int, fate: str) -> None:
        c = self.clients[number]
        assert c.call is not None
        if fate == "late" and (c.kind != "acquire" or len(self.network) >= NETWORK):
            fate = "reply lost"  # (a release is never held up: its outcome is resolved above)
        if fate == "late":
            self.network.append(c.call)
            reply = None
        else:
            reply = self.run(c.call)
        if fate == "answered":
            self._feed(c, "send", reply)
            return
        c.sends += 1
        if c.sends >= SENDS:
            self._feed(c, "throw", ServerUnavailableError("replies lost (model)", name=KEYS.name))

    @precondition(lambda self: any(c.undo is not None for c in self.clients))
    @rule(data=st.data(), fate=st.sampled_from(["answered", "reply lost", "late"]))
    def undo(self, data: st.DataObject, fate: str) -> None:
        c = data.draw(st.sampled_from([c for c in self.clients if c.undo is not None]))
        assert c.undo is not None
        if fate == "late" and len(self.network) < NETWORK:
            self.network.append(c.undo)
            return
        self.run(c.undo)
        if fate == "answered":
            c.undo = None

    @precondition(lambda self: self.network)
    @rule(data=st.data())
    def land(self, data: st.DataObject) -> None:
        self.run(self.network.pop(data.draw(st.integers(0, len(self.network) - 1))))

    # --- data loss ------------------------------------------------------------------------

    @rule()
    def sync(self) -> None:
        """The replica catches up."""
        self.replica = self.state

    @rule()
    def fail_over(self) -> None:
        """The replica, with what it had, becomes the server."""
        self.lost = self.lost or self.replica != self.state
        self.state = self.replica

    @rule()
    def restart_empty(self) -> None:
        """The server restarts with nothing; the application sets the permits up again."""
        self.state, self.lost = (), True
        self.try_set()

    @rule()
    def try_set(self) -> None:
        self.run(self.try_set_call())

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def conservation(self) -> None:
        if self.lost:
            return
        taken = sum(
            p
            for c in self.clients
            for r, p in c.acquires.items()
            if self.value(KEYS.receipt(r)) == "1"
        )
        given = sum(
            p
            for c in self.clients
            for r, p in c.releases.items()
            if self.value(KEYS.receipt(r)) is not None
        )
        assert int(self.value(KEYS.name) or 0) == TOTAL - taken + given
        assert self.value(KEYS.total) == str(TOTAL)
        assert self.reports == 0, "a release reported passing the total, with no data lost"

    @invariant()
    def never_silent(self) -> None:
        """Checked once no release waits for its reply (the report comes with the reply)."""
        if any(c.kind == "release" and c.op is not None for c in self.clients):
            return
        total = int(self.value(KEYS.total) or -1)
        assert total <= TOTAL or self.reports + self.unknown > 0, (
            f"the total grew to {total} (set {TOTAL}) and no release said so"
        )


SETTINGS = settings(
    max_examples=200,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_semaphore_model(engine: ServerEngine) -> None:
    run_model(SemaphoreModel, engine, SETTINGS)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_semaphore_model_long(engine: ServerEngine) -> None:
    run_model(SemaphoreModel, engine, settings(SETTINGS, max_examples=500, stateful_step_count=40))


# --- issue #36's traces ---------------------------------------------------------------------


def failover_trace(model: SemaphoreModel) -> None:
    """Every permit is taken on the master, the replica misses it and is promoted; another
    client takes them there; both release."""
    model.start_acquire(0, TOTAL)
    model.send_call(0, "answered")
    model.fail_over()
    model.start_acquire(1, TOTAL)
    model.send_call(1, "answered")
    for number in (0, 1):
        model.start_release(number, TOTAL)
        model.send_call(number, "answered")


def restart_trace(model: SemaphoreModel) -> None:
    """A holder's server restarts empty; the application sets the permits up again; the
    holder releases (its first reply lost: the resend is recognised by its receipt)."""
    model.start_acquire(0, 1)
    model.send_call(0, "answered")
    model.restart_empty()
    model.start_release(0, 1)
    model.send_call(0, "reply lost")
    model.send_call(0, "answered")


@pytest.mark.parametrize("trace", [failover_trace, restart_trace], ids=lambda t: t.__name__)
def test_issue_36_traces_are_reported(engine: ServerEngine, trace: Any) -> None:
    model = bound(SemaphoreModel, engine)()
    trace(model)
    model.never_silent()
    assert model.reports == 1
    assert model.value(KEYS.total) == str(TOTAL + (TOTAL if trace is failover_trace else 1))


@pytest.mark.parametrize("trace", [failover_trace, restart_trace], ids=lambda t: t.__name__)
def test_the_unfixed_release_raises_the_total_silently(engine: ServerEngine, trace: Any) -> None:
    model = bound(
        SemaphoreModel, engine, {"semaphore_release": unfixed.script("semaphore_release")}
    )()
    trace(model)
    with pytest.raises(AssertionError, match="no release said so"):
        model.never_silent()
