"""A real Sentinel setup: a master, a replica and three sentinels, on free loopback ports."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
import redis
import redis.sentinel

from redlease.testing import RedisServer, find_server, free_port

pytestmark = pytest.mark.sentinel

MASTER_NAME = "mymaster"


class Sentinels:
    """Three ``--sentinel`` processes watching ``master``, stopped by their own PIDs."""

    def __init__(self, master: RedisServer, count: int = 3) -> None:
        self.master = master
        self.ports = [free_port() for _ in range(count)]
        self.dir = tempfile.TemporaryDirectory(prefix="redlease-sentinel-")
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> Sentinels:
        for port in self.ports:
            conf = os.path.join(self.dir.name, f"sentinel-{port}.conf")
            with open(conf, "w") as f:
                f.write(
                    f"port {port}\nbind 127.0.0.1\ndir {self.dir.name}\n"
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 2\n"
                    f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                    f"sentinel failover-timeout {MASTER_NAME} 5000\n"
                )
            self.procs.append(
                subprocess.Popen(
                    [self.master.binary.path, conf, "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if all(self._sees_replica(p) for p in self.ports):
                    return self
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError("sentinels did not come up in time")

    def _sees_replica(self, port: int) -> bool:
        with redis.Redis(host="127.0.0.1", port=port, decode_responses=True) as s:
            master = s.sentinel_master(MASTER_NAME)
            return (
                int(master.get("num-slaves", 0)) >= 1
                and int(master.get("num-other-sentinels", 0)) >= len(self.ports) - 1
            )

    def sentinel(self) -> redis.sentinel.Sentinel:
        return redis.sentinel.Sentinel([("127.0.0.1", p) for p in self.ports], socket_timeout=2)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.dir.cleanup()


@pytest.fixture
def sentinel_setup() -> Iterator[tuple[RedisServer, RedisServer, Sentinels]]:
    binary = find_server()
    with RedisServer(binary) as master:
        replica = RedisServer(binary, extra_args=("--replicaof", master.host, str(master.port)))
        with replica:
            sentinels = Sentinels(master)
            try:
                yield master, replica, sentinels.start()
            finally:
                sentinels.close()
