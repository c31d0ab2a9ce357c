"""After a Sentinel failover the client checks the new master's eviction policy again (its
script cache is empty: the reload marks the check due) and warns about a policy the old
master did not have."""

from __future__ import annotations

import warnings

import pytest
import redis

from redlease import RedleaseWarning

from .test_sentinel_url import _until_reachable, python_url

pytestmark = pytest.mark.sentinel


async def test_a_failover_to_an_evicting_replica_is_warned_about(side, sentinel_setup):
    master, replica, sentinels = sentinel_setup
    with redis.Redis(host=replica.host, port=replica.port) as raw:
        raw.config_set("maxmemory", "100mb")
        raw.config_set("maxmemory-policy", "volatile-lfu")
    client = side.client(python_url(sentinels))
    name = f"eviction:failover:{side.kind}"
    lock = client.lock(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RedleaseWarning)  # the first master: noeviction
        assert await side(lock.acquire(blocking=False, lease=60))
        await side(lock.release())
    master.kill()  # the sentinels promote the replica
    with pytest.warns(RedleaseWarning, match="volatile-lfu"):
        assert await _until_reachable(side, lambda: lock.acquire(blocking=False, lease=60))
        await side(lock.release())
        await side(lock.acquire(blocking=False, lease=60))  # the check ran with the reload
    (policy,) = await side(client.eviction_policies())
    assert (policy.policy, policy.evictable) == ("volatile-lfu", True)
