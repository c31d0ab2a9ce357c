"""A master killed and its replica promoted while a lock is held and waited on."""

from __future__ import annotations

import threading
import time

import pytest
from integration.helpers import eventually

import redlease

pytestmark = pytest.mark.cluster


async def test_failover_with_a_holder_and_a_waiter(own_cluster):
    name = "order:failover"
    lost = threading.Event()
    holder_client = redlease.Client.from_url(own_cluster.url, cluster=True, watchdog_timeout=3)
    waiter_client = redlease.Client.from_url(own_cluster.url, cluster=True, watchdog_timeout=3)
    try:
        holder = holder_client.lock(name, on_lease_lost=lambda _e: lost.set())
        assert holder.acquire()
        got: list[tuple[bool, float]] = []  # the waiter's answer, and when it came back

        def wait_for_it() -> None:
            answer = waiter_client.lock(name).acquire(timeout=60)
            got.append((answer, time.monotonic()))

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        await eventually(lambda: holder_client.lock(name).statistics().waiters == 1)
        own_cluster.master_of(name).kill()  # its replica takes over after the node timeout
        # the truth after failover: either the hold survived on the promoted replica (and
        # renewals reach it), or the holder is told it was lost; never two holders
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not lost.is_set():
            try:
                if holder.owned():
                    break
            except redlease.ServerUnavailableError:
                pass
            time.sleep(0.2)
        told_before_release = lost.is_set()
        release_started = time.monotonic()
        try:
            holder.release()
            released = True
        except redlease.LeaseLostError:
            # the hold did not outlast the failover (found on the promoted replica, then gone
            # before a renewal reached it, or never there): release tells the holder so
            released = False
        if told_before_release:
            assert not released, "a holder told its lease was lost does not still hold it"
        if released:
            # the hold lasted until this release: the waiter cannot have had the lock before it
            assert all(at > release_started for _answer, at in got), "two holders"
        waiter.join(60)
        assert [answer for answer, _at in got] == [True], "the waiter recovers and gets the lock"
        stats = waiter_client.lock(name).statistics()
        assert [o.split(":")[0] for o in stats.holders] == [waiter_client.id]
    finally:
        holder_client.close()
        waiter_client.close()
