"""Leader election on a real Redis Cluster, sync and asyncio: the election's lock, its leader
record and its channel share the name's hash slot (on several masters); one candidate leads,
the other waits; a forced release deposes the leader (``term.lost``, cause ``forced``) and the
other leads with a higher token; a resignation hands over; ``leader()`` and ``observe()``
answer on the cluster."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import redlease

pytestmark = pytest.mark.cluster

L = 3.0
"""The candidates' lease (their clients' ``watchdog_timeout``)."""


async def _wait(event: Any, timeout: float) -> bool:
    """Wait for a ``threading.Event`` or an ``asyncio.Event`` from the test's loop."""
    if isinstance(event, asyncio.Event):
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True
    return await asyncio.to_thread(event.wait, timeout)


class Candidate:
    """Campaigns in a thread (sync) or a task (asyncio) and leads until told to resign."""

    def __init__(self, side: Any, election: Any) -> None:
        self.term: Any = None
        self.error: BaseException | None = None
        self.elected = threading.Event()
        self.done = threading.Event()
        if side.is_async:
            self._resign: Any = asyncio.Event()
            self.task = asyncio.ensure_future(self._async(election))
        else:
            self._resign = threading.Event()
            threading.Thread(target=self._sync, args=(election,), daemon=True).start()

    def _sync(self, election: Any) -> None:
        try:
            with election.leadership(timeout=30) as term:
                self.term = term
                self.elected.set()
                self._resign.wait(30)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    async def _async(self, election: Any) -> None:
        try:
            async with election.leadership(timeout=30) as term:
                self.term = term
                self.elected.set()
                await asyncio.wait_for(self._resign.wait(), 30)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    async def leads(self, timeout: float = 10.0) -> bool:
        return await _wait(self.elected, timeout)

    async def resign(self) -> None:
        self._resign.set()
        assert await _wait(self.done, 10), "the block did not end"


async def _first_observed(side: Any, election: Any) -> Any:
    if side.is_async:
        async for leader in election.observe(poll=0.2):
            return leader
    else:

        def first() -> Any:
            for leader in election.observe(poll=0.2):
                return leader

        return await asyncio.to_thread(first)
    raise AssertionError("observe() yielded nothing")


async def test_election_on_a_cluster(side, cluster, name):
    a_client = side.client(cluster.url, cluster=True, watchdog_timeout=L)
    b_client = side.client(cluster.url, cluster=True, watchdog_timeout=L)
    names: dict[int, str] = {}  # one election per master
    for i in range(100):
        if len(names) == cluster.masters:
            break
        candidate = f"{name}:{i}:{side.kind}"
        names.setdefault(cluster.master_of(a_client.election(candidate).lock_name).port, candidate)
    assert len(names) == cluster.masters
    for election_name in names.values():
        a = a_client.election(election_name, identity="a")
        b = b_client.election(election_name, identity="b")
        assert cluster.master_of(a.record_key) is cluster.master_of(a.lock_name)
        assert await side(b.leader()) is None

        first = Candidate(side, a)
        assert await first.leads()
        second = Candidate(side, b)
        assert not await second.leads(timeout=0.5)  # waits while the first leads
        assert await side(a.leader()) == await side(b.leader()) == "a"
        assert await _first_observed(side, b) == "a"

        assert await side(b.force_release())  # deposes a: b leads, a hears of it
        assert await second.leads(timeout=10)
        assert second.term.token > first.term.token
        assert await _wait(first.term.lost, L + 5)
        assert first.term.error.cause == "forced"
        assert await side(a.leader()) == await side(b.leader()) == "b"
        await first.resign()
        assert isinstance(first.error, redlease.LeaseLostError)

        third = Candidate(side, a)  # a campaigns again; b resigns and hands over
        assert not await third.leads(timeout=0.5)
        await second.resign()
        assert second.error is None
        assert await third.leads(timeout=10)
        assert third.term.token > second.term.token
        assert await side(b.leader()) == "a"
        await third.resign()
        assert third.error is None
        assert await side(b.leader()) is None
