"""An asyncio client used on a second event loop (a module-level client under two
``asyncio.run()`` calls or two Starlette/FastAPI ``TestClient`` runs) raises ``EventLoopError``,
never redis-py's raw "Event loop is closed" or "attached to a different loop", from every
entry point, including those that read the server before any script call: an election's
``leader()`` and ``observe()``, ``eviction_policies()``, and the Redlock client
(``AsyncRedlockClient``). The lock's own calls are covered by tests/integration/test_fastapi.py.

The clients here are left bound to a closed loop, as a module-level client is: their sockets
cannot be closed any more (their loop is gone), and Python warns about them when they are
collected; each test collects them itself, with that warning ignored, so that no later test
sees it.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from redlease import AsyncClient, EventLoopError
from redlease._async.redlock import AsyncRedlockClient
from redlease.testing import RedisServer, find_server


@pytest.fixture(scope="module")
def newest() -> Iterator[RedisServer]:
    with RedisServer(find_server()) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _collect_leftovers() -> Iterator[None]:
    """The first loop's sockets, never closed: collected here, their warning ignored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        yield
        gc.collect()


def _second_loop_fails(call: Any, what: str, name: str | None) -> None:
    """``call()`` on a loop of its own raises ``EventLoopError`` for ``name``, saying which
    client and what to do."""
    with pytest.raises(EventLoopError) as raised:
        asyncio.run(call())
    error = raised.value
    assert isinstance(error, RuntimeError)  # an `except RuntimeError` still catches it
    assert error.name == name
    assert f"this {what} was first used on another event loop (now closed)" in str(error)
    assert "create one per event loop" in str(error)


def test_election_leader_on_a_second_loop(newest: RedisServer, name: str) -> None:
    client = AsyncClient.from_url(newest.url, watchdog_timeout=5)
    election = client.election(name, identity="first-loop")

    async def lead() -> str | None:
        async with election.leadership(timeout=5):
            return await election.leader()

    assert asyncio.run(lead()) == "first-loop"

    async def leader() -> str | None:
        return await election.leader()

    _second_loop_fails(leader, "AsyncClient", election.lock_name)
    # a client of the new loop sees the same election
    assert asyncio.run(_leader_with_a_new_client(newest.url, name)) is None


async def _leader_with_a_new_client(url: str, name: str) -> str | None:
    async with AsyncClient.from_url(url) as client:
        return await client.election(name).leader()


def test_election_leader_as_the_first_use_binds_the_loop(newest: RedisServer, name: str) -> None:
    client = AsyncClient.from_url(newest.url)
    election = client.election(name)

    async def leader() -> str | None:
        return await election.leader()

    assert asyncio.run(leader()) is None
    _second_loop_fails(leader, "AsyncClient", election.lock_name)


def test_election_observe_on_a_second_loop(newest: RedisServer, name: str) -> None:
    client = AsyncClient.from_url(newest.url)
    election = client.election(name)

    async def first_seen() -> str | None:
        async for leader in election.observe(poll=0.2):
            return leader
        raise AssertionError("observe() yielded nothing")

    assert asyncio.run(first_seen()) is None
    _second_loop_fails(first_seen, "AsyncClient", election.lock_name)


def test_redlock_client_on_a_second_loop(newest: RedisServer, name: str) -> None:
    client = AsyncRedlockClient.from_urls([newest.url], master_timeout=0.5)
    lock = client.lock(name)

    async def take_and_give_back() -> bool:
        taken = await lock.acquire(timeout=5)
        await lock.release()
        return taken

    assert asyncio.run(take_and_give_back())
    _second_loop_fails(take_and_give_back, "AsyncRedlockClient", name)


def test_eviction_policies_on_a_second_loop(newest: RedisServer) -> None:
    client = AsyncClient.from_url(newest.url)

    async def policies() -> Any:
        return await client.eviction_policies()

    assert asyncio.run(policies())
    _second_loop_fails(policies, "AsyncClient", None)
