"""Fixtures of the stateful tests: one private server per test (on the newest binary found;
``REDLEASE_STATEFUL_SERVERS=all`` for every one), or a master with a replica for the rules
that fail over; each test run with sync and asyncio owners; ids minted per emulated client
process (``helpers.Process``).

Settings: ``DEFAULT`` keeps each machine to a few seconds (``FAILOVER``, for the machine that
loses data, to about ten); ``SLOW`` (tests marked ``slow``) explores longer runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from redlease.testing import RedisServer, ServerBinary, find_servers

from .helpers import Replicated, minting_per_process


def _servers() -> list[ServerBinary]:
    found = find_servers()
    if os.environ.get("REDLEASE_STATEFUL_SERVERS") == "all" or not found:
        return found
    return [max(found, key=lambda s: s.version_tuple)]


STATEFUL_SERVERS = _servers()

DEFAULT = settings(
    max_examples=15,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FAILOVER = settings(
    max_examples=30,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""The lock machine that loses data: more runs, as few of them draw every rule a loss of
data needs to show a defect (each run draws a subset of the rules)."""
SLOW = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(params=STATEFUL_SERVERS, ids=[s.label for s in STATEFUL_SERVERS])
def stateful_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    with RedisServer(request.param) as srv:
        yield srv


@pytest.fixture(params=["sync", "async"])
def is_async(request: pytest.FixtureRequest) -> bool:
    return request.param == "async"


@pytest.fixture(params=STATEFUL_SERVERS, ids=[s.label for s in STATEFUL_SERVERS])
def replicated(request: pytest.FixtureRequest) -> Iterator[Replicated]:
    """A master and its replica (``helpers.Replicated``), for failovers."""
    topology = Replicated(request.param)
    try:
        yield topology
    finally:
        topology.close()


@pytest.fixture(autouse=True)
def processes() -> Iterator[None]:
    """Ids minted by the ``helpers.Process`` of the minting thread or task."""
    with minting_per_process():
        yield
