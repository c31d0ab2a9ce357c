"""Durations and counts are checked in one place before anything is sent, and no retry loop of
the core re-sends with no pause (issue #12 items 1, 2, 4). Pure core: no sockets."""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redlease import InvalidArgumentError, RedleaseError, ServerUnavailableError
from redlease._core import arguments, backoff, codes, latch, lock, redlock, rwlock, semaphore
from redlease._core import arguments as limits
from redlease._core import arguments as options
from redlease._core import lease_semaphore as lease_core
from redlease._core.backoff import Outage
from redlease._core.keys import LeaseSemaphoreKeys, LockKeys, SemaphoreKeys
from redlease._core.requests import Call, Sleep, Subscribe, WaitWake

from ._fakes import first_call

NOT_NUMBERS = [None, "1", b"1", True, False, [], object(), 1j]
NAN = [math.nan, -math.nan]
LUA_DIR = Path(semaphore.__file__).parent.parent / "lua"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _is_invalid(exc: BaseException, what: str) -> None:
    assert isinstance(exc, InvalidArgumentError)
    assert isinstance(exc, RedleaseError) and isinstance(exc, ValueError)
    assert what in str(exc), (what, str(exc))


# --- the bounds -----------------------------------------------------------------------------


def test_the_bounds_are_what_the_server_takes() -> None:
    assert lock.drift(limits.MIN_LEASE) < limits.MIN_LEASE  # a minimal lease can succeed
    assert limits.MIN_LEASE - lock.drift(limits.MIN_LEASE) >= 0.005  # 5 ms for the round trip
    # in ms, plus the server clock, a deadline stays an exact integer in Lua's text form
    assert lock.to_ms(limits.MAX_LEASE) + 2_000_000_000_000 < 10**14
    assert limits.MAX_COUNT == 2**53 - 1  # exact as a Lua number (a double)
    assert float(limits.MAX_COUNT) == limits.MAX_COUNT
    assert options.MIN_LEASE == limits.MIN_LEASE and options.MAX_LEASE == limits.MAX_LEASE


def test_the_release_script_refuses_past_the_same_bound() -> None:
    source = (LUA_DIR / "semaphore_release.lua").read_text()
    assert f"> {limits.MAX_COUNT} then" in source
    add = semaphore.add_permits(SemaphoreKeys.for_name("s"), 1)
    assert first_call(add).args[-1] == limits.MAX_COUNT  # the add script is given the bound


# --- leases ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [*NOT_NUMBERS, *NAN, math.inf, -math.inf, 0, 0.0, -1, -1e-9, 10**400, -(10**400)]
)
@pytest.mark.parametrize("what", ["lease", "watchdog_timeout", "handoff_window"])
def test_a_bad_lease_is_refused_naming_it(value: Any, what: str) -> None:
    for check in (limits.lease, options.lease_seconds, options.seconds):
        with pytest.raises(InvalidArgumentError) as info:
            check(value, what)
        _is_invalid(info.value, what)


@pytest.mark.parametrize("value", [0.002, 0.0099, 1e-9, timedelta(milliseconds=2), 5e-324])
def test_a_lease_too_short_to_work_is_refused(value: Any) -> None:
    for what in ("lease", "watchdog_timeout", "handoff_window"):
        with pytest.raises(InvalidArgumentError, match=f"{what} must be at least 0.01 s"):
            options.seconds(value, what)
    with pytest.raises(InvalidArgumentError, match="lease"):
        arguments.lease(value)
    with pytest.raises(InvalidArgumentError, match="handoff_window"):
        options.window(value, "handoff_window")


@pytest.mark.parametrize("value", [1e14, 1e306, 1e11, 10 * 365 * 86400 + 1, timedelta(days=4000)])
def test_a_lease_too_long_for_the_server_is_refused(value: Any) -> None:
    for what in ("lease", "watchdog_timeout", "handoff_window", "replica_timeout"):
        with pytest.raises(InvalidArgumentError, match=f"{what} must be at most"):
            options.seconds(value, what)
    with pytest.raises(InvalidArgumentError, match="lease must be at most"):
        arguments.lease(value)


@pytest.mark.parametrize(
    "value", [0.01, 0.5, 30, 86400.0, limits.MAX_LEASE, timedelta(days=3650), timedelta(seconds=1)]
)
def test_a_lease_in_range_is_taken(value: Any) -> None:
    expected = value.total_seconds() if isinstance(value, timedelta) else float(value)
    assert options.lease_seconds(value) == expected
    assert options.seconds(value, "watchdog_timeout") == expected
    assert arguments.lease(value) == expected
    assert isinstance(options.lease_seconds(value), float)


def test_other_durations_have_no_lease_minimum_but_the_same_maximum() -> None:
    assert options.seconds(0.001, "master_timeout") == 0.001
    assert options.replication(1, 0.001) is not None
    for bad in (0, -1, math.nan, math.inf, 1e12, "1", True, None):
        with pytest.raises(InvalidArgumentError, match="master_timeout"):
            options.seconds(bad, "master_timeout")  # type: ignore[arg-type]  # wrong on purpose
        with pytest.raises(InvalidArgumentError, match="replica_timeout"):
            options.replication(1, bad)  # type: ignore[arg-type]  # wrong on purpose


def test_a_window_of_zero_or_none_is_off() -> None:
    assert options.window(None, "handoff_window") == 0.0
    assert options.window(0, "handoff_window") == 0.0
    for bad in (True, False, "0", math.nan, -1, 1e12):
        with pytest.raises(InvalidArgumentError, match="handoff_window"):
            options.window(bad, "handoff_window")  # type: ignore[arg-type]  # wrong on purpose


def test_replicas_are_a_bounded_count() -> None:
    for bad in (-1, True, 1.0, "1", 2**63):
        with pytest.raises(InvalidArgumentError, match="replicas"):
            options.replication(bad, 1.0)  # type: ignore[arg-type]  # wrong on purpose


# --- waits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [*NOT_NUMBERS[1:], *NAN, -1, -1e-9, math.inf, -math.inf])
def test_a_bad_wait_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        arguments.wait(value)
    _is_invalid(info.value, "timeout")
    with pytest.raises(InvalidArgumentError) as info:
        options.wait_args(True, value)
    _is_invalid(info.value, "timeout")


@pytest.mark.parametrize("value", [1e-9, 1e300, sys.float_info.max, 10**400, timedelta.max])
def test_any_finite_wait_is_taken_however_long(value: Any) -> None:
    got = arguments.wait(value)
    assert got is not None and math.isfinite(got) and got > 0
    assert options.wait_args(True, value) == (True, got)
    assert options.wait_seconds(value, "--wait") == got


def test_zero_tries_once_everywhere() -> None:
    """``timeout=0`` is a single try for semaphores and latches (a wait of 0) and for locks
    (``blocking=False``), as ``threading.Lock.acquire(timeout=0)`` and redis-py's
    ``blocking_timeout=0``."""
    assert arguments.wait(0) == 0.0
    assert arguments.wait(None) is None
    assert options.wait_args(True, None) == (True, None)
    assert options.wait_args(True, 0) == (False, None)
    assert options.wait_args(True, 0.0) == (False, None)
    assert options.wait_args(True, timedelta(0)) == (False, None)
    assert options.wait_args(False, None) == (False, None)
    assert options.wait_args(False, 0) == (False, None)
    assert options.wait_args(True, 2) == (True, 2.0)
    with pytest.raises(InvalidArgumentError, match="blocking=False"):
        options.wait_args(False, 1)
    with pytest.raises(InvalidArgumentError, match="timeout must be None or seconds >= 0"):
        options.wait_args(True, -1)
    with pytest.raises(InvalidArgumentError, match="timeout must be None or seconds >= 0"):
        options.wait_args(False, -1)


def test_a_huge_wait_never_hands_the_shell_a_huge_wait() -> None:
    """Every wait the core yields is bounded (a thread or event loop waiting longer than
    about 2**63 ns raises ``OverflowError``), whatever the caller's timeout."""
    clock = FakeClock()
    keys = LockKeys.for_name("x")
    op = lock.acquire(
        keys, "me", held=0, lease=10.0, blocking=True, timeout=1e300, wait_id="w", clock=clock
    )
    assert isinstance(next(op), Subscribe)
    assert isinstance(op.send(True), Call)
    wait = op.send([codes.HELD, 0, -1, 0])
    assert isinstance(wait, WaitWake) and wait.timeout <= lock.RECHECK
    gate = latch.LatchKeys.for_name("g")
    op2 = latch.wait(gate, "me", timeout=sys.float_info.max, clock=clock)
    assert isinstance(next(op2), Subscribe)
    assert isinstance(op2.send(True), Call)
    wait = op2.send(3)
    assert isinstance(wait, WaitWake) and wait.timeout <= lock.RECHECK


# --- counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [*NOT_NUMBERS, 1.0, 2.5, math.nan, math.inf, 0, -1, 2**53, 2**63, 2**64, 10**100],
)
def test_a_bad_count_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        arguments.count(value, "permits")
    _is_invalid(info.value, "permits")
    with pytest.raises(InvalidArgumentError) as info:
        latch.count_arg(value)
    _is_invalid(info.value, "count")


def test_an_int_too_long_to_print_gets_a_clear_error_too() -> None:
    """Python refuses to print an int of more than 4300 digits: the message must not."""
    huge = 10**5000
    for call, what in (
        (lambda: arguments.count(huge, "permits"), "permits"),
        (lambda: latch.count_arg(-huge), "count"),
        (lambda: options.lease_seconds(huge), "lease"),
        (lambda: arguments.wait(-huge), "timeout"),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        _is_invalid(info.value, what)
        assert "bits" in str(info.value)
    assert arguments.wait(huge) == sys.float_info.max  # a wait that long: fine


def test_counts_up_to_the_bound_are_taken() -> None:
    for value in (1, 2, 10**15, limits.MAX_COUNT):
        assert arguments.count(value, "permits") == value
        assert latch.count_arg(value) == value
    with pytest.raises(InvalidArgumentError, match=r"at most 9007199254740991 \(2\*\*53 - 1\)"):
        latch.count_arg(limits.MAX_COUNT + 1)
    with pytest.raises(InvalidArgumentError, match="already open"):
        latch.count_arg(0)


def test_an_add_the_server_refuses_raises_and_says_nothing_was_added() -> None:
    keys = SemaphoreKeys.for_name("s")
    op = semaphore.add_permits(keys, 5)
    next(op)
    with pytest.raises(InvalidArgumentError, match="nothing was added"):
        op.send([limits.MAX_COUNT - 1, limits.MAX_COUNT, semaphore.TOO_MANY])
    op = semaphore.add_permits(keys, 5)
    next(op)
    with pytest.raises(StopIteration) as done:
        op.send([7, 7, 1])
    assert done.value.value == 7


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(), st.text()))
def test_every_check_answers_a_value_or_invalid_argument(value: Any) -> None:
    checks = (
        lambda v: limits.lease(v, "lease"),
        lambda v: limits.duration(v, "master_timeout"),
        lambda v: limits.wait(v, "timeout", zero=True),
        lambda v: limits.count(v, "permits"),
    )
    for check in checks:
        with contextlib.suppress(InvalidArgumentError):
            check(value)


# --- no retry loop re-sends with no pause ---------------------------------------------------


def _drive_late_grants(op: Any, clock: FakeClock, lease: float, grant: Any, rounds: int) -> float:
    """Answer every try with a grant that came too late; returns the time paused in all."""
    paused = 0.0
    request = next(op)
    tries = 0
    while tries < rounds:
        if isinstance(request, Subscribe):
            request = op.send(True)
        elif isinstance(request, Sleep):
            paused += request.seconds
            clock.advance(request.seconds)
            request = op.send(None)
        elif isinstance(request, WaitWake):
            # the caller's own give-back wakes it at once: the worst case
            paused += 0.0
            request = op.send(True)
        elif isinstance(request, Call) and request.script.name.endswith("acquire"):
            tries += 1
            clock.advance(lease)  # the reply took the whole lease
            request = op.send(grant)
        else:  # a give-back
            request = op.send([codes.RELEASED, 0])
    return paused


def test_a_lock_answered_only_by_late_grants_slows_down() -> None:
    clock = FakeClock()
    op = lock.acquire(
        LockKeys.for_name("x"),
        "me",
        held=0,
        lease=0.01,
        blocking=True,
        timeout=None,
        wait_id="w",
        clock=clock,
    )
    paused = _drive_late_grants(op, clock, 0.01, [codes.GRANTED, 1, 10, 1], rounds=40)
    # the pause grows to MAX_PAUSE: 40 tries take well over 10 s, not 40 round trips
    assert paused > 10.0


def test_a_read_lock_answered_only_by_late_grants_slows_down() -> None:
    clock = FakeClock()
    op = rwlock.acquire(
        rwlock.RwKeys.for_name("x"),
        rwlock.READ,
        "me",
        held=0,
        lease=0.01,
        blocking=True,
        timeout=None,
        wait_id="w",
        clock=clock,
    )
    paused = _drive_late_grants(op, clock, 0.01, [codes.GRANTED, 1, 10, 1], rounds=40)
    assert paused > 10.0


def test_a_lease_permit_answered_only_by_late_grants_slows_down() -> None:
    clock = FakeClock()
    op = lease_core.lease_acquire(
        LeaseSemaphoreKeys.for_name("x"), "me", lease=0.01, timeout=None, clock=clock
    )
    paused = _drive_late_grants(op, clock, 0.01, [semaphore.GRANTED, 10, 0], rounds=40)
    assert paused > 10.0


def test_the_pace_starts_at_a_few_ms_and_grows_to_a_cap() -> None:
    pace = backoff.Pace()
    pauses = [pace.pause() for _ in range(12)]
    assert pauses[0] == backoff.MIN_PAUSE > 0
    assert all(b >= a for a, b in itertools.pairwise(pauses))
    assert pauses[-1] == backoff.MAX_PAUSE
    assert pace.pause(remaining=0.001) == 0.001
    pace.reset()
    assert pace.pause() == backoff.MIN_PAUSE


def test_redlock_and_outage_backoffs_never_pause_zero() -> None:
    clock = FakeClock()
    outage = Outage(clock, None, 10.0)
    for _ in range(5):
        pause = outage.failed(listening=True)
        assert pause is not None and pause >= backoff.MIN_PAUSE
    op = redlock.acquire(
        LockKeys.for_name("x"),
        "me",
        ("a", "b", "c"),
        held=0,
        lease=10.0,
        blocking=True,
        timeout=5.0,
        master_timeout=0.1,
        wait_id="w",
        clock=clock,
        random=lambda: 0.0,  # the worst draw
    )
    request = next(op)
    sleeps = []
    for _ in range(50):
        if isinstance(request, Sleep):
            sleeps.append(request.seconds)
            clock.advance(request.seconds)
            request = op.send(None)
        elif isinstance(request, redlock.Fanout):
            if any(c is not None and c.script.name == "lock_acquire" for c in request.calls):
                # a split vote: one master granted, one holds it elsewhere, one is down
                down = ServerUnavailableError("redis server c unavailable")
                request = op.send([[codes.GRANTED, 1, 10000, 0], [codes.HELD, 0, 5000, 0], down])
            else:
                request = op.send([[codes.RELEASED, 0], None, [codes.RELEASED, 0]])
        else:
            request = op.send(True)
        if len(sleeps) >= 3:
            break
    assert sleeps and all(s >= backoff.MIN_PAUSE for s in sleeps)
