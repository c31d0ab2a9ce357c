"""Issue #23's lock defects, each on real servers (a replica, ``TcpProxy`` links that freeze,
drop replies and move to the promoted replica), sync and asyncio; each fails without its fix.

1. tokens: every token any path hands out (a hand-over too) is above the name's counter and
   not below the server clock, so a failover to a replica that missed the last grants never
   hands a token out again; a release or renewal acts only on the hold with its owner's token;
2. the retry rule: a first acquire takes an existing hold of its owner only if that hold was
   made for this very call (same wait id); any other is re-leased to this call;
3. request ids are unique across processes: another process's receipt never answers a release
   of a hold that is gone;
4. receipts survive a free-lock acquire by another owner, and the next 15 final releases
   (the receipts key is appended to, and cut back to the newest when it grows too long).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redlease import Client
from redlease._core import scripts
from redlease.errors import LeaseLostError, ServerUnavailableError
from redlease.testing import RedisServer, ServerBinary, TcpProxy

from .helpers import eventually, reply_bytes, reply_int

pytestmark = pytest.mark.timeout(180)


def receipts_key(name: str) -> str:
    return f"redlease:released:{{{name}}}:"


class Failover:
    """A master, a replica fed through a link that can freeze (so it falls behind), and the
    clients' link, which moves to the replica when it is promoted."""

    def __init__(self, binary: ServerBinary) -> None:
        self.master = RedisServer(binary).start()
        self.replication = TcpProxy((self.master.host, self.master.port)).start()
        self.replica = RedisServer(binary, replica_of=self.replication).start()
        self.link = TcpProxy((self.master.host, self.master.port)).start()

    def replica_falls_behind(self) -> None:
        """From now on the replica misses every write of the master."""
        self.replica.wait_replica_synced()
        self.replication.freeze()

    def fail_over(self) -> None:
        self.replica.promote()
        self.link.retarget((self.replica.host, self.replica.port))
        self.link.cut()

    def close(self) -> None:
        for proxy in (self.link, self.replication):
            proxy.close()
        for server in (self.replica, self.master):
            server.close()


@pytest.fixture
def failover(binary: ServerBinary) -> Iterator[Failover]:
    setup = Failover(binary)
    try:
        yield setup
    finally:
        setup.close()


def wait_in_line(client: Client, name: str, lease: float, out: dict[str, int]) -> threading.Thread:
    """A bystander (sync, in a thread of its own) that waits for the lock, records its token
    and releases it."""

    def run() -> None:
        lock = client.lock(name)
        if lock.acquire(timeout=20, lease=lease):
            out["token"] = lock.fencing_token or 0
            lock.release()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_a_handover_after_a_failover_hands_out_a_fresh_token(side, failover, name):
    """Defect 1: A's release runs on the master and hands the lock to D (token T1), its reply
    is lost; the replica missed it and is promoted; A's release, sent again, runs there on A's
    hold (token T) and hands the lock to E. E's token must be above T1, not T + 1 = T1."""
    raw = redis.Redis.from_url(failover.master.url)
    a = side.client(failover.link.url, socket_timeout=1, socket_connect_timeout=1)
    d_client = Client.from_url(failover.master.url)  # (only A's link drops replies)
    e_client = Client.from_url(failover.replica.url)
    try:
        lock = a.lock(name)
        assert await side(lock.acquire(lease=30))
        await side(lock.release())  # the scripts are loaded on both servers (replicated)
        assert await side(lock.acquire(lease=30))
        token = lock.fencing_token
        failover.replica_falls_behind()
        d: dict[str, int] = {}
        d_thread = wait_in_line(d_client, name, 30, d)
        await eventually(lambda: raw.zcard(f"redlease:line:{{{name}}}") == 1)
        sha = scripts.LOCK_RELEASE.sha.encode()
        failover.link.drop_next_reply(sha)
        failover.link.drop_next_reply(sha)
        with pytest.raises(ServerUnavailableError):
            await side(lock.release())  # ran on the master: D is handed the lock
        d_thread.join(20)
        assert d["token"] > token
        failover.fail_over()
        e: dict[str, int] = {}
        e_thread = wait_in_line(e_client, name, 30, e)
        replica = redis.Redis.from_url(failover.replica.url)
        await eventually(lambda: replica.zcard(f"redlease:line:{{{name}}}") == 1, timeout=20)
        await side(lock.release())  # sent again: on the promoted replica it still holds T
        e_thread.join(20)
        assert e["token"] > d["token"], (token, d, e)
        assert int(replica.get(f"redisson_lock_token:{{{name}}}") or 0) >= e["token"]
    finally:
        d_client.close()
        e_client.close()


async def test_release_and_renewal_leave_a_stale_copy_of_the_owners_hold(side, failover, name):
    """Defect 1, second half: A holds (token T), the replica falls behind, A releases and takes
    the lock again (token T2) on the master; after the failover the replica still has A's
    first hold (T). A's release must not free it, nor its watchdog renew it: A is told its
    lease is lost."""
    lost: list[LeaseLostError] = []
    a = side.client(failover.link.url, socket_timeout=1, socket_connect_timeout=1)
    lock = a.lock(name, on_lease_lost=lost.append)
    assert await side(lock.acquire())
    first = lock.fencing_token
    failover.replica_falls_behind()
    await side(lock.release())
    assert await side(lock.acquire())
    assert lock.fencing_token != first
    failover.fail_over()
    replica = redis.Redis.from_url(failover.replica.url)
    before = replica.pttl(name)
    with pytest.raises(LeaseLostError):
        await side(lock.release())
    stale = replica.hgetall(name)
    assert int(stale[b"redlease:fence"]) == first  # the stale hold is left to its lease
    assert replica.pttl(name) <= before


async def test_the_watchdog_does_not_renew_a_hold_with_another_token(side, server, name):
    """Defect 1: the watchdog renews only the hold with its owner's token (a stale copy of
    the owner field with another token is not the owner's hold): the owner hears it lost."""
    raw = redis.Redis.from_url(server.url)
    lost: list[LeaseLostError] = []
    client = side.client(server.url, watchdog_timeout=1.5)
    lock = client.lock(name, on_lease_lost=lost.append)
    assert await side(lock.acquire())
    raw.hset(name, "redlease:fence", lock.fencing_token - 1)  # another hold's token
    await eventually(lambda: lost, timeout=10)
    assert lock.lease_lost


@pytest.mark.two_servers
async def test_a_first_acquire_is_not_granted_a_hold_made_for_another_call(side, server, name):
    """Defect 2 (no data loss): a wait that gave up during an outage leaves the hold a release
    handed to it; the owner's next acquire with a 60 s lease must get 60 s on the server and
    a fresh token, not the old call's hold with a few seconds left."""
    raw = redis.Redis.from_url(server.url)
    proxy = TcpProxy((server.host, server.port)).start()
    holder_client = Client.from_url(server.url)
    other = Client.from_url(server.url)
    try:
        owner = side.client(proxy.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        held = holder_client.lock(name)
        got, go = threading.Event(), threading.Event()
        handed: dict[str, int] = {}

        def holder() -> None:  # holds until told, then hands the lock to the owner's call
            assert held.acquire()
            handed["token"] = held.fencing_token or 0
            got.set()
            go.wait(20)
            held.release()

        holding = threading.Thread(target=holder, daemon=True)
        holding.start()
        assert got.wait(10)
        lock = owner.lock(name)

        def fault() -> None:
            deadline = time.monotonic() + 10
            # the owner's call is in line and its client listens for its turn
            while time.monotonic() < deadline and not (
                held.statistics().waiters >= 1
                and raw.pubsub_channels(f"redlease:handover:{{{name}}}:*")
            ):
                time.sleep(0.01)
            proxy.freeze()  # the owner's link goes silent
            go.set()
            holding.join(20)

        thread = threading.Thread(target=fault, daemon=True)
        thread.start()
        with pytest.raises(ServerUnavailableError):
            await side(lock.acquire(timeout=3.0, lease=6.0))
        thread.join(20)
        assert raw.hexists(name, lock_owner_field(raw, name))  # the old call's hold
        old_ttl = raw.pttl(name)
        assert 0 < old_ttl <= 6000
        proxy.cut()
        proxy.thaw()
        assert await side(lock.acquire(blocking=False, lease=60.0))
        assert raw.pttl(name) > 50_000  # this call's lease, not the old call's
        assert lock.fencing_token > handed["token"]
        assert reply_int(raw.hget(name, "redlease:fence")) == lock.fencing_token
        time.sleep(old_ttl / 1000 + 0.3)  # past where the old call's hold would have ended
        assert not other.lock(name).acquire(blocking=False)
        await side(lock.release())
    finally:
        holder_client.close()
        other.close()
        proxy.close()


def lock_owner_field(raw: redis.Redis, name: str) -> bytes:
    fields = [f for f in map(reply_bytes, raw.hkeys(name)) if not f.startswith(b"redlease:")]
    assert len(fields) == 1, fields
    return fields[0]


async def test_a_first_acquire_after_a_failover_gets_a_fresh_token(side, failover, name):
    """Defect 2 after a failover: the promoted replica still has the owner's released hold;
    the owner's next acquire must not be granted it with its used token."""
    a = side.client(failover.link.url, socket_timeout=1, socket_connect_timeout=1)
    b = Client.from_url(failover.link.url, socket_timeout=1)
    try:
        lock = a.lock(name)
        assert await side(lock.acquire(lease=20))
        first = lock.fencing_token
        failover.replica_falls_behind()
        await side(lock.release())
        other = b.lock(name)
        assert other.acquire(lease=20)
        used = other.fencing_token
        failover.fail_over()
        assert await side(lock.acquire(blocking=False, lease=5))
        assert lock.fencing_token not in (first, used)
        assert lock.fencing_token > used
        replica = redis.Redis.from_url(failover.replica.url)
        assert 4000 < replica.pttl(name) <= 5000
    finally:
        b.close()


CYCLES = r"""
import sys
from redlease import Client
client = Client.from_url(sys.argv[1])
lock = client.lock(sys.argv[2])
for _ in range(int(sys.argv[3])):
    assert lock.acquire(timeout=10)
    lock.release()
client.close()
"""

HOLDER = r"""
import asyncio, sys
from redlease import AsyncClient, Client
from redlease.errors import LeaseLostError
url, name, kind = sys.argv[1:4]
lost = []

async def main():
    client = (AsyncClient if kind == "async" else Client).from_url(url)
    lock = client.lock(name, on_lease_lost=lost.append)
    async def run(value):
        return (await value) if kind == "async" else value
    assert await run(lock.acquire())
    print("holds", flush=True)
    sys.stdin.readline()  # meanwhile: force-released, another process's cycles
    try:
        await run(lock.release())
        print("released", lock.lease_lost, len(lost), flush=True)
    except LeaseLostError:
        print("LeaseLostError", flush=True)
    await run(client.close())

asyncio.run(main())
"""


def other_process(url: str, name: str, cycles: int) -> None:
    """Another worker process takes and frees the lock ``cycles`` times."""
    subprocess.run([sys.executable, "-c", CYCLES, url, name, str(cycles)], check=True, timeout=60)


@pytest.mark.parametrize("cycles", [1, 2])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_another_process_receipt_never_answers_a_lost_release(server, name, kind, cycles):
    """Defect 3: a holder (a fresh worker process, as every worker starts) whose hold was
    force-released, while another fresh worker took and freed the lock, must hear
    ``LeaseLostError`` from its release: ids minted in two processes never match."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, server.url, name, kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "holds"
        admin = Client.from_url(server.url)
        assert admin.lock(name).force_release()
        admin.close()
        other_process(server.url, name, cycles)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "LeaseLostError"
    finally:
        holder.kill()
        holder.wait(10)


async def release_with_replies_lost(side: Any, proxy: TcpProxy, lock: Any) -> None:
    """A release that runs on the server while the replies to it and to its retry are lost:
    the caller is told ``ServerUnavailableError``, and the lock is freed (or handed over)."""
    sha = scripts.LOCK_RELEASE.sha.encode()
    proxy.drop_next_reply(sha)
    proxy.drop_next_reply(sha)
    with pytest.raises(ServerUnavailableError):
        await side(lock.release())


async def test_a_receipt_survives_a_free_lock_cycle_of_another_owner(side, server, name):
    """Defect 4: a release that ran, its replies lost, is recognised when sent again after
    another owner took the free lock and released it."""
    proxy = TcpProxy((server.host, server.port)).start()
    other = Client.from_url(server.url)
    try:
        client = side.client(proxy.url, socket_timeout=1, socket_connect_timeout=1)
        lock = client.lock(name)
        assert await side(lock.acquire())
        await side(lock.release())  # the scripts are loaded
        assert await side(lock.acquire())
        await release_with_replies_lost(side, proxy, lock)
        for _ in range(3):  # free-lock cycles of another owner, within the window
            third = other.lock(name)
            assert third.acquire(blocking=False)
            third.release()
        await side(lock.release())  # recognised: no LeaseLostError
        assert not lock.lease_lost
    finally:
        other.close()
        proxy.close()


RECEIPT_BYTES = 16 * 34
"""What the receipts key keeps when it is cut back (``lock_release.lua``): the last 16 ids at
least; it is cut back when it grows past twice that."""


async def test_a_receipt_outlives_the_next_fifteen_final_releases(side, server, name):
    """A release that ran (its replies lost) is recognised after 15 more final releases of
    another owner, although the receipts key was cut back on the way: the key is full (older
    ids, 1,072 bytes), so the lost release's own append passes twice ``RECEIPT_BYTES`` and the
    key is cut back to the newest ids, which keep it. The key stays bounded throughout, and
    the older ids go."""
    raw = redis.Redis.from_url(server.url)
    key = receipts_key(name)
    proxy = TcpProxy((server.host, server.port)).start()
    other = Client.from_url(server.url)
    try:
        client = side.client(proxy.url, socket_timeout=1, socket_connect_timeout=1)
        lock = client.lock(name)
        assert await side(lock.acquire())
        await side(lock.release())  # the scripts are loaded
        older = [f"older-{i:022d}" for i in range(37)]  # 37 ids of 28 bytes, 1,072 in all
        raw.set(key, " ".join(older), px=30_000)
        assert 2 * RECEIPT_BYTES - 34 < raw.strlen(key) <= 2 * RECEIPT_BYTES
        assert await side(lock.acquire())
        await release_with_replies_lost(side, proxy, lock)
        assert raw.strlen(key) <= RECEIPT_BYTES  # it ran, and cut the key back
        for _ in range(15):  # final releases of another owner, within the window
            third = other.lock(name)
            assert third.acquire(blocking=False)
            third.release()
            assert raw.strlen(key) <= 2 * RECEIPT_BYTES
            assert 0 < raw.pttl(key) <= 30_000
        await side(lock.release())  # recognised: no LeaseLostError
        assert not lock.lease_lost
        kept = reply_bytes(raw.get(key)).decode().split()
        assert len(kept) >= 16
        assert older[0] not in kept  # the oldest went when the key was cut back
    finally:
        other.close()
        proxy.close()


@pytest.mark.parametrize("then", ["released", "force-released"])
async def test_a_receipt_carried_by_a_hand_over_survives_its_next_holder(side, server, name, then):
    """Defect 4, hand-over path: a release that ran (its replies lost) handed the lock to a
    waiter, which carries the receipt; that holder releases (or an operator force-releases it),
    another owner takes and frees the lock: the release sent again is still recognised."""
    raw = redis.Redis.from_url(server.url)
    proxy = TcpProxy((server.host, server.port)).start()
    waiter_client = Client.from_url(server.url)
    other = Client.from_url(server.url)
    try:
        client = side.client(proxy.url, socket_timeout=1, socket_connect_timeout=1)
        lock = client.lock(name)
        assert await side(lock.acquire())
        await side(lock.release())  # the scripts are loaded
        assert await side(lock.acquire())
        handed, go = threading.Event(), threading.Event()

        def waiter() -> None:
            held = waiter_client.lock(name)
            assert held.acquire(timeout=20)
            handed.set()
            go.wait(20)
            if then == "released":
                held.release()

        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        await eventually(lambda: raw.zcard(f"redlease:line:{{{name}}}") == 1)
        await release_with_replies_lost(side, proxy, lock)  # ran: the lock was handed to the waiter
        assert handed.wait(20)
        if then == "force-released":
            assert other.lock(name).force_release()
        go.set()
        thread.join(20)
        third = other.lock(name)
        assert third.acquire(blocking=False)
        third.release()
        await side(lock.release())  # recognised: no LeaseLostError
        assert not lock.lease_lost
    finally:
        waiter_client.close()
        other.close()
        proxy.close()


async def test_a_receipt_carried_to_a_waiter_that_gives_up_survives(side, server, name):
    """Defect 4, found by the model: a release (its replies lost) hands the lock to a waiter
    whose acquire then gives up; its leave gives the hold back. The receipt the hold carried
    must survive, or the release sent again is told ``LeaseLostError``."""
    from redlease._core.keys import LockKeys
    from redlease._core.lock import leave_call

    keys = LockKeys.for_name(name)
    raw = redis.Redis.from_url(server.url)
    proxy = TcpProxy((server.host, server.port)).start()
    try:
        client = side.client(proxy.url, socket_timeout=1, socket_connect_timeout=1)
        lock = client.lock(name)
        assert await side(lock.acquire())
        await side(lock.release())  # the scripts are loaded
        assert await side(lock.acquire())
        raw.zadd(keys.line, {"gone-waiter:1 wait-1 w30000": 1})  # a waiter in line
        await release_with_replies_lost(side, proxy, lock)  # ran: handed to the waiter
        assert raw.hget(name, "gone-waiter:1") == b"1"
        leave = leave_call(keys, "gone-waiter:1", "wait-1", "w30000")  # its call gives up
        script = leave.script
        raw.script_load(script.source)
        assert raw.evalsha(script.sha, len(leave.keys), *leave.keys, *leave.args) == 1
        assert not raw.exists(name)
        await side(lock.release())  # recognised: no LeaseLostError
    finally:
        proxy.close()


def test_request_ids_differ_between_processes() -> None:
    """Ids are minted with a random prefix per process, drawn again in a forked child."""
    from redlease._shared.state import next_request_id

    code = "from redlease._shared.state import next_request_id as n; print(n(), n())"
    theirs = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    mine = [next_request_id(), next_request_id()]
    assert len(set(mine + theirs)) == 4
