"""Who holds a lock: host, pid, process and description of each holder, from the record its
client writes once (not per acquire), shown by ``statistics()``; another process's too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest
import redis

from redlease import HolderInfo
from redlease.peers import RedissonLock


async def test_statistics_show_who_holds(side, server, name):
    client = side.client(server.url, holder_info="billing --password=hunter2 nightly")
    lock = client.lock(name)
    assert await side(lock.acquire(blocking=False))
    stats = await side(client.lock(name).statistics())
    ((owner, info),) = stats.holder_info.items()
    assert owner in stats.holders
    assert info.host == socket.gethostname()
    assert info.pid == os.getpid()
    assert info.process
    assert info.info == "billing --password=*** nightly"  # the password never stored
    raw = redis.Redis.from_url(server.url)
    record = raw.get(f"redlease:client:{{{client.id}}}")
    assert record is not None and b"hunter2" not in record
    assert 0 < raw.ttl(f"redlease:client:{{{client.id}}}") <= 5400
    raw.close()
    await side(lock.release())
    assert (await side(lock.statistics())).holder_info == {}


async def test_the_record_is_written_once_not_per_acquire(side, private_server, name):
    """Keyspace notifications of the record key over 20 acquire/release cycles: one SET."""
    raw = redis.Redis.from_url(private_server.url)
    raw.config_set("notify-keyspace-events", "K$")
    events = raw.pubsub()
    events.psubscribe("__keyspace@0__:redlease:client:*")
    events.subscribe("marker")
    client = side.client(private_server.url)
    for i in range(20):
        lock = client.lock(f"{name}:{i}")
        assert await side(lock.acquire(blocking=False))
        await side(lock.release())
    raw.publish("marker", "end")  # delivered after every event before it
    seen: list[bytes] = []
    for _ in range(1000):  # bounded: far more than the messages there are
        message = events.get_message(timeout=10)
        assert message is not None, seen
        if message["type"] == "message":
            break
        if message["type"] == "pmessage":
            seen.append(message["data"])
    assert seen == [b"set"]
    events.close()
    raw.close()


async def test_a_holder_without_a_record_is_shown_as_unknown(side, server, name):
    java = RedissonLock(server.url, name)  # Redisson writes no record
    assert java.try_lock(0)
    stats = await side(side.client(server.url).lock(name).statistics())
    assert list(stats.holder_info.values()) == [HolderInfo()]
    java.unlock()


async def test_a_user_who_may_not_write_the_record_is_not_hindered(side, private_server, name):
    raw = redis.Redis.from_url(private_server.url)
    raw.execute_command(
        "ACL", "SETUSER", "norecord", "on", ">pw", "~test:*", "~*{test:*", "&*", "+@all"
    )  # fmt: skip
    client = side.client(f"redis://norecord:pw@127.0.0.1:{private_server.port}")
    lock = client.lock(name)
    assert await side(lock.acquire(blocking=False))
    assert list((await side(lock.statistics())).holder_info.values()) == [HolderInfo()]
    await side(lock.release())
    raw.close()


def test_another_process_is_shown(server, name):
    """A holder in a process of its own: its pid and description, not the reader's."""
    code = textwrap.dedent(
        f"""
        import sys
        from redlease import Client
        client = Client.from_url({server.url!r}, holder_info="report job")
        assert client.lock({name!r}).acquire(lease=60)
        print("held", flush=True)
        sys.stdin.readline()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        from redlease import Client

        with Client.from_url(server.url) as reader:
            (info,) = reader.lock(name).statistics().holder_info.values()
        assert (info.pid, info.host, info.info) == (proc.pid, socket.gethostname(), "report job")
    finally:
        proc.communicate("\n", timeout=30)
    assert proc.returncode == 0


@pytest.mark.parametrize("bad", [3, b"bytes"])
def test_a_bad_holder_info_is_refused(server, bad):
    from redlease import ArgumentTypeError, Client

    with pytest.raises(ArgumentTypeError, match="holder_info"):
        Client.from_url(server.url, holder_info=bad)
