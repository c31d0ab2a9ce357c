"""The spin lock's pure acquire (``_core/spin.py``) and its ``ExponentialBackoff``: the pauses
grow by the multiplier up to the maximum, plus the jitter; a waiter only ever sleeps between
single tries (no place in line, no subscription) and its last try is at the deadline."""

from __future__ import annotations

from typing import Any

import pytest

from redlease import ExponentialBackoff
from redlease._core import codes, scripts, spin
from redlease._core.keys import LockKeys
from redlease._core.lock import Acquired
from redlease._core.requests import Call, Sleep


def test_pauses_grow_by_the_multiplier_up_to_the_maximum_plus_jitter() -> None:
    backoff = ExponentialBackoff(initial=0.01, maximum=0.1, multiplier=3, jitter=0.004)
    pauses = backoff.pauses(random=lambda: 0.5)
    assert [round(next(pauses), 6) for _ in range(5)] == [0.012, 0.032, 0.092, 0.102, 0.102]


def test_a_waiter_sleeps_between_single_tries_and_tries_last_at_the_deadline() -> None:
    now = [0.0]
    op = spin.acquire(
        LockKeys.for_name("spin"),
        "owner",
        held=0,
        lease=30.0,
        blocking=True,
        timeout=1.0,
        wait_id="w",
        backoff=ExponentialBackoff(initial=0.1, maximum=0.4, multiplier=2, jitter=0),
        clock=lambda: now[0],
    )
    held: Any = [codes.HELD, 0, 20_000, 7]
    request = next(op)
    sleeps: list[float] = []
    try:
        while True:
            if isinstance(request, Sleep):
                sleeps.append(request.seconds)
                now[0] += request.seconds
                request = op.send(None)
                continue
            assert isinstance(request, Call) and request.script is scripts.LOCK_ACQUIRE
            assert request.args[3] == 0  # no place in line: each try is a single try
            request = op.send(held)
    except StopIteration as stop:
        assert stop.value is None
    assert [round(s, 6) for s in sleeps] == [0.1, 0.2, 0.4, 0.3]  # the last one ends at 1.0

    now[0] = 0.0
    op = spin.acquire(
        LockKeys.for_name("spin"),
        "owner",
        held=0,
        lease=30.0,
        blocking=True,
        timeout=None,
        wait_id="w",
        backoff=ExponentialBackoff(),
        clock=lambda: now[0],
    )
    assert isinstance(next(op), Call)
    assert isinstance(op.send(held), Sleep)
    assert isinstance(op.send(None), Call)
    with pytest.raises(StopIteration) as stopped:
        op.send([codes.GRANTED, 1, 30_000, 8])
    assert stopped.value.value == Acquired(count=1, ttl=30.0, requested_at=0.0, token=8)
