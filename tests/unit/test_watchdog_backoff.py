"""The watchdog's renewal policy and the retry backoff."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from redlease._core import scripts
from redlease._core.backoff import full_jitter
from redlease._core.keys import LockKeys
from redlease._core.lock import Acquired, HoldTable
from redlease._core.watchdog import BATCH, RenewalPolicy


def test_intervals() -> None:
    policy = RenewalPolicy(30.0)
    assert policy.interval == 10.0
    assert policy.retry_interval == 1.0
    assert policy.next_delay(True) == 10.0
    assert policy.next_delay(False) == 1.0
    short = RenewalPolicy(3.0)
    assert short.interval == pytest.approx(1.0)
    assert short.retry_interval == pytest.approx(0.3)


@given(st.floats(0.01, 1e6))
def test_retry_comes_sooner_than_a_regular_round(timeout: float) -> None:
    policy = RenewalPolicy(timeout)
    assert 0 < policy.retry_interval < policy.interval < timeout
    assert policy.retry_interval <= 1.0


def test_expired_after_a_whole_timeout_without_renewal() -> None:
    policy = RenewalPolicy(30.0)
    assert not policy.expired(last_renewed=100.0, now=100.0)
    assert not policy.expired(last_renewed=100.0, now=129.999)
    assert policy.expired(last_renewed=100.0, now=130.0)
    assert policy.expired(last_renewed=100.0, now=500.0)


def _holds(n: int) -> list:
    table = HoldTable()
    out = []
    for i in range(n):
        keys = LockKeys.for_name(f"lock-{i:04d}")
        out.append(table.granted(keys, f"owner-{i % 5}:{i}", Acquired(1, 30.0, 0.0, 7), None))
    return out


def test_no_holds_no_calls() -> None:
    assert RenewalPolicy(30.0).calls([]) == []


def test_one_call_for_a_few_locks() -> None:
    holds = _holds(3)
    [(batch, call)] = RenewalPolicy(30.0).calls(holds)
    assert batch == holds
    assert call.script is scripts.LOCK_RENEW
    assert call.keys == (
        "lock-0000",
        "lock-0001",
        "lock-0002",
        *(LockKeys.for_name(f"lock-{i:04d}").fence for i in range(3)),
    )
    # the owner fields, then the token of each hold
    assert call.args == (30000, "owner-0:0", "owner-1:1", "owner-2:2", *(h.token for h in holds))
    assert call.undo is None


def test_on_a_cluster_the_lock_keys_alone() -> None:
    """A slot being migrated may hold a lock's key and not its fencing counter: a script
    whose keys are split fails (TRYAGAIN), so a cluster's renewals name the lock keys only."""
    holds = _holds(3)
    for batch, call in RenewalPolicy(30.0).calls(holds, by_slot=True):
        assert call.keys == tuple(h.keys.name for h in batch)
        assert call.args == (30000, *(h.owner for h in batch), *(h.token for h in batch))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 3 * BATCH + 5), st.floats(0.001, 3600))
@example(1, 0.0010000000000000002)  # float noise above 1 ms rounds up to 2 ms
def test_calls_cover_all_holds_in_batches(n: int, timeout: float) -> None:
    holds = _holds(n)
    out = RenewalPolicy(timeout).calls(holds)
    assert [h for batch, _ in out for h in batch] == holds
    assert len(out) == -(-n // BATCH)
    for batch, call in out:
        assert 1 <= len(batch) <= BATCH
        assert call.keys == (*(h.keys.name for h in batch), *(h.keys.fence for h in batch))
        lease_ms, *rest = call.args
        owners, tokens = rest[: len(batch)], rest[len(batch) :]
        assert tokens == [h.token for h in batch]
        assert isinstance(lease_ms, int)
        # The lease in ms is rounded up, never down (a renewal must not shorten the lease).
        assert timeout * 1000 <= lease_ms <= timeout * 1000 + 1
        assert owners == [h.owner for h in batch]


def test_batch_sizes() -> None:
    out = RenewalPolicy(30.0).calls(_holds(2 * BATCH + 1))
    assert [len(b) for b, _ in out] == [BATCH, BATCH, 1]


# --- backoff ---------------------------------------------------------------------------------


def test_full_jitter_scales_the_random_draw() -> None:
    assert full_jitter(0, base=0.1, cap=10.0, random=lambda: 0.5) == pytest.approx(0.05)
    assert full_jitter(3, base=0.1, cap=10.0, random=lambda: 0.5) == pytest.approx(0.4)
    assert full_jitter(3, base=0.1, cap=0.5, random=lambda: 0.5) == pytest.approx(0.25)
    assert full_jitter(5, base=0.1, cap=10.0, random=lambda: 0.0) == 0.0


def test_full_jitter_huge_attempt_is_capped_without_overflow() -> None:
    assert full_jitter(10**6, base=0.1, cap=2.0, random=lambda: 0.75) == pytest.approx(1.5)


@given(
    st.integers(0, 10_000),
    st.floats(1e-4, 10),
    st.floats(1e-3, 100),
    st.floats(0, 1, exclude_max=True),
)
def test_full_jitter_bounds(attempt: int, base: float, cap: float, r: float) -> None:
    delay = full_jitter(attempt, base=base, cap=cap, random=lambda: r)
    bound = min(cap, base * 2 ** min(attempt, 64))
    assert 0 <= delay <= bound
    assert delay <= cap
    if r > 1e-300:  # not a subnormal that underflows to 0
        assert delay > 0
    assert delay == pytest.approx(r * bound)


def test_the_next_round_is_due_an_interval_after_this_one_was_due() -> None:
    """Fixed rate: a round that began late (a busy loop, a starved thread) does not push
    the next one back, so a steady lateness does not eat into the lease left at each
    renewal; a round more than an interval late is followed at once by one more, not by a
    burst; after a failure, a retry soon."""
    policy = RenewalPolicy(3.0)  # every 1 s
    assert policy.next_round(due=10.0, started=10.0, ok=True, now=10.01) == pytest.approx(11.0)
    assert policy.next_round(due=10.0, started=10.4, ok=True, now=10.6) == pytest.approx(11.0)
    assert policy.next_round(due=10.0, started=12.5, ok=True, now=12.6) == pytest.approx(12.5)
    assert policy.next_round(due=10.0, started=10.4, ok=False, now=10.6) == pytest.approx(10.9)


@given(st.lists(st.floats(0, 0.9), min_size=2, max_size=50))
def test_a_steady_lateness_never_widens_the_gap_between_renewals(lateness: list[float]) -> None:
    """Each round starts late by less than an interval: two renewals are never further apart
    than an interval plus the difference of their lateness (counting each round from its
    late start would add the whole lateness to every gap)."""
    policy = RenewalPolicy(3.0)
    due, started_before = 0.0, None
    for late in lateness:
        started = due + late
        if started_before is not None:
            assert started - started_before <= policy.interval + late + 1e-9
        due = policy.next_round(due, started, ok=True, now=started)
        started_before = started


def test_a_round_more_than_half_an_interval_late_is_too_late() -> None:
    policy = RenewalPolicy(30.0)
    assert not policy.too_late(due=100.0, started=104.9)
    assert policy.too_late(due=100.0, started=105.1)
