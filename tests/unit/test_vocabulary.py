"""One spelling per idea in the public API (issue 32)."""

from __future__ import annotations

import inspect
from typing import Any

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
