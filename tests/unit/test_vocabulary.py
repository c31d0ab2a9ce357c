"""One spelling per idea in the public API (issue 32)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, get_args

import pytest

import redlease

# (class, method): the parameters that may be given by position (the count, or the id)
SEMAPHORE_POSITIONALS = {
    ("Semaphore", "acquire"): ["permits"],
    ("Semaphore", "hold"): ["permits"],
    ("Semaphore", "release"): ["permits"],
    ("LeaseSemaphore", "acquire"): [],
    ("LeaseSemaphore", "hold"): [],
    ("LeaseSemaphore", "acquire_many"): ["permits"],
    ("LeaseSemaphore", "release"): ["permit_id"],
    ("LeaseSemaphore", "release_many"): ["permit_ids"],
}


def _positionals(fn: Any) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(fn).parameters.values()
    return [p.name for p in params if p.kind in kinds and p.name != "self"]


@pytest.mark.parametrize("prefix", ["", "Async"])
@pytest.mark.parametrize(("cls", "method"), sorted(SEMAPHORE_POSITIONALS))
def test_what_follows_a_semaphore_s_count_is_keyword_only(
    prefix: str, cls: str, method: str
) -> None:
    # ``acquire(5)`` must not mean five permits on one and five seconds on the other
    fn = getattr(getattr(redlease, prefix + cls), method)
    assert _positionals(fn) == SEMAPHORE_POSITIONALS[cls, method]


LOCKS = ["Lock", "FairLock", "SpinLock", "ReadLock", "WriteLock", "RedlockLock", "MultiLock"]


def _shape(fn: Any) -> list[tuple[str, bool]]:
    """(name, keyword-only) of each parameter but ``self``."""
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind is inspect.Parameter.KEYWORD_ONLY) for p in params if p.name != "self"]


@pytest.mark.parametrize("prefix", ["", "Async"])
@pytest.mark.parametrize("cls", LOCKS)
def test_a_lock_s_acquire_takes_blocking_timeout_then_lease_by_keyword(
    prefix: str, cls: str
) -> None:
    # threading's and redis-py's order; ``acquire(True, 5, 10)`` no longer reads as a lease
    acquire = getattr(redlease, prefix + cls).acquire
    assert _shape(acquire) == [("blocking", False), ("timeout", False), ("lease", True)]


@pytest.mark.parametrize("prefix", ["", "Async"])
@pytest.mark.parametrize("cls", ["Lock", "FairLock", "SpinLock", "ReadLock", "WriteLock"])
def test_a_lock_s_hold_takes_acquire_s_arguments_in_its_order_by_keyword(
    prefix: str, cls: str
) -> None:
    # ``hold(5)`` was five seconds' wait, and would now be ``blocking=5``: refused instead
    hold = getattr(redlease, prefix + cls).hold
    assert _shape(hold) == [("blocking", True), ("timeout", True), ("lease", True)]


@pytest.mark.parametrize("cls", ["LeaseSemaphore", "AsyncLeaseSemaphore"])
def test_a_lease_permit_s_lease_is_changed_one_way(cls: str) -> None:
    sem = getattr(redlease, cls)
    assert hasattr(sem, "update_lease_time")  # Redisson's updateLeaseTime
    assert not hasattr(sem, "renew")


@pytest.mark.parametrize(
    ("cls", "method"),
    [
        ("Client", "fair_lock"),
        ("Client", "rw_lock"),
        ("AsyncClient", "fair_lock"),
        ("AsyncClient", "rw_lock"),
        ("FairLock", "__init__"),
        ("ReadLock", "__init__"),
        ("AsyncFairLock", "__init__"),
        ("AsyncWriteLock", "__init__"),
    ],
)
def test_layout_is_a_literal_as_the_other_choices(cls: str, method: str) -> None:
    annotation = inspect.signature(getattr(getattr(redlease, cls), method)).parameters["layout"]
    assert annotation.annotation in ("LayoutName", redlease.LayoutName)  # (postponed: a string)
    assert get_args(redlease.LayoutName) == ("redlease", "redisson")


def test_the_types_of_the_signatures_are_importable_from_redlease() -> None:
    from redlease import (  # noqa: F401  # noqa: F401
        Eviction,
        LatchStatistics,
        LayoutName,
        OnBusy,
        Seconds,
        SemaphoreStatistics,
        SupportsAsyncLock,
        SupportsLock,
    )

    assert {"Seconds", "LayoutName", "OnBusy", "Eviction"} <= set(redlease.__all__)


def test_the_statistics_types_live_in_one_module() -> None:
    for name in ("LockStatistics", "SemaphoreStatistics", "LatchStatistics"):
        assert getattr(redlease, name).__module__ == "redlease.stats"
        assert name in redlease.__all__


def test_the_integrations_import_nothing_private_of_the_core() -> None:
    contrib = Path(redlease.__file__).parent / "contrib"
    found = [
        str(path.relative_to(contrib))
        for path in contrib.rglob("*.py")
        if "_core" in path.read_text()
    ]
    assert found == []
