"""The scenarios of the chaos run (``tools/chaos.py``): what each sets up before its workers
start and the faults it injects while they run."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from chaos_run import Fault, Run
from chaos_worker import LOCK_NAME, READ_DONE, as_text

from redlease.testing import RedisServer, TcpProxy

HOLD_ACROSS = 0.2
"""Seconds a holder stays stopped across a restart or failover: far less than its lease."""


try:  # the optional parts of the API this checker exercises
    from redlease._core import scripts as _scripts

    ACQUIRE_SHA: bytes | None = _scripts.LOCK_ACQUIRE.sha.encode()
    RELEASE_SHA: bytes | None = _scripts.LOCK_RELEASE.sha.encode()
except (ImportError, AttributeError):  # pragma: no cover - layout changed
    ACQUIRE_SHA = RELEASE_SHA = None


def _schedule(run: Run) -> list[float]:
    """When to inject each repetition of the fault: spread over the run, after a warm-up."""
    s = run.s
    first = run.started_at + min(1.0, s.duration / 5)
    span = max(0.0, run.end_at - 3 * s.lease - first)
    step = span / max(1, s.repeats)
    return [first + i * step for i in range(s.repeats)]


def inject_nothing(run: Run) -> None:
    run.sleep_until(run.end_at)


def inject_pause(run: Run) -> None:
    for at in _schedule(run):
        run.sleep_until(at)
        index = run.trap()
        if index is None:
            run.notes.append("pause: no holder reached its write")
            continue
        t0 = time.monotonic()
        time.sleep(2 * run.s.lease)  # time must pass: longer than the lease
        run.resume(index)
        run.faults.append(Fault("pause", index, t0, time.monotonic()))


def inject_kill(run: Run) -> None:
    lease = run.s.lease
    for at in _schedule(run):
        run.sleep_until(at)
        index = run.trap()
        if index is None:
            run.notes.append("kill: no holder reached its write")
            continue
        client_id = run.client_id(index) or "?"
        t0 = time.monotonic()
        run.workers[index].kill()
        ttl_ms = run.probe.pttl(LOCK_NAME)
        run.workers[index].join(10)
        run.paused.discard(index)

        def dead_hold(prefix: str = client_id + ":") -> bool:
            return any(as_text(f).startswith(prefix) for f in run.probe.hkeys(LOCK_NAME))

        # how long the dead holder's hold stays on the server (it must go within its lease)
        held_for = math.nan
        deadline = t0 + 3 * lease
        while dead_hold() and time.monotonic() < deadline:
            time.sleep(0.002)
        if not dead_hold():
            held_for = time.monotonic() - t0
        note = f"ttl at kill {ttl_ms / 1000:.3f} s, dead hold gone after {held_for:.3f} s"
        run.faults.append(Fault("kill", index, t0, t0, note, counted=not math.isnan(held_for)))
        run.replace(index)


def inject_restart(run: Run) -> None:
    for at in _schedule(run):
        run.sleep_until(at)
        index = run.trap()  # a holder between its read and its write ...
        run.lock_server.kill()  # ... while the server dies and starts again, empty
        t0 = time.monotonic()
        run.lock_server.start()
        time.sleep(HOLD_ACROSS)  # and a moment longer, far less than its lease
        if index is not None:
            run.resume(index)
        run.faults.append(Fault("restart", index, t0, t0, destroys_state=True))


def inject_partition(run: Run) -> None:
    for at in _schedule(run):
        run.sleep_until(at)
        index = run.trap()
        if index is None:
            run.notes.append("partition: no holder reached its write")
            continue
        links = run.own_links[index]
        t0 = time.monotonic()
        for link in links:
            link.freeze()
        run.resume(index)  # it runs on, in a network that delivers nothing
        run.paused.add(index)  # (not a candidate for another fault meanwhile)
        time.sleep(2 * run.s.lease)  # time must pass: longer than the lease
        for link in links:
            link.thaw()
        run.paused.discard(index)
        run.faults.append(Fault("partition", index, t0, time.monotonic()))


def setup_failover(run: Run) -> None:
    run.link = TcpProxy(run.lock_server).start()
    run.replica = RedisServer(run.s.binary, replica_of=run.link).start()
    run.replica.wait_replica_synced(timeout=30)
    run.vip = TcpProxy(run.lock_server).start()


def inject_failover(run: Run) -> None:
    lease = run.s.lease
    for at in _schedule(run):
        run.sleep_until(at)
        assert run.link is not None and run.replica is not None and run.vip is not None
        if run.scenario.replicas:
            # a hold the replica confirmed: its holder is stopped mid-write, replication
            # stalls, the replica is promoted
            index = run.trap()
            stalled_at = time.monotonic()
            run.link.freeze()
        else:
            # replication stalls long enough for the replica's copy of every hold to expire;
            # then a hold is taken on the master alone, and the replica is promoted
            stalled_at = time.monotonic()
            run.link.freeze()
            time.sleep(lease + 0.1)  # time must pass: longer than the lease
            index = run.trap()
        old_master, new_master = run.lock_server, run.replica
        new_master.promote()
        t0 = time.monotonic()
        run.vip.retarget(new_master)
        run.vip.cut()
        cut_at = time.monotonic()
        old_master.kill()
        time.sleep(HOLD_ACROSS)  # the holder stays stopped a moment, far less than its lease
        if index is not None:
            run.resume(index)
        run.faults.append(
            Fault("failover", index, t0, cut_at, destroys_state=True, since=stalled_at)
        )
        run.faults[-1].note = replace_replica(run, old_master, new_master, t0)


def replace_replica(run: Run, old_master: RedisServer, new_master: RedisServer, t0: float) -> str:
    """After a failover: the promoted replica is the lock server, with a new replica of its
    own (replica-confirmed writes need one, the next failover too); says when it was in sync."""
    assert run.link is not None
    run.old_servers.append(old_master)
    run.old_proxies.append(run.link)
    run.lock_server = new_master
    run.probe.close()
    run.probe = redis.Redis.from_url(new_master.url, socket_timeout=2)
    run.link = TcpProxy(new_master).start()
    run.replica = RedisServer(run.s.binary, replica_of=run.link).start()
    with contextlib.suppress(TimeoutError):
        run.replica.wait_replica_synced(timeout=30)
    return f"new replica in sync {time.monotonic() - t0:.2f} s after"


STALLS = ((0.0, 0.03), (0.03, 0.4))
"""failover-rmw: how long replication stalls before the master dies, in leases: as often a
short stall (the replica misses the last hand-overs or so) as a longer one (a few dozen); never
so long that the replica's copy of the last holds and of the line has run out."""
SINCE_MARGIN = 0.01
"""failover-rmw: a hold is counted as taken on the master alone (lost at the failover) only if
it began this long after replication stalled: its copy may have passed the link just before."""


def inject_failover_rmw(run: Run) -> None:
    """Failovers to a replica that is behind, under contention, with fenced read-modify-writes.

    Drawn from the run's seed for each failover: when it comes; for how long replication
    stalls before the master dies (``STALLS``: the holds, hand-overs and tokens of that
    stretch exist on the old master alone, while the replica still has the holds and the line
    as they were, alive); whether a holder is caught between its fenced read and its write and
    kept stopped across the failover, and for how long after it (0.05 to 0.5 L), so that it
    writes late with its token. Then the old master is killed (SIGKILL), the replica promoted
    (``REPLICAOF NO ONE``), the clients' proxy moved to it and every connection cut."""
    assert run.vip is not None
    lease = run.s.lease
    rng = run.rng
    first = run.started_at + min(1.0, run.s.duration / 5)
    last = max(first, run.end_at - 3 * lease)
    plan = sorted(rng.uniform(first, last) for _ in range(run.s.repeats))
    draws = [
        (
            rng.uniform(*rng.choice(STALLS)) * lease,
            rng.random() < 2 / 3,
            rng.uniform(0.05, 0.5) * lease,
            rng.random() < 0.5,
        )
        for _ in plan
    ]  # drawn first: a seed gives the same plan whatever the timing of the run
    for at, (stall, catch, across, between) in zip(plan, draws, strict=True):
        run.sleep_until(at)
        if time.monotonic() > run.end_at - 2 * lease:
            run.notes.append("failover-rmw: no time left for the next failover")
            break
        assert run.link is not None and run.replica is not None
        run.link.freeze()  # from now on the replica misses every write
        stalled_at = time.monotonic()
        time.sleep(stall)  # the fault itself: writes on the master alone
        index = run.trap() if catch else None
        old_master, new_master = run.lock_server, run.replica
        old_master.kill()
        t0 = time.monotonic()
        new_master.promote()
        run.vip.retarget(new_master)
        run.vip.cut()
        cut_at = time.monotonic()
        where = f"stall {stall * 1000:.0f} ms"
        if index is not None and between:
            where += ", " + _write_between(run, index, time.monotonic() + across)
        elif index is not None:
            time.sleep(across)  # the fault itself: the holder stopped across the failover
            run.resume(index)
            where += f", worker {index} stopped mid-write until {across * 1000:.0f} ms after"
        fault = Fault(
            "failover",
            index,
            t0,
            cut_at,
            where,
            destroys_state=True,
            since=stalled_at + SINCE_MARGIN,
        )
        run.faults.append(fault)
        fault.note += "; " + replace_replica(run, old_master, new_master, t0)


def _write_between(run: Run, index: int, until: float) -> str:
    """Let the stopped holder ``index`` (token T, taken on the old master) write while a holder
    of the new master is between its fenced read and its write: the first one, before
    ``until``, whose token is not below T (a lower one was refused at its read). With a token
    above T, the late write is refused; with T itself (handed out twice), both writes are
    accepted and the second overwrites the first: a lost update. Says what happened."""
    mine = run.last_begin(index)
    token = int(mine["token"]) if mine else 0
    tries = 0
    while time.monotonic() < until and tries < 200:
        tries += 1
        other = run.trap(timeout=max(0.01, until - time.monotonic()))
        if other is None:
            break
        theirs = run.last_begin(other)
        if theirs is None or int(theirs["token"]) < token:
            run.resume(other)
            continue
        run.resume(index)  # its writes land now, between the other's read and write
        deadline = time.monotonic() + 2.0
        while run.holding[index] == READ_DONE and time.monotonic() < deadline:
            time.sleep(0.001)
        run.resume(other)
        same = "the same token" if int(theirs["token"]) == token else "a higher token"
        return (
            f"worker {index} stopped mid-write, then wrote while worker {other} ({same}) was "
            "between its read and its write"
        )
    run.resume(index)
    return f"worker {index} stopped mid-write, then wrote late (no holder with a token as high)"


def setup_reply_drop(run: Run) -> None:
    run.vip = TcpProxy(run.lock_server).start()


def inject_reply_drop(run: Run) -> None:
    assert run.vip is not None
    if ACQUIRE_SHA is None or RELEASE_SHA is None:
        run.notes.append("reply-drop: script SHAs not found; nothing dropped")
        run.sleep_until(run.end_at)
        return
    drops = 0
    i = 0
    stop = run.end_at - 2 * run.s.lease
    while time.monotonic() < stop and i < 10_000:
        match = RELEASE_SHA if i % 2 == 0 else ACQUIRE_SHA
        twice = i % 3 == 2  # the resend is lost too: the worker calls again
        events = [run.vip.drop_next_reply(match) for _ in range(2 if twice else 1)]
        for event in events:
            event.wait(max(0.0, min(2.0, stop - time.monotonic())))
        done = sum(e.is_set() for e in events)
        drops += done
        t = time.monotonic()
        what = "release" if match == RELEASE_SHA else "acquire"
        run.faults.append(Fault(f"drop {what}{' x2' if twice else ''}", None, t, t))
        i += 1
        time.sleep(0.05)
    # drops still armed would hit whatever comes next: cut them loose with the proxy's close
    run.notes.append(f"reply-drop: {drops} replies dropped ({run.vip.dropped} by the proxy)")


def setup_pubsub_delay(run: Run) -> None:
    run.pubsub = TcpProxy(run.lock_server).start()


def inject_pubsub_delay(run: Run) -> None:
    """Freeze the pub/sub proxy now and then for 0.5-1.5 L (0.05-0.3 L apart): a message
    published meanwhile reaches its waiter late, often after the waiter re-checked by itself
    (its wait is bounded by the holder's TTL), took the lock, released it or gave up."""
    assert run.pubsub is not None
    rng = random.Random(11)
    lease = run.s.lease
    stop = run.end_at - 2 * lease
    freezes = 0
    while time.monotonic() < stop and freezes < 10_000:
        time.sleep(rng.uniform(0.05, 0.3) * lease)
        t0 = time.monotonic()
        run.pubsub.freeze()
        time.sleep(rng.uniform(0.5, 1.5) * lease)
        run.pubsub.thaw()
        freezes += 1
        run.faults.append(Fault("delay pub/sub", None, t0, time.monotonic()))
    run.notes.append(f"pubsub-delay: pub/sub frozen {freezes} times")


def _bulk(value: str) -> bytes:
    """``value`` as a RESP bulk string, as it appears in a command on the wire."""
    return f"${len(value.encode())}\r\n{value}\r\n".encode()


def inject_reentry_drop(run: Run) -> None:
    """Drop the replies to the re-entrant acquire and to the inner release of a worker picked
    in turn: once (redlease sends again), twice (the call is sent again) or 40 times in a row
    (every reply within the call's timeout: the outcome stays unknown, the call raises, and
    the worker goes on with its outer hold)."""
    assert run.vip is not None
    owners = {i: run.hello(i, "owner") for i in run.workers}
    targets = [(i, o) for i, o in sorted(owners.items()) if o]
    lease_ms = str(max(1, math.ceil(run.s.lease * 1000)))
    if not targets:
        run.notes.append("reentry-drop: workers' owner fields not found; nothing dropped")
        run.sleep_until(run.end_at)
        return
    drops = 0
    i = 0
    stop = run.end_at - 2 * run.s.lease
    while time.monotonic() < stop and i < 10_000:
        worker, owner = targets[i % len(targets)]
        acquire = (i // len(targets)) % 2 == 0
        # the owner field and the hold count it believes: lease, owner, 1 in its re-entrant
        # acquire (lock_acquire.lua ARGV[1..3]); owner, 2 in its inner release
        # (lock_release.lua ARGV[1..2])
        if acquire:
            match = _bulk(lease_ms) + _bulk(owner) + _bulk("1")
        else:
            match = _bulk(owner) + _bulk("2")
        times = (1, 2, 40)[(i // (2 * len(targets))) % 3]
        events = [run.vip.drop_next_reply(match) for _ in range(times)]
        deadline = min(stop, time.monotonic() + 2.0)  # for the first: the worker must get there
        for n, event in enumerate(events):
            event.wait(max(0.0, deadline - time.monotonic()))
            if n == 0:  # the rest within the call's own timeout (unused ones stay armed)
                deadline = min(stop, time.monotonic() + 1.5 * run.s.lease)
        done = sum(e.is_set() for e in events)
        drops += done
        t = time.monotonic()
        what = "re-acquire" if acquire else "inner release"
        run.faults.append(Fault(f"drop {what} x{times}", worker, t, t, counted=done > 0))
        i += 1
        time.sleep(0.05)
    run.notes.append(f"reentry-drop: {drops} replies dropped ({run.vip.dropped} by the proxy)")


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    inject: Callable[[Run], None]
    setup: Callable[[Run], None] | None = None
    replicas: int = 0
    own_links: bool = False
    allows_overlap: bool = False
    """A pause, cut, data loss or failover: a lease lock cannot prevent overlap there."""
    repeats_quick: int = 1
    reentrant: bool = False
    """The workers re-enter every hold."""
    quick_duration: float = 0.0
    """Seconds it runs at least, even with ``--quick`` (a fault that needs many tries)."""
    seeded: bool = False
    """Run once per seed (``--seed``): its faults are drawn from ``Run.rng``."""


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("baseline", "no fault", inject_nothing),
        Scenario("pause", "holder SIGSTOPped for 2 L", inject_pause, allows_overlap=True),
        Scenario("kill", "holder SIGKILLed", inject_kill, repeats_quick=2),
        Scenario("restart", "server restarted, data lost", inject_restart, allows_overlap=True),
        Scenario(
            "partition",
            "holder's network frozen for 2 L",
            inject_partition,
            own_links=True,
            allows_overlap=True,
        ),
        Scenario(
            "failover",
            "replica promoted, replication stalled",
            inject_failover,
            setup=setup_failover,
            allows_overlap=True,
        ),
        Scenario(
            "failover-confirmed",
            "the same, replicas=1",
            inject_failover,
            setup=setup_failover,
            replicas=1,
            allows_overlap=True,
        ),
        Scenario(
            "failover-rmw",
            "fenced read-modify-writes, failovers to a replica behind",
            inject_failover_rmw,
            setup=setup_failover,
            allows_overlap=True,
            repeats_quick=2,
            quick_duration=8.0,
            seeded=True,
        ),
        Scenario(
            "reply-drop",
            "acquire/release replies lost",
            inject_reply_drop,
            setup=setup_reply_drop,
            repeats_quick=0,
        ),
        Scenario(
            "pubsub-delay",
            "pub/sub frozen 0.5-1.5 L now and then",
            inject_pubsub_delay,
            setup=setup_pubsub_delay,
            repeats_quick=0,
            quick_duration=12.0,
        ),
        Scenario(
            "reentry-drop",
            "re-entry replies lost",
            inject_reentry_drop,
            setup=setup_reply_drop,
            repeats_quick=0,
            reentrant=True,
        ),
    )
}
