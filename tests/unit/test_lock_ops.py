"""The lock operations (lock.py), driven by hand with a fake clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redlease._core import codes, scripts
from redlease._core.backoff import MAX_PAUSE
from redlease._core.keys import UNLOCK_MESSAGE
from redlease._core.lock import (
    OUTSIDERS_TURN_MS,
    RECHECK,
    Acquired,
    Status,
    acquire,
    drift,
    force_release,
    leave_call,
    release,
    release_call,
    status,
    to_ms,
)
from redlease._core.requests import Call, Handed, Sleep, Subscribe, WaitWake
from redlease.errors import LeaseLostError, NotOwnedError, ServerUnavailableError

from ._fakes import KEYS, OWNER, FakeClock, Finished, finish, first_call, step

GRANTED, HELD, LOST = codes.GRANTED, codes.HELD, codes.LOST
WAIT = "w1"
"""The wait id of the acquire call under test."""


def leave(lease: float = 30.0) -> Call:
    """The give-up call of the acquire under test (a place handed over with its own lease)."""
    return leave_call(KEYS, OWNER, WAIT, str(to_ms(lease)))


def start(
    clock: FakeClock,
    *,
    held: int = 0,
    lease: float = 30.0,
    blocking: bool = True,
    timeout: float | None = None,
) -> tuple:
    op = acquire(
        KEYS,
        OWNER,
        held=held,
        lease=lease,
        blocking=blocking,
        timeout=timeout,
        wait_id=WAIT,
        clock=clock,
    )
    first = step(op, first=True)
    if blocking:  # a blocking caller first listens, if its client already does (here: not)
        private = KEYS.handover(OWNER)
        assert first == Subscribe(
            KEYS.channel, OWNER, leave(lease), only_if_live=True, private=private, wait=WAIT
        )
        first = step(op, False)
    return op, first


def assert_acquire_call(call: object, *, held: int, lease: float) -> None:
    assert isinstance(call, Call)
    assert call.script is scripts.LOCK_ACQUIRE
    assert call.keys == (KEYS.name, KEYS.line, KEYS.places, KEYS.fence)
    join_line = call.args[3]
    # not fair, handed over with its own lease, this call's wait id
    place = str(to_ms(lease))
    assert call.args == (
        to_ms(lease),
        OWNER,
        held,
        join_line,
        0,
        place,
        WAIT,
        KEYS.handover_prefix,
        "publish",
        0,  # no token: a first acquire, or a re-entry that does not name its hold's
    )
    assert join_line in (0, 1)


def assert_release_call(call: object, *, held: int, token: int | None = None) -> str:
    assert isinstance(call, Call)
    assert call.script is scripts.LOCK_RELEASE
    assert call.keys == (
        KEYS.name,
        KEYS.channel,
        KEYS.receipts,
        KEYS.line,
        KEYS.places,
        KEYS.fence,
    )
    owner, count, request_id, handover_ms, publish, handover, unsure, outsiders_ms, got, quiet = (
        call.args
    )
    assert quiet == 0  # the lock's release publishes its wake-up
    if token is not None:
        assert got == token  # the token of the hold it releases
    assert unsure == 0
    assert outsiders_ms == 0  # no hand-over, so no outsiders' turn either
    assert handover == KEYS.handover_prefix
    assert (owner, count, publish) == (OWNER, held, "publish")
    assert handover_ms == 0  # a give-back reserves nothing
    assert isinstance(request_id, str) and request_id
    return request_id


# --- acquire ---------------------------------------------------------------------------------


def test_helpers() -> None:
    assert to_ms(30) == 30_000
    assert to_ms(0.0001) == 1
    assert to_ms(1.0001) == 1001  # rounds up: a lease is never shortened
    assert drift(10.0) == pytest.approx(0.102)


def test_granted_on_first_try() -> None:
    clock = FakeClock(500.0)
    op, call = start(clock, lease=30.0)
    assert_acquire_call(call, held=0, lease=30.0)
    clock.advance(0.004)
    assert finish(op, [GRANTED, 1, 30000, 99]) == Acquired(
        count=1, ttl=30.0, requested_at=500.0, token=99
    )


def test_reentry_sends_the_held_count_and_returns_the_new_count() -> None:
    clock = FakeClock()
    op, call = start(clock, held=2, lease=7.5)
    assert_acquire_call(call, held=2, lease=7.5)
    result = finish(op, [GRANTED, 3, 9000, 5])
    assert (result.count, result.ttl) == (3, 9.0)


def test_held_subscribes_retries_then_waits_for_the_holders_ttl() -> None:
    clock = FakeClock()
    op, _ = start(clock, timeout=None)
    assert step(op, [HELD, 0, 12000, 5]) == Subscribe(
        KEYS.channel, OWNER, leave=leave(), private=KEYS.handover(OWNER), wait=WAIT
    )
    # Right after subscribing it tries again, without waiting.
    assert_acquire_call(step(op, None), held=0, lease=30.0)
    assert step(op, [HELD, 0, 4000, 5]) == WaitWake(4.0)
    assert_acquire_call(step(op, True), held=0, lease=30.0)
    assert step(op, [HELD, 0, 60000, 5]) == WaitWake(RECHECK)  # re-checks keep its place alive
    assert_acquire_call(step(op, True), held=0, lease=30.0)  # woken: try again
    assert step(op, [HELD, 0, 2500, 5]) == WaitWake(2.5)  # no second Subscribe
    assert_acquire_call(step(op, False), held=0, lease=30.0)  # wait ran out: try again too
    clock.advance(0.01)
    result = finish(op, [GRANTED, 1, 30000, 5])
    assert result.count == 1
    assert result.requested_at == clock.now - 0.01


def test_wait_is_bounded_by_the_remaining_timeout() -> None:
    clock = FakeClock(10.0)
    op, _ = start(clock, timeout=5.0)
    step(op, [HELD, 0, 60000, 5])  # Subscribe
    step(op, None)
    clock.advance(1.0)
    wait = step(op, [HELD, 0, 60000, 5])
    assert isinstance(wait, WaitWake)
    assert wait.timeout == pytest.approx(4.0)
    step(op, False)
    clock.advance(3.5)
    wait = step(op, [HELD, 0, 200, 5])
    assert wait == WaitWake(0.2)  # the holder's TTL is shorter than the 0.5 s left


def test_non_blocking_tries_once() -> None:
    op, _ = start(FakeClock(), blocking=False)
    assert finish(op, [HELD, 0, 5000, 5]) is None


def test_non_blocking_ignores_a_timeout() -> None:
    op, _ = start(FakeClock(), blocking=False, timeout=10.0)
    assert finish(op, [HELD, 0, 5000, 5]) is None


def test_a_live_subscription_spares_the_subscribe_and_retry() -> None:
    clock = FakeClock()
    op = acquire(
        KEYS, OWNER, held=0, lease=30.0, blocking=True, timeout=None, wait_id=WAIT, clock=clock
    )
    assert isinstance(step(op, first=True), Subscribe)
    assert_acquire_call(step(op, True), held=0, lease=30.0)  # listening before the try
    assert step(op, [HELD, 0, 3000, 5]) == WaitWake(3.0)  # so: no Subscribe, no second try


def test_zero_timeout_tries_once_without_subscribing() -> None:
    op, _ = start(FakeClock(), timeout=0.0)
    # no wait: give the place up
    assert step(op, [HELD, 0, 5000, 5]) == leave()
    assert finish(op, 0) is None


def test_timeout_exhausted_returns_none() -> None:
    clock = FakeClock()
    op, _ = start(clock, timeout=2.0)
    assert isinstance(step(op, [HELD, 0, 10000, 5]), Subscribe)
    step(op, None)
    assert step(op, [HELD, 0, 10000, 5]) == WaitWake(2.0)
    clock.advance(2.0)
    assert_acquire_call(step(op, False), held=0, lease=30.0)  # one last try
    assert step(op, [HELD, 0, 8000, 5]) == leave()  # gives its place up
    assert finish(op, 0) is None


def test_timeout_exhausted_but_last_try_granted() -> None:
    clock = FakeClock()
    op, _ = start(clock, timeout=2.0)
    step(op, [HELD, 0, 10000, 5])
    step(op, None)
    step(op, [HELD, 0, 10000, 5])
    clock.advance(2.5)
    step(op, True)
    assert finish(op, [GRANTED, 1, 30000, 5]) is not None


def test_no_expiry_holder_is_rechecked() -> None:
    clock = FakeClock()
    op, _ = start(clock, timeout=None)
    step(op, [HELD, 0, -1, 5])
    step(op, None)
    assert step(op, [HELD, 0, -1, 5]) == WaitWake(RECHECK)
    assert 0 < RECHECK < math.inf

    op, _ = start(clock, timeout=1.5)
    step(op, [HELD, 0, -1, 5])
    step(op, None)
    assert step(op, [HELD, 0, -1, 5]) == WaitWake(1.5)


def test_a_gone_hold_is_taken_afresh_from_the_servers_count() -> None:
    """A re-entry that finds the owner's hold gone (an explicit lease ran out) goes on as a
    first acquire at once, as Redisson does, instead of raising for ever."""
    clock = FakeClock()
    op, _ = start(clock, held=2)
    assert_acquire_call(step(op, [LOST, 0, -2, 0]), held=0, lease=30.0)
    result = finish(op, [GRANTED, 1, 30000, 9])
    assert (result.count, result.token) == (1, 9)


def test_a_gone_hold_non_blocking_then_held_elsewhere_is_not_acquired() -> None:
    op, _ = start(FakeClock(), held=1, blocking=False)
    assert_acquire_call(step(op, [LOST, 0, 1000, 0]), held=0, lease=30.0)
    assert finish(op, [HELD, 0, 1000, 0]) is None


def test_following_the_servers_count_is_bounded() -> None:
    op, _ = start(FakeClock(), held=3, blocking=False)
    for count in (2, 1, 0):
        assert_acquire_call(step(op, [LOST, count, 1000, 0]), held=count, lease=30.0)
    with pytest.raises(LeaseLostError) as info:
        step(op, [LOST, 5, 1000, 0])
    err = info.value
    assert isinstance(err, NotOwnedError)
    assert (err.name, err.owner) == (KEYS.name, OWNER)


def test_grant_just_in_time_is_kept() -> None:
    clock = FakeClock()
    op, _ = start(clock, lease=10.0, blocking=False)
    clock.advance(10.0 - drift(10.0) - 0.01)
    assert finish(op, [GRANTED, 1, 10000, 5]) is not None


@pytest.mark.parametrize("late_by", [0.0, 0.01, 5.0])
def test_late_grant_is_given_back_non_blocking(late_by: float) -> None:
    clock = FakeClock()
    op, _ = start(clock, lease=10.0, blocking=False)
    clock.advance(10.0 - drift(10.0) + late_by)
    give_back = step(op, [GRANTED, 1, 10000, 5])
    assert_release_call(give_back, held=1)
    assert finish(op, [codes.RELEASED, 0]) is None


def test_late_reentry_gives_back_only_the_new_hold() -> None:
    clock = FakeClock()
    op, _ = start(clock, held=2, lease=1.0, blocking=False)
    clock.advance(1.0)
    assert_release_call(step(op, [GRANTED, 3, 1000, 5]), held=3)
    assert finish(op, [codes.RELEASED, 2]) is None


def test_late_grant_while_blocking_tries_again() -> None:
    clock = FakeClock()
    op, _ = start(clock, lease=1.0, timeout=60.0)
    clock.advance(2.0)
    first_id = assert_release_call(step(op, [GRANTED, 1, 1000, 5]), held=1)
    assert step(op, [codes.RELEASED, 0]) == Subscribe(
        KEYS.channel, OWNER, leave=leave(1.0), private=KEYS.handover(OWNER), wait=WAIT
    )
    assert_acquire_call(step(op, None), held=0, lease=1.0)
    clock.advance(2.0)
    second_id = assert_release_call(step(op, [GRANTED, 1, 1000, 5]), held=1)
    assert second_id != first_id  # a new give-back must not look like a retry of the first
    wait = step(op, [codes.RELEASED, 0])
    assert isinstance(wait, WaitWake) and wait.timeout <= 56.0
    assert_acquire_call(step(op, True), held=0, lease=1.0)
    assert finish(op, [GRANTED, 1, 1000, 5]).count == 1


def test_late_grant_with_timeout_exhausted_fails() -> None:
    clock = FakeClock()
    op, _ = start(clock, lease=1.0, timeout=1.5)
    clock.advance(2.0)
    step(op, [GRANTED, 1, 1000, 5])
    assert step(op, [codes.RELEASED, 0]) == leave(1.0)
    assert finish(op, 0) is None


def test_acquire_undo_releases_only_a_counted_grant() -> None:
    _, call = start(FakeClock(), held=0)
    assert call.undo is not None
    assert_release_call(call.undo([GRANTED, 1, 30000, 5]), held=1, token=5)
    assert call.undo([HELD, 0, 5000, 5]) is None
    assert call.undo([LOST, 0, -2, 5]) is None
    assert call.undo([GRANTED, 3, 30000, 5]) is None  # not the hold this request counted

    _, call = start(FakeClock(), held=4)
    assert_release_call(call.undo([GRANTED, 5, 30000, 5]), held=5, token=5)
    assert call.undo([GRANTED, 4, 30000, 5]) is None
    assert call.undo([LOST, 2, 100, 5]) is None


def test_undo_accepts_reply_values_as_bytes() -> None:
    _, call = start(FakeClock(), held=0)
    assert call.undo is not None
    assert call.undo([b"1", b"1", b"30000"]) is not None


def test_only_the_acquire_call_has_an_undo() -> None:
    assert first_call(release(KEYS, OWNER, held=1, request_id="r", token=5)).undo is None
    assert first_call(status(KEYS)).undo is None
    assert release_call(KEYS, OWNER, 1, request_id="x", token=5).undo is None


replies = st.one_of(
    st.tuples(st.just(HELD), st.just(0), st.integers(-1, 120_000), st.just(0)),
    st.tuples(st.just(GRANTED), st.just(1), st.integers(1, 120_000), st.integers(1, 2**52)),
)


@settings(max_examples=150, deadline=None)
@given(
    timeout=st.one_of(st.none(), st.floats(0, 30)),
    lease=st.floats(0.05, 60),
    steps=st.lists(st.tuples(replies, st.floats(0, 10), st.booleans()), max_size=30),
)
def test_acquire_never_waits_past_its_deadline(
    timeout: float | None, lease: float, steps: list
) -> None:
    clock = FakeClock(100.0)
    deadline = None if timeout is None else clock.now + timeout
    op, request = start(clock, lease=lease, timeout=timeout)
    subscribes = 0
    pending_release = False
    try:
        for reply, elapsed, woken in steps:
            if isinstance(request, Call) and request.script is scripts.LOCK_ACQUIRE:
                assert_acquire_call(request, held=0, lease=lease)
                clock.advance(elapsed)
                request = step(op, list(reply))
            elif isinstance(request, Call) and request.script is scripts.LOCK_LEAVE:
                assert deadline is not None and clock.now >= deadline  # leaves only when done
                assert request == leave(lease)
                request = step(op, 0)
            elif isinstance(request, Call):
                assert pending_release
                assert_release_call(request, held=1)
                pending_release = False
                request = step(op, [codes.RELEASED, 0])
            elif isinstance(request, Subscribe):
                subscribes += 1
                assert subscribes == 1
                request = step(op, None)
                assert isinstance(request, Call)  # subscribing is followed by a try at once
            elif isinstance(request, Sleep):  # the pause after grants that came too late
                assert 0 < request.seconds <= MAX_PAUSE
                if deadline is not None:
                    assert request.seconds <= deadline - clock.now + 1e-9
                clock.advance(request.seconds)
                request = step(op, None)
            else:
                assert isinstance(request, WaitWake)
                assert subscribes == 1  # never wait before listening
                assert request.timeout >= 0
                if deadline is not None:
                    assert request.timeout <= deadline - clock.now + 1e-9
                clock.advance(request.timeout if not woken else request.timeout / 2)
                request = step(op, woken)
            if isinstance(request, Call) and request.script is scripts.LOCK_RELEASE:
                pending_release = True
    except Finished as done:
        result = done.value
        if result is None:
            assert deadline is not None and clock.now >= deadline
        else:
            assert isinstance(result, Acquired)
            assert clock.now - result.requested_at < lease - drift(lease)


# --- release, force_release, status ----------------------------------------------------------


def test_release_returns_remaining_holds() -> None:
    op = release(KEYS, OWNER, held=3, request_id="req-9", token=5, handover_ms=50)
    call = next(op)
    assert call == release_call(KEYS, OWNER, 3, request_id="req-9", token=5, handover_ms=50)
    handover = KEYS.handover_prefix
    assert call.args == (OWNER, 3, "req-9", 50, "publish", handover, 0, OUTSIDERS_TURN_MS, 5, 0)
    assert finish(op, [codes.RELEASED, 2]) == 2


def test_final_release_returns_zero() -> None:
    op = release(KEYS, OWNER, held=1, request_id="r", token=5)
    next(op)
    assert finish(op, [b"1", b"0"]) == 0


def test_release_of_a_lost_hold_raises() -> None:
    op = release(KEYS, OWNER, held=1, request_id="r", token=5)
    next(op)
    with pytest.raises(LeaseLostError) as info:
        op.send([LOST, 0])
    assert (info.value.name, info.value.owner) == (KEYS.name, OWNER)
    assert KEYS.name in str(info.value)


def test_force_release() -> None:
    op = force_release(KEYS)
    call = first_call(op)
    assert call.script is scripts.LOCK_FORCE_RELEASE
    assert call.keys == (KEYS.name, KEYS.channel, KEYS.receipts)
    assert call.args == (UNLOCK_MESSAGE, "publish", KEYS.holder_prefix)
    assert finish(op, 1) is True
    op = force_release(KEYS)
    next(op)
    assert finish(op, 0) is False


def run_status(reply: list) -> Status:
    op = status(KEYS)
    call = first_call(op)
    assert call.script is scripts.LOCK_STATUS
    assert (call.keys, call.args) == ((KEYS.name, KEYS.line), ())
    return finish(op, reply)


def test_status_free() -> None:
    st_ = run_status([-2, 0])
    assert st_ == Status(ttl=None, holders={}, waiters=0)
    assert not st_.locked


def test_status_no_expiry_is_infinite() -> None:
    st_ = run_status([-1, 0, b"c1:7", 2])
    assert st_.ttl == math.inf and st_.locked
    assert st_.holders == {"c1:7": 2}


@pytest.mark.parametrize(
    "reply",
    [
        [1500, 4, "a:1", 1, "b:2", 3],
        [b"1500", b"4", b"a:1", b"1", b"b:2", b"3"],
        [1500, 4, b"a:1", "1", "b:2", b"3"],
    ],
)
def test_status_decodes_bytes_and_str(reply: list) -> None:
    st_ = run_status(reply)
    assert st_.ttl == 1.5 and st_.locked
    assert st_.holders == {"a:1": 1, "b:2": 3} and st_.waiters == 4
    assert all(type(k) is str for k in st_.holders)


def test_status_hides_a_reservation() -> None:
    st_ = run_status([800, 2, "redlease:handoff", "c1:9"])
    assert st_ == Status(ttl=None, holders={}, waiters=2)


def test_a_fair_acquire_says_so_to_the_script() -> None:
    op = acquire(
        KEYS, OWNER, held=0, lease=5.0, blocking=False, timeout=None, wait_id=WAIT, fair=True
    )
    call = next(op)
    assert isinstance(call, Call) and call.args[4] == 1


def test_a_watched_waiter_asks_to_be_handed_the_lock() -> None:
    op = acquire(
        KEYS, OWNER, held=0, lease=30.0, blocking=False, timeout=None, wait_id=WAIT, handover=True
    )
    call = next(op)
    assert isinstance(call, Call) and call.args[5] == "w30000"  # the window, then the watchdog's


def test_a_hand_over_is_the_grant_without_another_request() -> None:
    clock = FakeClock(100.0)
    op, _ = start(clock, lease=30.0, timeout=60.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), Subscribe)
    clock.advance(0.5)
    sent_at = clock.now
    assert_acquire_call(step(op, True), held=0, lease=30.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), WaitWake)
    clock.advance(0.2)
    acquired = finish(op, Handed(token=77, lease_ms=1000, wait=WAIT))
    # the lease counts from before the last request, which the hand-over followed
    assert (acquired.count, acquired.ttl, acquired.token) == (1, 1.0, 77)
    assert acquired.requested_at == sent_at


def test_a_hand_over_too_old_to_trust_is_checked_with_the_server() -> None:
    clock = FakeClock(100.0)
    op, _ = start(clock, lease=30.0, timeout=60.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), Subscribe)
    assert_acquire_call(step(op, True), held=0, lease=30.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), WaitWake)
    clock.advance(1.5)  # longer than the hand-over's lease since our last request
    assert_acquire_call(step(op, Handed(token=77, lease_ms=1000, wait=WAIT)), held=0, lease=30.0)
    # the server says it is ours, with what is left of the short lease
    acquired = finish(op, [GRANTED, 1, 900, 77])
    assert (acquired.count, acquired.ttl, acquired.token) == (1, 0.9, 77)


def test_a_hand_over_for_another_acquire_call_is_only_a_wake_up() -> None:
    """A hand-over message that arrives late, meant for an earlier call of the same owner,
    is never taken for a grant: the waiter asks the server again."""
    clock = FakeClock(100.0)
    op, _ = start(clock, lease=30.0, timeout=60.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), Subscribe)
    assert_acquire_call(step(op, True), held=0, lease=30.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), WaitWake)
    stale = Handed(token=77, lease_ms=1000, wait="an earlier call")
    assert_acquire_call(step(op, stale), held=0, lease=30.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), WaitWake)  # still held by another


def test_a_free_fair_lock_that_is_another_waiters_turn_is_looked_at_again_soon() -> None:
    """Behind the first waiter in line: look again soon (the first one takes the lock and
    its lease is then known), backing off to the re-check interval, never spinning."""
    op, _ = start(FakeClock(), timeout=None)
    assert isinstance(step(op, [HELD, 0, -2, 0]), Subscribe)
    assert_acquire_call(step(op, None), held=0, lease=30.0)
    waits = []
    for _ in range(12):
        wait = step(op, [HELD, 0, -2, 0])
        assert isinstance(wait, WaitWake)
        waits.append(wait.timeout)
        assert_acquire_call(step(op, False), held=0, lease=30.0)
    assert waits[0] == pytest.approx(0.02)
    assert waits == sorted(waits)
    assert max(waits) == RECHECK
    # once the lock has a holder again, the wait follows its lease
    assert step(op, [HELD, 0, 400, 0]) == WaitWake(0.4)
    assert_acquire_call(step(op, False), held=0, lease=30.0)
    assert step(op, [HELD, 0, -2, 0]) == WaitWake(pytest.approx(0.02))  # type: ignore[arg-type]  # approx equals a float


def test_a_ttl_of_zero_is_no_spin() -> None:
    op, _ = start(FakeClock(), timeout=None)
    assert isinstance(step(op, [HELD, 0, 0, 0]), Subscribe)
    assert_acquire_call(step(op, None), held=0, lease=30.0)
    wait = step(op, [HELD, 0, 0, 0])
    assert isinstance(wait, WaitWake) and wait.timeout > 0


def test_a_first_acquire_that_cannot_know_its_outcome_gives_back_what_it_may_hold() -> None:
    """Its reply lost (the server may have granted it): before raising, leave, which frees a
    hold made for this very call; if that fails too, the first error is raised."""
    for leave_fails in (False, True):
        op, call = start(FakeClock(), blocking=False)
        assert_acquire_call(call, held=0, lease=30.0)
        first = ServerUnavailableError("reply lost", address="a", name=KEYS.name)
        assert op.throw(first) == leave()
        with pytest.raises(ServerUnavailableError) as info:
            if leave_fails:
                op.throw(ServerUnavailableError("still down", address="a", name=KEYS.name))
            else:
                op.send(1)
        assert info.value is first


def test_a_re_entry_that_cannot_know_its_outcome_leaves_nothing_behind() -> None:
    op, _ = start(FakeClock(), held=1, blocking=False)
    with pytest.raises(ServerUnavailableError):
        op.throw(ServerUnavailableError("reply lost", address="a", name=KEYS.name))


def test_a_hand_over_made_before_the_last_reply_is_only_a_wake_up() -> None:
    """Its own wait id, but a token no higher than the fence counter the last HELD reply
    carried: the hand-over was made before that request (its lease may have run out since,
    and the lock gone to another), so the waiter asks the server."""
    clock = FakeClock(100.0)
    op, _ = start(clock, lease=30.0, timeout=60.0)
    assert isinstance(step(op, [HELD, 0, 5000, 0]), Subscribe)
    assert_acquire_call(step(op, True), held=0, lease=30.0)
    assert isinstance(step(op, [HELD, 0, 5000, 80]), WaitWake)  # counter 80: token 80 handed
    old = Handed(token=77, lease_ms=1000, wait=WAIT)
    assert_acquire_call(step(op, old), held=0, lease=30.0)
    assert isinstance(step(op, [HELD, 0, 5000, 80]), WaitWake)
    acquired = finish(op, Handed(token=81, lease_ms=1000, wait=WAIT))  # made after: a grant
    assert acquired.token == 81
