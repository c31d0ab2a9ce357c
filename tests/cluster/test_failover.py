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
        got: list[bool] = []
        waiter = threading.Thread(
            target=lambda: got.append(waiter_client.lock(name).acquire(timeout=60))
        )
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
        if not lost.is_set() and not holder.owned():
            # found held on the promoted replica, then gone before a renewal reached it (the
            # failover outlasted the lease): the watchdog tells the holder
            assert lost.wait(30), "a hold found gone is reported to its holder"
        if lost.is_set():
            with pytest.raises(redlease.LeaseLostError):
                holder.release()
        else:
            assert not got  # the waiter has not got it meanwhile
            holder.release()
        waiter.join(60)
        assert got == [True], "the waiter recovers and gets the lock"
        stats = waiter_client.lock(name).statistics()
        assert [o.split(":")[0] for o in stats.holders] == [waiter_client.id]
    finally:
        holder_client.close()
        waiter_client.close()
