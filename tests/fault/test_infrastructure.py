"""The fault-injection tools themselves: ``TcpProxy`` and replication in ``redlease.testing``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest
import redis

from redlease.testing import RedisServer, TcpProxy, run_command

from .helpers import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


def test_proxy_forwards_and_closes(lock_server):
    with TcpProxy(lock_server) as proxy:
        r = redis.Redis.from_url(proxy.url, socket_timeout=5)
        assert r.ping()
        for i in range(100):
            r.set("k", i)
        assert run_command(lock_server, "GET", "k") == b"99"
        assert proxy.connections == 1
        r.close()
        wait_until(lambda: proxy.connections == 0)
        thread = proxy._thread
    assert thread is not None and not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection((proxy.host, proxy.port), timeout=1).close()


def test_freeze_holds_traffic_back_and_thaw_delivers_it_late(lock_server):
    with TcpProxy(lock_server) as proxy:
        r = redis.Redis.from_url(proxy.url, socket_timeout=0.3)
        assert r.ping()
        proxy.freeze()
        with pytest.raises(redis.exceptions.TimeoutError):
            r.ping()
        # a command sent by a client that gave up still reaches the server once the
        # network heals, as TCP would deliver it
        with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
            sock.sendall(b"INCR late\r\n")
        assert run_command(lock_server, "GET", "late") is None
        proxy.thaw()
        wait_until(lambda: run_command(lock_server, "GET", "late") == b"1")
        assert r.ping()  # the pool reconnects


def test_cut_closes_every_connection(lock_server):
    with TcpProxy(lock_server) as proxy:
        clients = [redis.Redis.from_url(proxy.url, socket_timeout=5) for _ in range(3)]
        for c in clients:
            assert c.ping()
        assert proxy.cut() == 3
        assert proxy.connections == 0
        with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(16) == b"+PONG\r\n"
        for c in clients:
            assert c.ping()  # a fresh connection each
            c.close()


def test_drop_next_reply_runs_the_command_and_loses_its_reply(lock_server):
    with TcpProxy(lock_server) as proxy:
        with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(16) == b"+PONG\r\n"
            dropped = proxy.drop_next_reply(b"INCR")
            sock.sendall(b"INCR counter\r\n")
            assert sock.recv(16) == b""  # closed, no reply
        assert dropped.wait(5)
        assert proxy.dropped == 1
        assert run_command(lock_server, "GET", "counter") == b"1"  # the server ran it
        # a match only takes the command it names
        r = redis.Redis.from_url(proxy.url, socket_timeout=5)
        dropped = proxy.drop_next_reply(b"DECR")
        assert r.incr("counter") == 2
        assert not dropped.is_set()
        with pytest.raises(redis.exceptions.ConnectionError):
            r.decr("counter")  # from_url clients do not retry by default
        assert dropped.is_set()
        assert run_command(lock_server, "GET", "counter") == b"1"


def test_drop_next_reply_then_freeze_hangs_the_resend_at_once(lock_server):
    """With ``then_freeze`` the proxy is frozen before the client sees its connection close:
    a retry on a new connection, sent the moment the first one fails, never gets through."""
    with TcpProxy(lock_server) as proxy:
        r = redis.Redis.from_url(proxy.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        assert r.ping()
        dropped = proxy.drop_next_reply(b"INCR", then_freeze=True)
        with pytest.raises(redis.exceptions.ConnectionError):
            r.incr("frozen")
        assert dropped.is_set()
        with pytest.raises((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
            r.incr("frozen")  # at once, on a new connection: it hangs
        assert run_command(lock_server, "GET", "frozen") == b"1"  # only the first one ran
        proxy.thaw()
        proxy.cut()
        assert r.incr("frozen") == 2
        r.close()


def test_retarget_moves_new_connections(fault_binary, lock_server):
    with RedisServer(fault_binary) as other, TcpProxy(lock_server) as proxy:
        run_command(other, "SET", "where", "other")
        r = redis.Redis.from_url(proxy.url, socket_timeout=5)
        assert r.get("where") is None
        proxy.retarget(other)
        assert r.get("where") is None  # the old connection stays where it was
        proxy.cut()
        assert r.get("where") == b"other"
        r.close()


def test_replica_syncs_and_promotion_keeps_what_was_replicated(fault_binary, lock_server):
    with (
        TcpProxy(lock_server) as link,
        RedisServer(fault_binary, replica_of=link) as replica,
    ):
        run_command(lock_server, "SET", "before", "1")
        replica.wait_replica_synced(timeout=20)
        lock_server.wait_replica_synced(timeout=5)
        assert replica.command("GET", "before") == b"1"
        link.freeze()  # replication stalls: what the master writes now stays there
        run_command(lock_server, "SET", "after", "1")
        with pytest.raises(TimeoutError):
            replica.wait_replica_synced(timeout=0.5)
        replica.promote()
        assert replica.replica_of is None
        assert replica.info()["role"] == "master"
        assert replica.command("GET", "before") == b"1"
        assert replica.command("GET", "after") is None
        assert replica.command("SET", "new", "1") == "OK"


def test_proxy_threads_are_bounded():
    before = threading.active_count()
    with RedisServer() as srv:
        proxies = [TcpProxy(srv).start() for _ in range(5)]
        clients = [redis.Redis.from_url(p.url, socket_timeout=5) for p in proxies for _ in range(4)]
        for c in clients:
            assert c.ping()
        assert threading.active_count() == before + 5  # one thread per proxy, however many links
        for c in clients:
            c.close()
        for p in proxies:
            p.close()
    assert threading.active_count() == before


def test_a_server_left_running_stops_when_its_python_exits():
    """A script that forgets ``stop()`` (the tutorial's first steps pasted into a file) leaves
    no server behind; a forked child that exits does not stop its parent's server."""
    script = (
        "import os, sys\n"
        "from redlease.testing import RedisServer\n"
        "server = RedisServer().start()\n"
        "paused = RedisServer().start()\n"
        "paused.pause()\n"
        "if os.fork() == 0:\n"
        "    sys.exit(0)  # runs the child's exit handlers\n"
        "os.wait()\n"
        "server.command('PING')  # the parent's server outlived the child\n"
        "print(server.pid, paused.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2
    for pid in pids:  # gone (not a zombie: its parent waited for it)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
