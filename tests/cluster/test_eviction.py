"""A cluster client reads the eviction policy of every master at its first use, and warns
about the one that may evict lock keys (naming it)."""

from __future__ import annotations

import pytest
import redis

from redlease import RedleaseWarning


async def test_each_master_is_checked_and_the_evicting_one_named(side, cluster):
    evicting = cluster.master_of("eviction-check")
    raw = redis.Redis(host=evicting.host, port=evicting.port)
    raw.config_set("maxmemory", "100mb")
    raw.config_set("maxmemory-policy", "allkeys-lru")
    try:
        client = side.client(cluster.url, cluster=True)
        with pytest.warns(RedleaseWarning) as told:
            lock = client.lock(f"eviction-check:{side.kind}")
            assert await side(lock.acquire(blocking=False))
            await side(lock.release())
        assert len(told) == 1
        assert f":{evicting.port} " in str(told[0].message)
        assert "allkeys-lru" in str(told[0].message)
        policies = await side(client.eviction_policies())
        assert len(policies) == cluster.masters
        by_port = {int(p.address.rsplit(":", 1)[1]): p for p in policies}
        assert by_port[evicting.port].evictable is True
        assert [p.policy for port, p in by_port.items() if port != evicting.port] == [
            "noeviction"
        ] * (cluster.masters - 1)
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.config_set("maxmemory", "0")
        raw.close()
