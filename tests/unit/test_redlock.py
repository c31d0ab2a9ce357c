"""Redlock's pure core (_core/redlock.py): quorum and validity arithmetic, and the acquire,
release, renewal and status operations driven by hand with a fake clock."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redlease._core import codes, keep, scripts
from redlease._core import redlock as core
from redlease._core.keys import LockKeys
from redlease._core.lock import OUTAGE_TOLERANCE, RECHECK, Acquired, HoldTable, drift, to_ms
from redlease._core.redlock import Fanout, Listen
from redlease._core.requests import Call, Sleep, WaitWake
from redlease._core.watchdog import RenewalPolicy
from redlease.errors import LeaseLostError, QuorumError, ServerUnavailableError

from ._fakes import KEYS, OWNER, FakeClock, Finished, finish, step
from .test_scripts import header_arity

MASTERS3 = ("10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379")
MASTERS5 = (*MASTERS3, "10.0.0.4:6379", "10.0.0.5:6379")
WAIT_ID = "5f0c9a1e2b3d4c6f-7"


def granted(ttl_ms: int = 30_000, count: int = 1) -> list[int]:
    return [codes.GRANTED, count, ttl_ms, 0]


def held(ttl_ms: int = 5_000) -> list[int]:
    return [codes.HELD, 0, ttl_ms, 0]


def lost() -> list[int]:
    return [codes.LOST, 0, -2, 0]


def down(address: str = "10.0.0.9:6379") -> ServerUnavailableError:
    return ServerUnavailableError(f"redis server {address} unavailable", address=address)


def start(clock: FakeClock, masters=MASTERS3, *, blocking=True, held_count=0, **kwargs):
    kwargs.setdefault("lease", 30.0)
    kwargs.setdefault("timeout", None)
    kwargs.setdefault("wait_id", WAIT_ID)
    op = core.acquire(
        KEYS,
        OWNER,
        masters,
        held=held_count,
        blocking=blocking,
        master_timeout=0.1,
        clock=clock,
        random=lambda: 0.5,
        **kwargs,
    )
    first = step(op, first=True)
    if blocking:
        assert first == Listen(KEYS.channel, OWNER, tuple(range(len(masters))), only_if_live=True)
        first = step(op, 0)
    assert isinstance(first, Fanout)
    return op, first


# --- arithmetic -------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "need"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_is_a_strict_majority(n: int, need: int) -> None:
    assert core.quorum(n) == need
    assert 2 * core.quorum(n) > n  # two majorities always share a master


def test_validity_takes_off_elapsed_time_and_drift() -> None:
    assert drift(10.0) == pytest.approx(0.102)
    assert core.validity(10.0, 0.5, 10.0) == pytest.approx(10.0 - 0.5 - 0.102)
    assert core.validity(0.05, 0.1, 0.05) < 0


def test_majority_value_is_what_a_majority_reaches() -> None:
    assert core.majority_value([30, 10, 20], 3) == 20
    assert core.majority_value([30, 20], 5) == 0  # two answers cannot make a majority of five
    assert core.majority_value([5, 4, 3, 2, 1], 5) == 3


# --- acquire --------------------------------------------------------------------------------


def test_a_majority_of_grants_acquires_with_the_validity_as_ttl() -> None:
    clock = FakeClock()
    op, fan = start(clock)
    assert fan.timeout == 0.1
    call = fan.calls[0]
    assert isinstance(call, Call) and call.script is scripts.LOCK_ACQUIRE
    assert fan.calls == (call, call, call)
    assert call.args[:4] == (to_ms(30.0), OWNER, 0, 0)  # no place in a per-master line
    # a cancellation while the calls are out gives back on every master
    assert fan.on_cancel is not None and len(fan.on_cancel) == 3
    assert all(c is not None and c.script is scripts.LOCK_RELEASE for c in fan.on_cancel)
    clock.advance(0.004)
    result = finish(op, [granted(), held(), granted()])
    assert isinstance(result, Acquired)
    assert result.count == 1 and result.token == 0
    assert result.ttl == pytest.approx(30.0 - 0.004 - drift(30.0))


def test_the_calls_match_the_script_headers() -> None:
    _, fan = start(FakeClock())
    assert fan.on_cancel is not None
    for call in (fan.calls[0], fan.on_cancel[0]):
        assert call is not None
        assert header_arity(call.script.name, 1) == (len(call.keys), len(call.args))


def test_a_minority_gives_back_where_granted_or_unanswered_and_reports_contention() -> None:
    clock = FakeClock()
    op, _ = start(clock, blocking=False)
    back = step(op, [granted(), held(), held()])
    assert isinstance(back, Fanout)
    assert back.calls[1:] == (None, None)  # nothing was granted where it is held elsewhere
    release = back.calls[0]
    assert release is not None and release.script is scripts.LOCK_RELEASE
    assert release.args[:2] == (OWNER, 1)
    assert finish(op, [[codes.RELEASED, 0], None, None]) is None


def test_an_outage_gives_back_everywhere_and_a_try_raises_quorum_error() -> None:
    clock = FakeClock()
    op, _ = start(clock, blocking=False)
    back = step(op, [granted(), down(), down()])
    assert isinstance(back, Fanout) and all(c is not None for c in back.calls)
    with pytest.raises(QuorumError) as info:
        step(op, [[codes.RELEASED, 0], down(), down()])
    error = info.value
    assert isinstance(error, ConnectionError) and error.quorum == 2 and error.name == KEYS.name
    assert error.outcomes[MASTERS3[0]] == "granted"
    assert "unavailable" in error.outcomes[MASTERS3[1]]
    assert set(error.errors) == {MASTERS3[1], MASTERS3[2]}


def no_answer(address: str = "10.0.0.9:6379") -> core.NotAnswered:
    return core.NotAnswered(f"redis server {address} did not answer", address=address)


def test_every_attempt_of_one_acquire_call_sends_its_wait_id() -> None:
    """Issue #23 (a): a master takes a hold of the owner as an attempt's retry only if it was
    made for this very call, which the wait id names (never "" for every call alike)."""
    clock = FakeClock()
    op, first = start(clock, wait_id="call-1")
    assert first.calls[0] is not None and first.calls[0].args[6] == "call-1"
    step(op, [granted(), down(), down()])  # the give-back
    pause = step(op, [[codes.RELEASED, 0], down(), down()])
    assert isinstance(pause, Sleep)
    again = step(op, None)
    assert isinstance(again, Fanout)
    assert again.calls[0] is not None and again.calls[0].args[6] == "call-1"  # its retry


def test_a_give_back_not_confirmed_where_it_may_have_been_taken_is_reported() -> None:
    """Issue #23 (c), convention 5: a give-back that failed where the attempt was granted, or
    went out and was not answered, may leave a hold there: reported, never taken as done. A
    master that could not be reached at all (nothing went out) is not reported."""
    reported: list[list[str]] = []
    clock = FakeClock()
    op, _ = start(clock, blocking=False, on_unsure=reported.append)
    back = step(op, [granted(), no_answer(), down()])
    assert isinstance(back, Fanout) and all(c is not None for c in back.calls)
    with pytest.raises(QuorumError):
        step(op, [no_answer(), no_answer(), down()])
    assert reported == [[MASTERS3[0], MASTERS3[1]]]
    reported.clear()
    op, _ = start(clock, blocking=False, on_unsure=reported.append)
    step(op, [granted(), no_answer(), held()])
    assert finish(op, [[codes.RELEASED, 0], [codes.LOST, 0], None]) is None
    assert reported == []  # confirmed everywhere it was sent


def test_a_grant_is_counted_on_no_longer_than_the_lease_asked_nor_the_ttl_reported() -> None:
    """Convention 2: each master's grant counts for min(lease asked, TTL it reported)."""
    clock = FakeClock()
    op, _ = start(clock, lease=10.0)
    result = finish(op, [granted(60_000, count=2), granted(60_000, count=2), granted(4_000)])
    assert isinstance(result, Acquired)
    assert result.ttl == pytest.approx(10.0 - drift(10.0))  # not the 60 s already there
    op, _ = start(clock, lease=10.0)
    result = finish(op, [granted(-1), granted(3_000), granted(2_000)])
    assert isinstance(result, Acquired)
    assert result.ttl == pytest.approx(3.0 - drift(10.0))  # what a majority has left


def test_spent_validity_means_failure_and_giving_back() -> None:
    clock = FakeClock()
    op, _ = start(clock, blocking=False, lease=0.05)
    clock.advance(0.1)  # the slowest master took longer than the lease
    back = step(op, [granted(50), granted(50), down()])
    assert isinstance(back, Fanout) and all(c is not None for c in back.calls)
    with pytest.raises(QuorumError, match="validity was spent"):
        step(op, [[codes.RELEASED, 0]] * 3)


def test_a_bounded_wait_listens_then_waits_no_longer_than_the_holder_ttl() -> None:
    clock = FakeClock()
    op, _ = start(clock, timeout=10.0)
    listen = step(op, [held(2_000), held(3_000), granted()])
    assert isinstance(listen, Fanout)  # first the give-back on the master that granted
    listen = step(op, [[codes.RELEASED, 0], None, None])
    assert listen == Listen(KEYS.channel, OWNER, (0, 1, 2))
    retry = step(op, 3)  # subscribed: try again at once
    assert isinstance(retry, Fanout)
    step(op, [held(2_000), held(3_000), granted()])
    wait = step(op, [[codes.RELEASED, 0], None, None])
    assert wait == WaitWake(2.0)
    clock.advance(9.0)
    step(op, True)
    step(op, [held(9_000), held(9_000), granted()])
    wait = step(op, [[codes.RELEASED, 0], None, None])
    assert isinstance(wait, WaitWake) and wait.timeout == pytest.approx(1.0)
    clock.advance(1.0)
    step(op, False)
    with pytest.raises(Finished) as done:  # nothing granted: nothing to give back
        step(op, [held(), held(), held()])
    assert done.value.value is None


def test_a_bounded_wait_never_raises_quorum_error() -> None:
    clock = FakeClock()
    op, _ = start(clock, timeout=1.0)
    for _ in range(100):
        back = step(op, [down(), down(), down()])
        assert isinstance(back, Fanout)
        try:
            pause = step(op, [down(), down(), down()])
        except Finished as done:
            assert done.value is None
            return
        assert isinstance(pause, Sleep) and 0 <= pause.seconds <= 1.0
        clock.advance(max(pause.seconds, 0.05))
        assert isinstance(step(op, None), Fanout)
    raise AssertionError("the wait did not end")


def test_an_unbounded_wait_that_never_saw_the_lock_held_raises_after_a_short_grace() -> None:
    clock = FakeClock()
    op, _ = start(clock)
    began = clock.now
    for _ in range(100):
        step(op, [granted(), down(), down()])  # gives back on every master
        if clock.now - began >= core.OUTAGE_GRACE:
            with pytest.raises(QuorumError):
                step(op, [[codes.RELEASED, 0], down(), down()])
            return
        pause = step(op, [[codes.RELEASED, 0], down(), down()])
        assert isinstance(pause, Sleep)
        clock.advance(0.25)
        assert isinstance(step(op, None), Fanout)
    raise AssertionError("the outage was ridden out for ever")


def test_an_unbounded_waiter_that_saw_the_lock_held_rides_out_an_outage() -> None:
    clock = FakeClock()
    op, _ = start(clock)
    listen = step(op, [held(), held(), held()])
    assert isinstance(listen, Listen)
    step(op, 3)
    waited = step(op, [held(), held(), held()])
    assert isinstance(waited, WaitWake)
    step(op, True)  # woken: the masters go down meanwhile
    outage_began = clock.now
    for _ in range(100):
        back = step(op, [down(), down(), down()])
        assert isinstance(back, Fanout)
        if clock.now - outage_began >= OUTAGE_TOLERANCE:
            with pytest.raises(QuorumError):
                step(op, [down(), down(), down()])
            return
        pause = step(op, [down(), down(), down()])
        assert isinstance(pause, Sleep) and pause.seconds <= core.BACKOFF_CAP
        clock.advance(0.5)
        assert isinstance(step(op, None), Fanout)
    raise AssertionError("the outage was ridden out for ever")


def test_a_split_vote_backs_off_at_random() -> None:
    clock = FakeClock()
    op, _ = start(clock, masters=MASTERS5, timeout=5.0)
    # two contenders took one master each, a third is down: nobody has a majority
    back = step(op, [granted(), held(), held(), granted(), down()])
    assert isinstance(back, Fanout)
    assert [c is not None for c in back.calls] == [True, False, False, True, True]
    pause = step(op, [[codes.RELEASED, 0], None, None, [codes.RELEASED, 0], down()])
    assert pause == Sleep(0.5 * min(core.BACKOFF_CAP, core.BACKOFF_BASE * 2))


def test_a_reentry_whose_hold_is_gone_on_a_majority_raises_lease_lost() -> None:
    op, fan = start(FakeClock(), held_count=2, blocking=False)
    assert fan.calls[0] is not None and fan.calls[0].args[2] == 2
    back = step(op, [lost(), lost(), granted(count=3)])
    assert isinstance(back, Fanout)
    assert back.calls[0] is None and back.calls[1] is None
    undo = back.calls[2]
    assert undo is not None and undo.args[1] == 3  # takes back just the re-entry
    with pytest.raises(LeaseLostError):
        step(op, [None, None, [codes.RELEASED, 2]])


def test_a_reentry_on_a_majority_counts_up() -> None:
    op, _ = start(FakeClock(), held_count=1)
    result = finish(op, [granted(25_000, 2), granted(30_000, 2), lost()])
    assert isinstance(result, Acquired) and result.count == 2
    assert result.ttl == pytest.approx(25.0 - drift(30.0))


@given(
    st.lists(st.sampled_from(["granted", "held", "down"]), min_size=1, max_size=7).filter(
        lambda xs: len(xs) % 2 == 1
    )
)
def test_never_acquired_without_a_majority_and_never_left_granted(outcomes: list[str]) -> None:
    masters = tuple(f"10.0.0.{i}:6379" for i in range(len(outcomes)))
    replies = [granted() if o == "granted" else held() if o == "held" else down() for o in outcomes]
    op, _ = start(FakeClock(), masters=masters, blocking=False)
    need = core.quorum(len(outcomes))
    try:
        request = op.send(replies)
    except StopIteration as stop:
        if isinstance(stop.value, Acquired):
            assert outcomes.count("granted") >= need
        else:  # held elsewhere and nothing granted: nothing to give back
            assert stop.value is None and set(outcomes) == {"held"}
        return
    assert outcomes.count("granted") < need
    assert isinstance(request, Fanout)
    for outcome, call in zip(outcomes, request.calls, strict=True):
        assert (call is not None) == (outcome != "held")
    try:
        op.send([None] * len(outcomes))
    except StopIteration as stop:
        assert stop.value is None
    except QuorumError:
        assert outcomes.count("granted") + outcomes.count("held") < need or "held" not in outcomes


# --- release --------------------------------------------------------------------------------


def release_op(masters=MASTERS3, held_count=1):
    op = core.release(KEYS, OWNER, masters, held=held_count, request_id="req-1", master_timeout=0.1)
    fan = step(op, first=True)
    assert isinstance(fan, Fanout) and fan.calls[0] is not None
    assert fan.calls[0].script is scripts.LOCK_RELEASE
    # no hand-over reservation; classic pub/sub (independent masters are not a cluster)
    assert fan.calls[0].args[:5] == (OWNER, held_count, "req-1", 0, "publish")
    assert header_arity("lock_release", 1) == (len(fan.calls[0].keys), len(fan.calls[0].args))
    return op


def test_release_on_a_majority_reports_the_masters_it_could_not_reach() -> None:
    op = release_op(held_count=2)
    result = finish(op, [[codes.RELEASED, 1], down(), [codes.RELEASED, 1]])
    assert result.remaining == 1
    assert list(result.unconfirmed) == [MASTERS3[1]]


def test_release_that_a_majority_no_longer_has_raises_lease_lost() -> None:
    op = release_op()
    with pytest.raises(LeaseLostError):
        finish(op, [[codes.LOST, 0], [codes.LOST, 0], [codes.RELEASED, 0]])


def test_release_that_cannot_reach_a_majority_raises_quorum_error() -> None:
    op = release_op()
    with pytest.raises(QuorumError) as info:
        finish(op, [[codes.RELEASED, 0], down(), down()])
    assert info.value.outcomes[MASTERS3[0]] == "released"
    assert len(info.value.errors) == 2


def release_keep_op(masters=MASTERS3):
    op = core.release(
        KEYS, OWNER, masters, held=1, request_id="req-1", master_timeout=0.1, keep_ms=5000
    )
    fan = step(op, first=True)
    assert isinstance(fan, Fanout) and fan.calls[0] is not None
    # each master runs the single-master lock's keep script: the same call as Lock's
    assert fan.calls == (
        keep.release_keep_call(KEYS, OWNER, request_id="req-1", token=0, keep_ms=5000),
    ) * len(masters)
    assert header_arity("lock_release_keep", 1) == (
        len(fan.calls[0].keys),
        len(fan.calls[0].args),
    )
    return op


KEPT = [codes.RELEASED, 0, 5000]


@pytest.mark.parametrize(
    "replies",
    [
        [KEPT, down(), KEPT],
        [[codes.LOST, 0, 0], [codes.LOST, 0, 0], KEPT],
        [KEPT, down(), down()],
    ],
)
def test_release_keep_is_judged_as_a_plain_release(replies) -> None:
    # kept on a majority: done (nobody else can have a majority); gone from a majority: lost;
    # else a quorum error, as the plain release's rule on the same answers
    plain = [r if isinstance(r, BaseException) else r[:2] for r in replies]
    outcomes: list[tuple[Any, ...]] = []
    for op, answers in ((release_keep_op(), replies), (release_op(), plain)):
        try:
            result = finish(op, answers)
            outcomes.append(("done", result.remaining, list(result.unconfirmed)))
        except (LeaseLostError, QuorumError) as exc:
            outcomes.append((type(exc).__name__,))
    assert outcomes[0] == outcomes[1]


def test_release_keep_only_keeps_the_last_hold() -> None:
    op = core.release(KEYS, OWNER, MASTERS3, held=2, request_id="r", master_timeout=0.1, keep_ms=1)
    with pytest.raises(AssertionError):
        next(op)


# --- renewal and queries --------------------------------------------------------------------


def test_renewal_counts_a_majority_per_hold() -> None:
    table = HoldTable()
    holds = []
    for i in range(3):
        keys = LockKeys.for_name(f"lock-{i}")
        holds.append(table.granted(keys, OWNER, Acquired(1, 30.0, 0.0, 0), None))
    clock = FakeClock(50.0)
    op = core.renew(holds, RenewalPolicy(30.0), MASTERS3, master_timeout=0.1, clock=clock)
    fan = step(op, first=True)
    assert isinstance(fan, Fanout) and fan.calls[0] is not None
    assert fan.calls[0].script is scripts.LOCK_RENEW
    renewals = finish(op, [[1, 0, 1], [1, 0, 0], down()])
    assert [r.renewed for r in renewals] == [True, False, None]
    assert all(r.sent_at == 50.0 for r in renewals)


def status_reply(ttl_ms: int, **holders: int) -> list:
    pairs = [x for field, count in holders.items() for x in (f"c:{field}", count)]
    return [ttl_ms, 0, *pairs]


def test_status_is_what_a_majority_says() -> None:
    op = core.status(KEYS, MASTERS3, master_timeout=0.1)
    fan = step(op, first=True)
    assert isinstance(fan, Fanout)
    result = finish(
        op, [status_reply(9_000, a=2), status_reply(8_000, a=2), status_reply(7_000, b=1)]
    )
    assert result.locked and result.holders == {"c:a": 2}
    assert result.ttl == pytest.approx(8.0)


def test_status_of_a_free_lock_and_of_a_split_one() -> None:
    op = core.status(KEYS, MASTERS3, master_timeout=0.1)
    step(op, first=True)
    result = finish(op, [status_reply(-2), status_reply(4_000, a=1), status_reply(4_000, b=1)])
    assert not result.locked and result.ttl is None and result.holders == {}


def kept_reply(ttl_ms: int, owner: str) -> list:
    return [ttl_ms, 0, f"{owner}:kept", 1, "redlease:fence", 0]


def test_status_of_a_lock_kept_on_a_majority() -> None:
    op = core.status(KEYS, MASTERS3, master_timeout=0.1)
    step(op, first=True)
    result = finish(op, [kept_reply(4_000, "c:a"), kept_reply(3_000, "c:a"), status_reply(-2)])
    assert result.locked and result.holders == {} and result.kept_by == "c:a"
    assert result.ttl == pytest.approx(3.0)
    op = core.status(KEYS, MASTERS3, master_timeout=0.1)
    step(op, first=True)
    result = finish(op, [kept_reply(4_000, "c:a"), status_reply(-2), status_reply(-2)])
    assert not result.locked and result.kept_by is None and result.ttl is None


def test_status_needs_a_majority_of_answers() -> None:
    op = core.status(KEYS, MASTERS3, master_timeout=0.1)
    step(op, first=True)
    with pytest.raises(QuorumError):
        finish(op, [status_reply(-2), down(), down()])


def test_force_release() -> None:
    op = core.force_release(KEYS, MASTERS3, master_timeout=0.1)
    fan = step(op, first=True)
    assert isinstance(fan, Fanout) and fan.calls[0] is not None
    assert fan.calls[0].script is scripts.LOCK_FORCE_RELEASE
    assert finish(op, [1, 0, down()]) is True
    op = core.force_release(KEYS, MASTERS3, master_timeout=0.1)
    step(op, first=True)
    with pytest.raises(QuorumError):
        finish(op, [1, down(), down()])


def test_a_wait_is_bounded_by_recheck() -> None:
    clock = FakeClock()
    op, _ = start(clock)
    step(op, [held(-1), held(-1), held(-1)])  # held with no expiry
    step(op, 3)
    wait = step(op, [held(-1), held(-1), held(-1)])
    assert wait == WaitWake(RECHECK)
    assert not math.isinf(wait.timeout)
