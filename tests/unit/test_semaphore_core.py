"""The semaphore, lease semaphore and latch core: scripts, keys, arguments, the wait loop and
the record of lease permits, driven by hand with a fake clock (no server)."""

from __future__ import annotations

import hashlib
import math
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from redlease._core import arguments, latch, receipts, scripts, waiting
from redlease._core import lease_semaphore as lease_core
from redlease._core import permits as permit_core
from redlease._core import semaphore as core
from redlease._core.keys import LeaseSemaphoreKeys, SemaphoreKeys, hash_slot
from redlease._core.lock import OUTAGE_TOLERANCE, PLACE_MS, RECHECK, drift
from redlease._core.requests import Call, Sleep, Subscribe, WaitWake
from redlease.errors import InvalidArgumentError, LeaseLostError, ServerUnavailableError

from ._fakes import FakeClock, Finished, finish, first_call, step
from .test_scripts import _redis_calls, header_arity

OWNER = "5f0c2a9e-client:7"
SEM = SemaphoreKeys.for_name("jobs")
LSEM = LeaseSemaphoreKeys.for_name("workers")
LATCH = latch.LatchKeys.for_name("gate")
LUA_DIR = Path(str(resources.files("redlease").joinpath("lua")))
MINE = (*core.SCRIPTS, *lease_core.SCRIPTS, waiting.SEMAPHORE_LEAVE, *latch.SCRIPTS)


def _permit(keys: LeaseSemaphoreKeys, permit: str) -> permit_core.Permit:
    return permit_core.Permit(keys=keys, permit_id=permit, watched=True, renewed_at=0.0)


# --- scripts --------------------------------------------------------------------------------


def test_every_primitive_lua_file_is_a_loaded_script() -> None:
    """Each semaphore_*, lease_semaphore_* and latch_* file is loaded once, by these cores,
    and shares no name or source with any other script."""
    names = [s.name for s in MINE]
    assert len(set(names)) == len(names)
    files = {
        p.stem
        for p in LUA_DIR.glob("*.lua")
        if p.stem.startswith(("semaphore_", "lease_semaphore_", "latch_"))
    }
    assert sorted(names) == sorted(files)
    assert not {s.name for s in scripts.ALL} & set(names)
    assert not {s.sha for s in scripts.ALL} & {s.sha for s in MINE}
    assert len({s.sha for s in MINE}) == len(names)


@pytest.mark.parametrize("script", MINE, ids=lambda s: s.name)
def test_sha_is_sha1_of_the_source(script: scripts.Script) -> None:
    on_disk = (LUA_DIR / f"{script.name}.lua").read_bytes()
    assert script.source == on_disk and script.sha == hashlib.sha1(on_disk).hexdigest()


def _calls() -> list[tuple[Call, int]]:
    """Every kind of Call these cores build, with the number of permits it is about."""
    permit = lease_core.new_permit_id()
    two = [lease_core.new_permit_id() for _ in range(2)]
    calls = [
        (first_call(core.try_set_permits(SEM, 3)), 1),
        (first_call(core.add_permits(SEM, 2)), 1),
        (first_call(core.add_permits(SEM, -2, "r6")), 1),
        (first_call(core.set_permits(SEM, 4)), 1),
        (core.acquire_call(SEM, OWNER, 2, "r1", register=True), 1),
        (core.release_call(SEM, 2, "r2"), 1),
        (first_call(core.release(SEM, permits=1, request_id="r3")), 1),
        (first_call(core.drain_permits(SEM, "r5")), 1),
        (first_call(core.status(SEM)), 1),
        (waiting.leave_call(SEM.waiters, OWNER), 1),
        (first_call(lease_core.lease_try_set_permits(LSEM, 2)), 1),
        (lease_core.lease_acquire_call(LSEM, OWNER, permit, 30.0, register=False), 1),
        (lease_core.lease_release_call(LSEM, permit, "r4"), 1),
        (first_call(lease_core.lease_status(LSEM)), 1),
        (first_call(lease_core.renew(LSEM, permit, 10.0)), 1),
        (first_call(lease_core.lease_add_permits(LSEM, -3)), 1),
        (first_call(lease_core.lease_set_permits(LSEM, 5)), 1),
        (lease_core.lease_acquire_call(LSEM, OWNER, permit, 30.0, register=True, more=two), 3),
        (lease_core.release_many_call(LSEM, [permit, *two], ["a", "b", "c"]), 3),
        (first_call(lease_core.lease_release_many(LSEM, two, ["a", "b"])), 2),
        (first_call(lease_core.update_lease(LSEM, permit, 5.0)), 1),
        (first_call(lease_core.lease_expire(LSEM, 60.0)), 1),
        (first_call(latch.delete(LATCH)), 1),
        (first_call(latch.try_set_count(LATCH, 4)), 1),
        (first_call(latch.count_down(LATCH)), 1),
        (latch.check_call(LATCH, OWNER, register=True), 1),
        (first_call(latch.status(LATCH)), 1),
    ]
    for call, n in list(calls):
        if call.undo is not None:
            back = call.undo([core.GRANTED, 30000, 1])
            assert back is not None
            calls.append((back, n))
            assert call.undo([core.SHORT, -1, 0]) is None
    for n in (1, 2, permit_core.BATCH, permit_core.BATCH + 5):
        records = [_permit(LSEM, lease_core.new_permit_id()) for _ in range(n)]
        for batch, call in permit_core.PermitTable.calls(records, 30.0):
            calls.append((call, len(batch)))
    return calls


def test_calls_cover_every_script() -> None:
    assert {c.script.name for c, _ in _calls()} == {s.name for s in MINE}


@pytest.mark.parametrize(
    ("call", "n"), _calls(), ids=lambda v: v.script.name if isinstance(v, Call) else str(v)
)
def test_calls_match_the_script_headers(call: Call, n: int) -> None:
    assert header_arity(call.script.name, n) == (len(call.keys), len(call.args))
    assert all(isinstance(k, str) and k for k in call.keys)
    assert all(isinstance(a, str | int | bytes) and not isinstance(a, bool) for a in call.args)
    # every key of a call shares the primitive's cluster slot
    assert len({hash_slot(k) for k in call.keys if not k.startswith("redisson_")}) == 1


@pytest.mark.parametrize("script", MINE, ids=lambda s: s.name)
def test_scripts_publish_only_on_the_channel_key(script: scripts.Script) -> None:
    for command, args in _redis_calls(script.source.decode()):
        assert command not in {"keys", "scan", "eval", "evalsha", "flushall", "flushdb"}
        assert command != "publish", "the publish command is an argument (publish or spublish)"
        if command.startswith("argv["):
            assert args[0] in {"KEYS[2]", "KEYS[3]"}


def test_receipt_lifetime_is_passed_not_written_in_the_scripts() -> None:
    assert core.release_call(SEM, 1, "r").args[-2] == receipts.receipt_ms()
    assert (
        lease_core.lease_release_call(LSEM, lease_core.new_permit_id(), "r").args[-2]
        == receipts.receipt_ms()
    )
    assert first_call(latch.count_down(LATCH)).args == (receipts.receipt_ms(), "publish")
    assert first_call(latch.delete(LATCH)).args == (receipts.receipt_ms(), "publish")
    assert core.acquire_call(SEM, OWNER, 1, "r", register=False).args[-1] == receipts.receipt_ms()
    assert core.undo_call(SEM, 1, "r").args[1] == receipts.receipt_ms()
    assert first_call(core.drain_permits(SEM, "r")).args == (receipts.receipt_ms(),)
    assert first_call(core.add_permits(SEM, 1)).args[2] == receipts.receipt_ms()
    assert first_call(lease_core.lease_add_permits(LSEM, 1)).args[2] == receipts.receipt_ms()
    assert (
        lease_core.release_many_call(LSEM, [lease_core.new_permit_id()], ["r"]).args[0]
        == receipts.receipt_ms()
    )
    for call in (
        first_call(core.try_set_permits(SEM, 2)),
        first_call(lease_core.lease_try_set_permits(LSEM, 2)),
        first_call(latch.try_set_count(LATCH, 2)),
    ):
        assert call.args[-1] == receipts.receipt_ms()


def test_receipts_outlive_the_clients_window_by_a_margin() -> None:
    """Issue #23, defect 6: a receipt lives from when its request RAN, the client's retries
    and undos are sent within ``unsure_for`` of its FIRST send (before it ran): the receipt's
    life covers that window with a margin, and a reply read within ``conclusive_for`` (the
    life less the drift allowance) still proves what the receipt says."""
    windows = receipts.WINDOWS
    assert windows.receipt_ms == round((windows.unsure_for + windows.margin) * 1000)
    assert windows.margin > 0 and windows.unsure_for < windows.conclusive_for
    assert windows.conclusive_for < windows.receipt_ms / 1000
    assert receipts.receipt_ms() == windows.receipt_ms
    small = receipts.Windows(unsure_for=2.0, margin=1.0)
    assert small.receipt_ms == 3000 and small.conclusive_for == 3.0 - drift(3.0)


def test_the_receipt_lifetime_follows_the_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receipts, "WINDOWS", receipts.Windows(unsure_for=2.0, margin=0.5))
    assert core.undo_call(SEM, 1, "r").args[1] == 2500
    assert first_call(latch.count_down(LATCH)).args[0] == 2500
    table = permit_core.PermitTable()
    assert table.undo_later(core.undo_call(SEM, 1, "r"), "jobs", 10.0).until == 12.0


# --- keys and names -------------------------------------------------------------------------


def test_redisson_key_and_channel_names() -> None:
    assert SEM.name == "jobs" and SEM.channel == "redisson_sc:{jobs}"
    assert LSEM.leases == "{workers}:timeout" and LSEM.channel == "redisson_sc:{workers}"
    assert LATCH.channel == "redisson_countdownlatch__channel__{gate}"
    tagged = LeaseSemaphoreKeys.for_name("{user:7}:slots")
    assert tagged.leases == "{user:7}:slots:timeout"
    assert tagged.channel == "redisson_sc:{user:7}:slots"


def test_latch_names_with_a_tag_are_refused_on_a_cluster_only() -> None:
    assert latch.keys_for("{user:7}:done", cluster=False).name == "{user:7}:done"
    assert latch.keys_for("done", cluster=True).name == "done"
    with pytest.raises(InvalidArgumentError, match="cluster"):
        latch.keys_for("{user:7}:done", cluster=True)


_CHARS = st.characters(blacklist_categories=["Cs"])  # text that UTF-8 can encode
_PLAIN = st.characters(blacklist_categories=["Cs"], blacklist_characters="{}")
_NAMES = st.one_of(
    st.text(_PLAIN, min_size=1, max_size=20),
    st.builds(
        lambda a, t, b: f"{a}{{{t}}}{b}",
        st.text(_CHARS, max_size=5).filter(lambda s: "{" not in s),
        st.text(_PLAIN, min_size=1, max_size=8),
        st.text(_CHARS, max_size=5),
    ),
)


@given(_NAMES)
def test_every_key_shares_the_name_slot(name: str) -> None:
    name = arguments.name(name, "semaphore")
    slot = hash_slot(name)
    sem, lsem, gate = (
        SemaphoreKeys.for_name(name),
        LeaseSemaphoreKeys.for_name(name),
        latch.LatchKeys.for_name(name),
    )
    for key in (sem.total, sem.waiters, sem.receipt("r"), lsem.leases, lsem.receipt("x")):
        assert hash_slot(key) == slot, key
    for key in (gate.waiters, gate.receipt("r")):
        assert hash_slot(key) == slot, key


# --- arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "2", None])
def test_permits_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="permits"):
        arguments.count(bad, "permits")


@pytest.mark.parametrize("bad", [0, -5, False, 3.5, "1"])
def test_count_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="count"):
        latch.count_arg(bad)


@pytest.mark.parametrize("bad", [-0.001, -1, math.nan, math.inf, "1", True])
def test_timeout_must_be_none_or_seconds(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout"):
        arguments.wait(bad)


def test_timeouts_and_leases_accept_timedelta_and_zero_means_try_once() -> None:
    from datetime import timedelta

    assert arguments.wait(None) is None
    assert arguments.wait(0) == 0.0
    assert arguments.wait(timedelta(seconds=2)) == 2.0
    assert arguments.lease(timedelta(milliseconds=1500)) == 1.5
    for bad in (0, -1, math.inf, "5"):
        with pytest.raises(InvalidArgumentError, match="lease"):
            arguments.lease(bad)


@pytest.mark.parametrize("bad", ["", "xyz", "0" * 31, "0" * 33, "g" * 32, 5, None])
def test_permit_id_must_be_32_hex_digits(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="permit_id"):
        arguments.permit_id(bad)


def test_permit_ids_are_fresh_16_byte_hex() -> None:
    ids = {lease_core.new_permit_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(bytes.fromhex(i)) == 16 for i in ids)
    assert arguments.permit_id("ABCDEF0123456789ABCDEF0123456789") == "abcdef0123456789" * 2


@pytest.mark.parametrize("bad", ["", "a}b{", "x{}y", "\ud800", 7, None])
def test_names_must_be_usable(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="name"):
        arguments.name(bad, "semaphore")


# --- the counting semaphore's operations ---------------------------------------------------


def _start(op: Any) -> Any:
    """Start a blocking wait: it first listens if the client already does (here: not)."""
    first = step(op, first=True)
    assert isinstance(first, Subscribe) and first.only_if_live
    return step(op, False)


def test_acquire_waits_then_succeeds_with_one_request_id() -> None:
    clock = FakeClock()
    op = core.acquire(SEM, OWNER, permits=2, timeout=10.0, clock=clock)
    call = _start(op)
    assert call.script is core.SEMAPHORE_ACQUIRE and call.args[2] == PLACE_MS
    receipt = call.keys[3]
    sub = step(op, [core.SHORT, 1, 3])
    assert sub == Subscribe(SEM.channel, OWNER, waiting.leave_call(SEM.waiters, OWNER))
    again = step(op, True)  # subscribed: try again at once
    assert again.keys[3] == receipt
    wait = step(op, [core.SHORT, 0, 3])
    assert wait == WaitWake(RECHECK)
    clock.advance(1.0)
    assert step(op, True).keys[3] == receipt  # the same request id on every try
    assert finish(op, [core.GRANTED, 0, 3]) is True


def test_acquire_too_many_raises_and_single_try_does_not_listen() -> None:
    op = core.acquire(SEM, OWNER, permits=5, timeout=None)
    call = _start(op)
    with pytest.raises(InvalidArgumentError, match="permits=5"):
        step(op, [core.TOO_MANY, 1, 3])
    once = core.acquire(SEM, OWNER, permits=1, timeout=0)
    call = step(once, first=True)
    assert isinstance(call, Call) and call.args[2] == 0  # no registration as a waiter
    assert finish(once, [core.SHORT, 0, 3]) is False


def test_an_abandoned_acquire_is_undone_by_its_request_id() -> None:
    """The undo names the acquire's receipt (not a fresh release), so it gives back only
    what that acquire took, once, and stops a late copy of it; the scripts' interfaces."""
    take = core.acquire_call(SEM, OWNER, 2, "r1", register=False)
    assert take.undo is not None and take.undo([core.GRANTED, 1, 3]) == core.undo_call(SEM, 2, "r1")
    undo = core.undo_call(SEM, 2, "r1")
    assert undo.script is core.SEMAPHORE_UNDO
    assert (
        undo.keys
        == (SEM.name, SEM.channel, SEM.receipt("r1"))
        == (
            "jobs",
            "redisson_sc:{jobs}",
            take.keys[3],
        )
    )
    assert undo.args == (2, receipts.receipt_ms(), "publish")
    assert header_arity("semaphore_undo", 1) == (3, 3)
    assert header_arity("semaphore_acquire", 1) == (4, 4)
    op = core.acquire(SEM, OWNER, permits=1, timeout=0, request_id="r1")
    step(op, first=True)
    assert finish(op, [core.UNDONE, 3, 3]) is False  # given up already: never granted


def test_release_reports_over_release_and_unset() -> None:
    op = core.release(SEM, permits=2, request_id="r")
    step(op, first=True)
    with pytest.raises(InvalidArgumentError, match="permits=2"):
        step(op, [core.TOO_MANY, 2, 3])
    op = core.release(SEM, permits=1, request_id="r")
    step(op, first=True)
    with pytest.raises(InvalidArgumentError, match="never taken"):
        step(op, [core.NOT_SET, 0, -1])
    op = core.release(SEM, permits=1, request_id="r")
    step(op, first=True)
    assert finish(op, [core.RELEASED, 3, 3, -1]) == core.Released(available=3)
    op = core.release(SEM, permits=1, request_id="r")
    step(op, first=True)
    passed = finish(op, [core.RELEASED, 2, 2, 1])  # the count went past the total of 1
    assert passed == core.Released(available=2, passed=1)
    assert "set_permits(1)" in core.over_total("sem", 1, passed)


def test_status_and_statistics() -> None:
    op = core.status(SEM)
    step(op, first=True)
    status = finish(op, [-1, -1, 0, -2])
    stats = core.statistics(status, "jobs", 0)
    assert (stats.permits, stats.available, stats.holders, stats.ttl) == (None, 0, None, None)
    op = core.status(SEM)
    step(op, first=True)
    stats = core.statistics(finish(op, [1, 3, 2, 5000]), "jobs", 1)
    assert (stats.permits, stats.available, stats.holders, stats.waiters) == (3, 1, 2, 2)
    assert (stats.local_waiters, stats.ttl) == (1, 5.0)
    lease_op = lease_core.lease_status(LSEM)
    step(lease_op, first=True)
    stats = lease_core.lease_statistics(finish(lease_op, [0, 2, 1, 1500, 3, 1]), "workers", 0)
    assert (stats.permits, stats.available, stats.holders, stats.ttl) == (3, 1, 2, 1.5)
    lease_op = lease_core.lease_status(LSEM)
    step(lease_op, first=True)
    stats = lease_core.lease_statistics(finish(lease_op, [0, 0, 0, -1, 0, 0]), "workers", 0)
    assert (stats.permits, stats.available, stats.holders, stats.ttl) == (None, 0, 0, None)
    lease_op = lease_core.lease_status(LSEM)  # permits taken away below the leased ones: -1 free
    step(lease_op, first=True)
    stats = lease_core.lease_statistics(finish(lease_op, [-1, 3, 0, 900, 0, 1]), "workers", 0)
    assert (stats.permits, stats.available, stats.holders) == (2, -1, 3)


# --- the wait loop --------------------------------------------------------------------------

_REPLIES = st.lists(
    st.tuples(st.integers(-1, 20_000), st.floats(0.0, 3.0), st.booleans()),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(timeout=st.one_of(st.none(), st.floats(0.01, 30.0)), replies=_REPLIES)
def test_lease_waits_are_bounded_and_give_up_on_time(
    timeout: float | None, replies: list[tuple[int, float, bool]]
) -> None:
    """Whatever the server answers, every wait is bounded by the soonest lease end, our
    deadline and RECHECK; every try asks for the same permit; giving up leaves the line."""
    clock = FakeClock()
    deadline = None if timeout is None else clock() + timeout
    op = lease_core.lease_acquire(LSEM, OWNER, lease=30.0, timeout=timeout, clock=clock)
    request = _start(op)
    permit = request.args[0]
    hint = math.inf
    subscribed = False
    for soonest_ms, elapsed, woken in replies:
        assert isinstance(request, Call) and request.script is lease_core.LEASE_SEMAPHORE_ACQUIRE
        assert request.args[0] == permit
        hint = math.inf if soonest_ms < 0 else soonest_ms / 1000
        try:
            request = step(op, [core.SHORT, soonest_ms, 0])
        except Finished as done:
            assert done.value is None
            return
        if isinstance(request, Subscribe):
            assert not subscribed
            subscribed = True
            request = step(op, True)
            continue
        if request == waiting.leave_call(LSEM.waiters, OWNER):
            assert deadline is not None and clock() >= deadline
            with pytest.raises(Finished) as left:
                step(op, 1)
            assert left.value.value is None
            return
        assert isinstance(request, WaitWake)
        limit = min(hint, RECHECK, math.inf if deadline is None else deadline - clock())
        assert 0 <= request.timeout <= limit + 1e-9
        clock.advance(min(elapsed, request.timeout))
        request = step(op, woken)


def test_lease_grant_that_comes_too_late_is_given_back() -> None:
    clock = FakeClock()
    op = lease_core.lease_acquire(LSEM, OWNER, lease=1.0, timeout=10.0, clock=clock)
    call = _start(op)
    permit = call.args[0]
    clock.advance(1.0 - drift(1.0))  # the reply took the whole lease
    back = step(op, [core.GRANTED, 1000, 0])
    assert back.script is lease_core.LEASE_SEMAPHORE_RELEASE and back.args[0] == permit
    sub = step(op, [core.RELEASED, 1])
    assert isinstance(sub, Subscribe)
    step(op, True)
    got = finish(op, [core.GRANTED, 1000, 0])
    assert got.permit_id == bytes(permit).hex() and got.ttl == 1.0


def test_outage_is_ridden_out_only_while_listening() -> None:
    clock = FakeClock()
    op = core.acquire(SEM, OWNER, permits=1, timeout=None, clock=clock)
    step(op, first=True)
    step(op, False)
    with pytest.raises(ServerUnavailableError):  # never listened: raise at once
        op.throw(ServerUnavailableError("down"))
    op = core.acquire(SEM, OWNER, permits=1, timeout=None, clock=clock)
    step(op, first=True)
    assert isinstance(step(op, True), Call)  # already listening
    sleeps = 0
    while True:
        try:
            request = op.throw(ServerUnavailableError("down"))
        except ServerUnavailableError:
            break
        assert isinstance(request, Sleep) and 0 <= request.seconds <= 0.5
        clock.advance(request.seconds + 0.1)
        assert isinstance(step(op, None), Call)
        sleeps += 1
        assert sleeps < 1000
    assert sleeps >= OUTAGE_TOLERANCE / 0.6


def _lost_try_then_outage(clock: FakeClock, unsure: receipts.Unsure) -> Any:
    """A waiting acquire (listening) whose try at ``clock.now`` got no reply."""
    op = core.acquire(SEM, OWNER, permits=1, timeout=None, clock=clock, unsure=unsure)
    step(op, first=True)
    assert isinstance(step(op, True), Call)  # already listening: the first try
    assert isinstance(step(op, [core.SHORT, 0, 1]), WaitWake)
    clock.advance(3.0)
    assert isinstance(step(op, True), Call)  # woken: this try's reply is lost
    assert unsure.since == clock.now and unsure.tries == 1
    return op


def test_a_try_whose_reply_was_lost_is_sent_again_only_within_its_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue #23, class (c): a try whose reply was lost may have been granted; a retry is
    recognised by its receipt only while that lives. The wait loop rides out the outage but
    sends no try after the first half of the window (the undo has the other half), even when
    it would ride out a longer outage, then raises; ``unsure.since`` is the lost try's send
    time, for the undo."""
    monkeypatch.setattr(receipts, "WINDOWS", receipts.Windows(unsure_for=4.0, margin=1.0))
    assert OUTAGE_TOLERANCE > 2.0
    clock = FakeClock()
    unsure = receipts.Unsure()
    op = _lost_try_then_outage(clock, unsure)
    lost_at = clock.now
    last_sent = lost_at
    with pytest.raises(ServerUnavailableError):
        for _ in range(10_000):
            request = op.throw(ServerUnavailableError("down"))
            assert isinstance(request, Sleep)
            clock.advance(request.seconds)
            assert isinstance(step(op, None), Call)
            last_sent = clock.now
            clock.advance(0.1)  # each try takes a while to fail
    assert unsure.since == lost_at
    assert lost_at + 1.0 < last_sent <= lost_at + 2.0  # rode it out, within the half window
    assert clock.now - lost_at < OUTAGE_TOLERANCE


def test_a_retry_answered_after_the_receipt_may_be_gone_proves_nothing() -> None:
    """A retry of a lost try answering "not granted" read after the lost try's receipt may
    have expired cannot tell whether that try took the permits: the acquire raises (and is
    undone, which reports it) instead of counting it as "not granted" and waiting on."""
    clock = FakeClock()
    unsure = receipts.Unsure()
    op = _lost_try_then_outage(clock, unsure)
    lost_at = clock.now
    assert isinstance(op.throw(ServerUnavailableError("down")), Sleep)
    clock.advance(0.1)
    assert isinstance(step(op, None), Call)  # the retry, answered very late
    clock.advance(receipts.WINDOWS.conclusive_for + 1)
    with pytest.raises(ServerUnavailableError, match="no longer knowable"):
        step(op, [core.SHORT, 0, 1])
    assert unsure.since == lost_at
    # answered in time, the same reply settles it: the wait goes on, nothing is unknown
    clock = FakeClock()
    unsure = receipts.Unsure()
    op = _lost_try_then_outage(clock, unsure)
    assert isinstance(op.throw(ServerUnavailableError("down")), Sleep)
    clock.advance(0.1)
    assert isinstance(step(op, None), Call)
    assert isinstance(step(op, [core.SHORT, 0, 1]), WaitWake)
    assert unsure.since is None


def test_a_single_try_answered_late_is_still_its_own_answer() -> None:
    clock = FakeClock()
    unsure = receipts.Unsure()
    op = core.acquire(SEM, OWNER, permits=1, timeout=0, clock=clock, unsure=unsure)
    step(op, first=True)
    clock.advance(receipts.WINDOWS.receipt_ms)  # a hung server answers very late
    assert finish(op, [core.SHORT, 0, 1]) is False
    assert unsure.since is None


def test_a_drain_records_its_first_send_until_answered() -> None:
    clock = FakeClock()
    unsure = receipts.Unsure()
    op = core.drain_permits(SEM, "r", unsure, clock)
    step(op, first=True)
    assert unsure.since == clock.now
    assert finish(op, 3) == 3 and unsure.since is None


def test_an_undo_that_found_nothing_too_late_cannot_tell() -> None:
    """Issue #23, defect 6: an undo that found no receipt proves its acquire never ran only
    while that receipt would have lived; read later, it proves nothing (reported by the
    shells as "may stay taken", never counted as done). One that gave permits back, and a
    lease give-back (the permit itself is the record), always tell."""
    windows = receipts.WINDOWS
    undo = permit_core.pending_undo(core.undo_call(SEM, 1, "r"), "jobs", 100.0)
    assert undo.counting and undo.until == 100.0 + windows.unsure_for
    assert permit_core.undo_settled(undo, [0, 3], 100.0 + windows.unsure_for)
    assert permit_core.undo_settled(undo, [0, 3], 100.0 + windows.conclusive_for)
    assert not permit_core.undo_settled(undo, [0, 3], 100.0 + windows.conclusive_for + 0.01)
    assert permit_core.undo_settled(undo, [1, 3], 100.0 + 10 * windows.receipt_ms)
    give_back = permit_core.pending_undo(
        lease_core.give_back_call(LSEM, [lease_core.new_permit_id()]), "workers", 100.0
    )
    assert not give_back.counting
    assert permit_core.undo_settled(give_back, [0, 3], 100.0 + 10 * windows.receipt_ms)


def test_a_permit_granted_with_less_left_than_asked_is_lost_by_what_was_left() -> None:
    """Convention 2 of issue #23: a try retried after a lost reply finds its permit granted
    earlier, with less of the lease left than was asked; when renewal cannot reach the
    server, the client counts that permit lost when what was left ran out, not a whole
    lease later. Once renewed, the renewal's lease counts."""
    table = permit_core.PermitTable()
    short = table.granted(
        LSEM, lease_core.Granted(lease_core.new_permit_id(), 4.0, 0.0), watched=True, listener=None
    )
    full = table.granted(
        LSEM, lease_core.Granted(lease_core.new_permit_id(), 30.0, 0.0), watched=True, listener=None
    )
    assert table.renewal_failed([short, full], 3.9, 30.0) == []
    gone = table.renewal_failed([short, full], 4.0, 30.0)
    assert [record for record, _ in gone] == [short]
    renewed = table.granted(
        LSEM, lease_core.Granted(lease_core.new_permit_id(), 4.0, 0.0), watched=True, listener=None
    )
    table.renewed([renewed], [1], 1.0)
    assert table.renewal_failed([renewed], 30.9, 30.0) == []
    assert len(table.renewal_failed([renewed], 31.0, 30.0)) == 1


def test_latch_wait_returns_at_zero_and_leaves_on_timeout() -> None:
    clock = FakeClock()
    op = latch.wait(LATCH, OWNER, timeout=1.0, clock=clock)
    call = _start(op)
    assert call == latch.check_call(LATCH, OWNER, register=True)
    assert isinstance(step(op, 3), Subscribe)
    assert isinstance(step(op, True), Call)
    wait = step(op, 3)
    assert wait == WaitWake(1.0)
    clock.advance(1.0)
    step(op, False)
    assert step(op, 3) == waiting.leave_call(LATCH.waiters, OWNER)
    assert finish(op, 1) is False
    op = latch.wait(LATCH, OWNER, timeout=None, clock=clock)
    _start(op)
    assert finish(op, 0) is True


def test_release_errors() -> None:
    permit = lease_core.new_permit_id()
    assert lease_core.release_error(LSEM, permit, core.RELEASED, True, None) is None
    lost = lease_core.release_error(LSEM, permit, core.LOST, False, None)
    assert isinstance(lost, LeaseLostError) and lost.owner == permit
    ours = lease_core.release_error(LSEM, permit, core.UNKNOWN, True, None)
    assert isinstance(ours, LeaseLostError)
    known = LeaseLostError("x", name="workers", owner=permit)
    assert lease_core.release_error(LSEM, permit, core.UNKNOWN, False, known) is known
    unknown = lease_core.release_error(LSEM, permit, core.UNKNOWN, False, None)
    assert isinstance(unknown, InvalidArgumentError) and "permit_id" in str(unknown)


# --- the record of lease permits ------------------------------------------------------------


def test_renewal_calls_group_by_semaphore_and_batch() -> None:
    other = LeaseSemaphoreKeys.for_name("other")
    records = [_permit(LSEM if i % 3 else other, lease_core.new_permit_id()) for i in range(600)]
    calls = permit_core.PermitTable.calls(records, 9.0)
    seen = []
    for batch, call in calls:
        assert len(batch) <= permit_core.BATCH
        assert len({p.keys.name for p in batch}) == 1
        assert call.keys[1] == batch[0].keys.leases and call.args[:2] == (9000, "publish")
        assert list(call.args[2:]) == [bytes.fromhex(p.permit_id) for p in batch]
        seen.extend(batch)
    assert sorted(p.permit_id for p in seen) == sorted(p.permit_id for p in records)


def test_pending_undos_are_kept_until_sent_or_too_old() -> None:
    table = permit_core.PermitTable()
    first = table.undo_later(core.undo_call(SEM, 1, "a"), "jobs", 0.0)
    second = table.undo_later(core.undo_call(SEM, 2, "b"), "jobs", 10.0)
    assert table.undos_pending == 2
    assert table.undo_round(5.0) == ([(first, first.call), (second, second.call)], [])
    table.undo_done(first)
    assert table.undo_round(5.0) == ([(second, second.call)], [])
    assert table.undo_round(10.0 + receipts.WINDOWS.unsure_for + 1) == (
        [],
        [second],
    )  # its receipt is gone
    assert table.undos_pending == 0


def test_a_retried_release_sends_the_same_request_id() -> None:
    table = permit_core.PermitTable()
    permit = lease_core.new_permit_id()
    table.granted(LSEM, lease_core.Granted(permit, 30.0, 0.0), watched=True, listener=None)
    request_id = table.begin_release(permit, 1.0)
    assert table.watched() == []  # its release's outcome is unknown: not renewed
    assert table.begin_release(permit, 2.0) == request_id  # the retry: the same request
    assert table.released(permit) is not None
    assert table.begin_release(permit, 3.0) != request_id  # a new release: a new request
    table.released(permit)
    other = lease_core.new_permit_id()
    table.granted(LSEM, lease_core.Granted(other, 30.0, 0.0), watched=True, listener=None)
    table.begin_release(other, 4.0)
    table.begin_release(permit, 5.0 + receipts.WINDOWS.unsure_for)  # the other one's is too old now
    assert table.get(other) is None


class PermitTableMachine(RuleBasedStateMachine):
    """Grants, releases (some with an unknown outcome), renewals and failures in any order: a
    permit is held, lost or forgotten, never two at once; only held, watched, not-releasing
    permits are renewed; a permit whose release's outcome is unknown is never reported lost
    and its next release sends the same request id; each loss is reported once."""

    def __init__(self) -> None:
        super().__init__()
        self.table = permit_core.PermitTable()
        self.now = 0.0
        self.held: dict[str, bool] = {}  # id -> watched
        self.releasing: dict[str, tuple[str, float]] = {}  # id -> (request id, first sent)
        self.lost: set[str] = set()
        self.reported: list[str] = []
        self.minted = 0  # deterministic ids: hypothesis replays must draw the same

    @rule(watched=st.booleans(), other=st.booleans())
    def grant(self, watched: bool, other: bool) -> None:
        keys = LeaseSemaphoreKeys.for_name("other") if other else LSEM
        self.minted += 1
        granted = lease_core.Granted(f"{self.minted:032x}", 30.0, self.now)
        self.table.granted(keys, granted, watched=watched, listener=None)
        self.held[granted.permit_id] = watched

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def begin_release(self, data: st.DataObject) -> None:
        permit = data.draw(st.sampled_from(sorted(self.held)))
        request_id = self.table.begin_release(permit, self.now)
        for other, (_, sent_at) in list(self.releasing.items()):
            if other != permit and self.now - sent_at > receipts.WINDOWS.unsure_for:
                del self.releasing[other], self.held[other]  # too old: forgotten
        if permit in self.releasing:  # a retry of a release whose outcome is unknown
            assert request_id == self.releasing[permit][0]
        else:
            self.releasing[permit] = (request_id, self.now)

    @precondition(lambda self: self.releasing)
    @rule(data=st.data(), done=st.booleans())
    def end_release(self, data: st.DataObject, done: bool) -> None:
        """The server answered (``done``), or the reply was lost: the outcome is unknown and
        the permit stays releasing until a retry tells."""
        permit = data.draw(st.sampled_from(sorted(self.releasing)))
        if done:
            assert self.table.released(permit) is not None
            del self.held[permit], self.releasing[permit]

    @rule(data=st.data(), elapsed=st.floats(0.0, 20.0))
    def renewal_round(self, data: st.DataObject, elapsed: float) -> None:
        self.now += elapsed
        watched = self.table.watched()
        assert {p.permit_id for p in watched} == {
            p for p, w in self.held.items() if w and p not in self.releasing
        }
        for batch, _call in permit_core.PermitTable.calls(watched, 30.0):
            if data.draw(st.booleans()):
                reply = data.draw(
                    st.lists(st.sampled_from([0, 1]), min_size=len(batch), max_size=len(batch))
                )
                gone = self.table.renewed(batch, reply, self.now)
            else:
                gone = self.table.renewal_failed(batch, self.now, 30.0)
            for record, error in gone:
                assert isinstance(error, LeaseLostError) and error.owner == record.permit_id
                self.reported.append(record.permit_id)
                del self.held[record.permit_id]
                self.lost.add(record.permit_id)

    @precondition(lambda self: self.lost)
    @rule(data=st.data())
    def release_a_lost_one(self, data: st.DataObject) -> None:
        permit = data.draw(st.sampled_from(sorted(self.lost)))
        assert self.table.take_lost(permit) is not None
        assert self.table.released(permit) is None
        self.lost.discard(permit)

    @invariant()
    def states_are_exclusive(self) -> None:
        assert len(self.table) == len(self.held)
        assert not set(self.held) & self.lost
        assert len(self.reported) == len(set(self.reported))
        for permit in self.held:
            assert self.table.get(permit) is not None


PermitTableMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestPermitTable = PermitTableMachine.TestCase


# --- what Redisson's tests expect (issue #13 item 6) -----------------------------------------


def test_zero_permits_succeed_at_once_and_send_nothing() -> None:
    """Redisson's ``tryAcquire(0)``: True at once, nothing taken, no round trip."""
    with pytest.raises(Finished) as done:
        step(core.acquire(SEM, OWNER, permits=0, timeout=None), first=True)
    assert done.value.value is True
    assert arguments.permits(0) == 0 and arguments.permits_at_once(0) == 0


@pytest.mark.parametrize("bad", [True, 1.5, "2", None, -(2**53), 2**53])
def test_added_permits_may_be_negative_within_the_bounds(bad: Any) -> None:
    from redlease._core.arguments import MAX_COUNT

    assert arguments.permits_delta(-5) == -5 and arguments.permits_delta(0) == 0
    assert arguments.permits_delta(-MAX_COUNT) == -MAX_COUNT
    with pytest.raises(InvalidArgumentError, match="permits"):
        arguments.permits_delta(bad)
    for check in (arguments.permits, arguments.permits_at_once):
        with pytest.raises(InvalidArgumentError, match="permits"):
            check(-1)


def test_many_permits_and_ids_are_bounded_and_checked() -> None:
    assert arguments.permits_at_once(arguments.MAX_AT_ONCE) == arguments.MAX_AT_ONCE
    with pytest.raises(InvalidArgumentError, match="at most"):
        arguments.permits_at_once(arguments.MAX_AT_ONCE + 1)
    a, b = lease_core.new_permit_id(), lease_core.new_permit_id()
    assert arguments.permit_ids(iter([a, b.upper()])) == [a, b]
    assert arguments.permit_ids([]) == []
    for bad in (a, b"x", 7, None):
        with pytest.raises(InvalidArgumentError, match="permit_ids must be a list"):
            arguments.permit_ids(bad)
    with pytest.raises(InvalidArgumentError, match="twice"):
        arguments.permit_ids([a, a.upper()])
    with pytest.raises(InvalidArgumentError, match="permit_id"):
        arguments.permit_ids([a, "nope"])


def test_add_and_set_carry_their_arguments_and_report_the_bound() -> None:
    add = core.add_permits(SEM, -3, "req")
    call = step(add, first=True)
    assert call.keys == (SEM.name, SEM.total, SEM.channel, SEM.receipt("req"))
    assert call.args == (-3, "publish", receipts.receipt_ms(), 2**53 - 1)
    assert finish(add, [-3, -1, 1]) == -3
    op = core.set_permits(SEM, 2)
    call = step(op, first=True)
    assert call.keys == (SEM.name, SEM.total, SEM.channel) and call.args[0] == 2
    with pytest.raises(InvalidArgumentError, match="nothing was changed"):
        step(op, [0, 5, core.TOO_MANY])
    op = lease_core.lease_add_permits(LSEM, 4, "req")
    assert step(op, first=True).keys[2] == LSEM.receipt("req")
    with pytest.raises(InvalidArgumentError, match="nothing was added"):
        step(op, [1, core.TOO_MANY])
    op = lease_core.lease_set_permits(LSEM, 4)
    assert step(op, first=True).keys == (LSEM.name, LSEM.leases, LSEM.channel)
    assert finish(op, [-1, 1]) == -1


def test_several_permits_are_granted_together_and_given_back_together() -> None:
    clock = FakeClock()
    ids = [lease_core.new_permit_id() for _ in range(3)]
    op = lease_core.lease_acquire(
        LSEM, OWNER, lease=10.0, timeout=60.0, permit=ids[0], more=ids[1:], clock=clock
    )
    call = _start(op)
    assert call.args[0] == bytes.fromhex(ids[0])
    assert list(call.args[5:]) == [bytes.fromhex(i) for i in ids[1:]]
    undo = call.undo([core.GRANTED, 10_000, 0])  # a caller cancelled after the grant
    assert undo.script is lease_core.LEASE_SEMAPHORE_RELEASE_MANY and undo.args[2] == "0"
    assert list(undo.args[3:]) == [bytes.fromhex(i) for i in ids]
    clock.advance(10.0)  # the grant came after its whole lease: give every permit back
    back = step(op, [core.GRANTED, 10_000, 0])
    assert back.script is lease_core.LEASE_SEMAPHORE_RELEASE_MANY and back.args[2] == "0"
    assert isinstance(step(op, [core.RELEASED, 3, 3, 1, 1, 1]), Subscribe)
    step(op, True)
    got = finish(op, [core.GRANTED, 10_000, 0])
    assert got.ids == ids and [g.permit_id for g in got.each()] == ids
    assert {g.ttl for g in got.each()} == {10.0}


def test_a_refused_release_of_several_leaves_the_held_ones_held() -> None:
    table = permit_core.PermitTable()
    mine, gone = lease_core.new_permit_id(), lease_core.new_permit_id()
    stranger = lease_core.new_permit_id()
    for permit in (mine, gone):
        table.granted(LSEM, lease_core.Granted(permit, 30.0, 0.0), watched=True, listener=None)
    first = table.begin_releases([mine, stranger], 1.0)
    assert table.watched() == [table.get(gone)]  # being released: not renewed meanwhile
    refused = lease_core.ManyReleased(core.SHORT, (core.RELEASED, core.UNKNOWN))
    error = permit_core.finish_release_many(table, LSEM, [mine, stranger], refused)
    assert isinstance(error, InvalidArgumentError) and stranger in str(error)
    assert mine not in str(error) and "none was given back" in str(error)
    assert table.get(mine) is not None and len(table.watched()) == 2  # renewed again
    assert table.begin_release(mine, 2.0) != first[0]  # the next release: a new request
    lost = lease_core.ManyReleased(core.SHORT, (core.RELEASED, core.LOST))
    table.release_refused(mine)
    error = permit_core.finish_release_many(table, LSEM, [mine, gone], lost)
    assert isinstance(error, LeaseLostError) and error.owner == gone
    assert table.get(gone) is None and table.get(mine) is not None
    done = lease_core.ManyReleased(core.RELEASED, (core.RELEASED_BEFORE,))
    assert permit_core.finish_release_many(table, LSEM, [mine], done) is None
    assert len(table) == 0


def test_a_lease_set_by_hand_is_no_longer_renewed() -> None:
    table = permit_core.PermitTable()
    permit, other = lease_core.new_permit_id(), lease_core.new_permit_id()
    for p in (permit, other):
        table.granted(LSEM, lease_core.Granted(p, 30.0, 0.0), watched=True, listener=None)
    assert table.lease_set(permit, True, 5.0)
    assert table.watched() == [table.get(other)]
    assert table.lease_set(other, False, 6.0)  # not held: forgotten
    assert table.get(other) is None and not table.lease_set(other, False, 7.0)


def test_latch_delete_and_expire_calls() -> None:
    op = latch.delete(LATCH, request_id="r")
    call = step(op, first=True)
    assert call.keys == (LATCH.name, LATCH.channel, LATCH.receipt("r"))
    assert finish(op, 0) is False
    op = lease_core.lease_expire(LSEM, 1.5)
    assert step(op, first=True).args == (1500,)
    assert finish(op, 1) is True
    with pytest.raises(InvalidArgumentError, match="seconds"):
        arguments.duration(0, "seconds")


def test_a_zero_on_a_latch_channel_wakes_every_waiter_and_on_a_lock_channel_one() -> None:
    """Redisson's latch publishes "0" when it opens: every waiter re-checks. On a lock or
    semaphore channel a "0" stays a wake-up for one waiter (Redisson's unlock message)."""
    import threading

    from redlease._shared.channels import ChannelTable, Waiter

    table = ChannelTable(threading.Event)
    gate = [Waiter(LATCH.channel, f"c:{i}", threading.Event()) for i in range(3)]
    sem = [Waiter(SEM.channel, f"c:{i}", threading.Event()) for i in range(3)]
    for waiter in (*gate, *sem):
        table.add(waiter)
    table.on_message(LATCH.channel, "0", 0.0)
    table.on_message(SEM.channel, "0", 0.0)
    assert [w.event.is_set() for w in gate] == [True, True, True]
    assert [w.event.is_set() for w in sem] == [True, False, False]
    table.on_message(SEM.channel, "2", 0.0)  # a count: every waiter re-checks
    assert all(w.event.is_set() for w in sem)
