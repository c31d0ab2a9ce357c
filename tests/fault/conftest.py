"""Fixtures of the fault-injection suite (``pytest -m fault``).

The fault tests start servers of their own for every test (they kill, restart, pause and
fail them over). By default they run on the newest server binary found, to keep the suite
short; ``REDLEASE_FAULT_SERVERS=all`` runs them on every binary ``find_servers()`` finds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from redlease.testing import RedisServer, ServerBinary, find_servers


def _fault_servers() -> list[ServerBinary]:
    found = find_servers()
    if os.environ.get("REDLEASE_FAULT_SERVERS") == "all" or not found:
        return found
    return [max(found, key=lambda s: s.version_tuple)]


FAULT_SERVERS = _fault_servers()


@pytest.fixture(params=FAULT_SERVERS, ids=[s.label for s in FAULT_SERVERS])
def fault_binary(request: pytest.FixtureRequest) -> ServerBinary:
    return request.param


@pytest.fixture
def lock_server(fault_binary: ServerBinary) -> Iterator[RedisServer]:
    """The server the locks live on; the test may kill, restart or pause it."""
    with RedisServer(fault_binary) as srv:
        yield srv


@pytest.fixture
def resource_server(fault_binary: ServerBinary) -> Iterator[RedisServer]:
    """Another server for the protected resource, so that faults of the lock server (data
    lost, failover) do not take the resource's own data with them."""
    with RedisServer(fault_binary) as srv:
        yield srv


@pytest.fixture
def name() -> str:
    return f"fault:{uuid.uuid4().hex[:12]}"
