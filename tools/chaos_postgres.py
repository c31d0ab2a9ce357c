"""redlease under faults with the data in PostgreSQL: the ``postgres-rmw`` scenario of the chaos
run (``tools/chaos.py``, whose servers, proxies, traps and failovers it uses).

    python tools/chaos_postgres.py                          # seeds 1 2 3, 45 s a run
    python tools/chaos_postgres.py --quick --seed 1         # one seed, 10 s a run
    python tools/chaos_postgres.py --server valkey --seed 1 --seed 2 --markdown

Worker processes (``--workers``) contend for one lock (watchdog lease L) on a lock server with a
replica, behind a proxy; each hold increments a counter row of a private PostgreSQL
(``redlease.testing.PostgresServer``) by a read-modify-write in one transaction:

    fenced     claim (``fenced_update`` with no values), read, write ``value + 1``
               (``fenced_update`` with the hold's fencing token): the recipe of
               docs/fencing-database.md
    unfenced   read, write ``value + 1`` with a plain ``UPDATE``

Each seed runs twice, fenced and unfenced, with the same faults drawn from the seed:

pause       a holder stops itself (SIGSTOP) when the parent asks, alternately between its read
            and its write (inside the transaction) and just after ``acquire`` (before its
            claim/read), and stays stopped 2-4 L (the first 4 L), past its lease, and until
            another holder went past it (wrote the row; took the lock, when the stopped one
            keeps the row locked by its claim); then it is resumed (SIGCONT) and finishes its
            transaction with its old token; the second pause (before the claim) and half of
            those after it have a failover of the lock server in the middle
failover    replication stalls (0-0.4 L: the replica misses the last hand-overs), the lock
            server is killed (SIGKILL), the replica promoted, the clients' proxy moved to it and
            every connection cut (as ``failover-rmw`` does); a new replica is started

Counted from the database itself, not from the workers: every write also adds 1 to the row's
``writes`` column (``writes + 1``, computed by the server, never lost), so lost updates are
``writes - value`` at the end; a trigger logs every accepted ``UPDATE`` of the row in row order
with the token it carried (the unfenced write sets ``fence`` to its token as a record, without
a check), so a stale write accepted is an ``UPDATE`` (a claim or a write) whose token is below
one the row had already been written with. Goals: with fencing, 0 lost updates and 0 stale
writes accepted in every run; without fencing, the loss shows (lost updates over the seeds
above 0). The exit status is 0 only when every goal passes.

Every loop is bounded in count and time; the servers (PostgreSQL included) and the workers are
this script's own, stopped by their PIDs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the chaos run's modules, beside
import chaos_report
from chaos_report import print_table
from chaos_run import Run, Settings, choose_server
from chaos_scenarios import Scenario, inject_nothing, replace_replica, setup_failover
from chaos_worker import (
    ARMED,
    HOLDING,
    LOCK_NAME,
    READ_DONE,
    READY_TIMEOUT,
    STOPPED,
    careful_release,
)

import redlease
from redlease.contrib.sqlalchemy import fence_column, fenced_update
from redlease.testing import PostgresServer

BEFORE_CLAIM, MID_TRANSACTION = 1, 2
"""Where a paused holder stops: just after ``acquire``; between its read and its write."""
PAUSE = (2.0, 4.0)
"""How long a paused holder stays stopped, in leases: past its lease (the first, the longest)."""
MOVED_ON = 10.0
"""A paused holder stays stopped, past its drawn time, until another holder went past it (at
most this many leases)."""
STALL = (0.0, 0.4)
"""How long replication stalls before the lock server dies, in leases."""
SQL_OPTIONS = "-c lock_timeout=30s -c statement_timeout=60s"
"""A blocked claim waits for a stopped holder's transaction (at most a pause and a failover),
never forever."""

metadata = sa.MetaData()
COUNTER = sa.Table(
    "chaos_counter",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
    sa.Column("writes", sa.BigInteger, nullable=False),
    fence_column(),
)
SCHEMA = [
    "DROP TABLE IF EXISTS chaos_counter, chaos_audit",
    "CREATE TABLE chaos_counter (id integer PRIMARY KEY, value bigint NOT NULL, "
    "writes bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)",
    "CREATE TABLE chaos_audit (seq bigserial PRIMARY KEY, old_writes bigint, new_writes bigint, "
    "old_fence bigint, new_fence bigint)",
    "CREATE OR REPLACE FUNCTION chaos_audit_row() RETURNS trigger AS $$ BEGIN "
    "INSERT INTO chaos_audit (old_writes, new_writes, old_fence, new_fence) "
    "VALUES (OLD.writes, NEW.writes, OLD.fence, NEW.fence); RETURN NEW; END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER chaos_audit_row AFTER UPDATE ON chaos_counter "
    "FOR EACH ROW EXECUTE FUNCTION chaos_audit_row()",
    "INSERT INTO chaos_counter (id, value, writes, fence) VALUES (1, 0, 0, 0)",
]
"""The counter row and its audit: the trigger runs under the row's lock, held to the commit,
so ``seq`` orders the committed updates as the row saw them."""


# --- the worker process ----------------------------------------------------------------------


@dataclass(frozen=True)
class PgWorkerConfig:
    index: int
    lock_url: str
    db_url: str
    fenced: bool
    lease: float
    cs: float
    socket_timeout: float
    log_path: str
    verbose: bool = False


def pg_worker(
    cfg: PgWorkerConfig,
    holding: Any,
    trapped: Any,
    point: Any,
    ready: Any,
    go: Any,
    end_at: Any,
) -> None:
    """One process: acquire -> increment the counter row in one transaction -> release, until
    ``end_at``; stops itself at the trap point the parent asked for (``point``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if not cfg.verbose:
        logging.getLogger("redlease").addHandler(logging.NullHandler())
    log = open(cfg.log_path, "a", buffering=1)  # noqa: SIM115 - kept for the life of the process

    def emit(record: dict[str, Any]) -> None:
        log.write(json.dumps(record) + "\n")

    def trap(where: int) -> None:
        with trapped.get_lock():
            stop = trapped[cfg.index] == ARMED and point.value == where
            if stop:
                trapped[cfg.index] = STOPPED
        if stop:
            os.kill(os.getpid(), signal.SIGSTOP)

    client = redlease.Client.from_url(
        cfg.lock_url,
        watchdog_timeout=cfg.lease,
        socket_timeout=cfg.socket_timeout,
        socket_connect_timeout=cfg.socket_timeout,
    )
    engine = sa.create_engine(cfg.db_url, poolclass=NullPool, connect_args={"options": SQL_OPTIONS})
    conn = engine.connect()
    told = threading.Event()
    lock = client.lock(LOCK_NAME, on_lease_lost=lambda _e: told.set())
    row = COUNTER.c.id == 1
    emit({"k": "hello", "w": cfg.index, "client": client.id, "pid": os.getpid()})
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
            emit({"k": "fail", "w": cfg.index, "at": clock(), "why": type(exc).__name__})
            time.sleep(0.02)
            continue
        if not ok:
            continue
        token = lock.fencing_token or 0
        hold: dict[str, Any] = {"k": "hold", "w": cfg.index, "n": n, "token": token}
        hold.update(asked=asked, start=clock())
        n += 1
        holding[cfg.index] = HOLDING
        trap(BEFORE_CLAIM)
        try:
            with conn.begin():
                if cfg.fenced:
                    fenced_update(conn, COUNTER, row, token=token)  # claim the row
                value = conn.scalar(sa.select(COUNTER.c.value).where(row))
                holding[cfg.index] = READ_DONE
                trap(MID_TRANSACTION)
                time.sleep(cfg.cs)
                assert value is not None
                values = {"value": value + 1, "writes": COUNTER.c.writes + 1}
                if cfg.fenced:
                    fenced_update(conn, COUNTER, row, token=token, values=values)
                else:  # fence set as a record of the writer's token, not checked
                    conn.execute(sa.update(COUNTER).where(row).values(**values, fence=token))
            hold["write"] = "ok"
        except redlease.StaleTokenError:
            hold["write"] = "stale"
        except sa.exc.SQLAlchemyError as exc:
            hold["write"] = f"err {type(exc).__name__}"
            with contextlib.suppress(Exception):
                conn.close()
            conn = engine.connect()
        holding[cfg.index] = 0
        hold["end"] = clock()
        hold["release"] = careful_release(lock, redlease.ReplicaError)[0]
        hold["told"] = told.is_set() or hold["release"] == "lost"
        emit(hold)
    emit({"k": "bye", "w": cfg.index, "at": clock()})
    for closer in (conn.close, engine.dispose, client.close):
        with contextlib.suppress(Exception):
            closer()
    log.close()


# --- the run ---------------------------------------------------------------------------------


class PgRun(Run):
    """A chaos run whose workers write the counter row of ``db_url``."""

    def __init__(
        self,
        settings: Settings,
        scenario: Scenario,
        workdir: Path,
        seed: int,
        db_url: str,
        fenced: bool,
    ) -> None:
        super().__init__(settings, scenario, workdir, seed)
        self.db_url = db_url
        self.fenced = fenced
        self.point = self.mpc.Value("i", 0)
        self.pauses = 0
        self.failovers = 0

    def spawn(self, index: int) -> Any:
        cfg = PgWorkerConfig(
            index=index,
            lock_url=self.lock_url(index),
            db_url=self.db_url,
            fenced=self.fenced,
            lease=self.s.lease,
            cs=self.s.cs,
            socket_timeout=self.s.socket_timeout,
            log_path=str(self.log_path(index)),
            verbose=self.s.verbose,
        )
        args = (cfg, self.holding, self.trapped, self.point, self.ready, self.go, self.end_value)
        proc = self.mpc.Process(target=pg_worker, args=args, daemon=True)
        proc.start()
        self.workers[index] = proc
        return proc


@dataclass(frozen=True)
class Event:
    at: float
    """Seconds after the start."""
    kind: str
    """pause or failover."""
    stall: float
    where: int = 0
    length: float = 0.0
    across: bool = False
    """A pause with a failover in the middle."""


def plan(seed: int, duration: float, lease: float) -> list[Event]:
    """The faults of a seed: the same for the fenced and the unfenced run."""
    import random

    rng = random.Random(seed)
    first, last = min(1.0, duration / 5), max(1.0, duration - 4 * lease)
    pauses = max(2, int(duration // 6))
    failovers = max(1, int(duration // 12))
    events = [  # the first two: mid-transaction; before the claim, across a failover
        Event(
            first if i == 0 else rng.uniform(first, last),
            "pause",
            rng.uniform(*STALL) * lease,
            MID_TRANSACTION if i % 2 == 0 else BEFORE_CLAIM,
            (PAUSE[1] if i == 0 else rng.uniform(*PAUSE)) * lease,
            i == 1 or (i > 1 and rng.random() < 0.5),
        )
        for i in range(pauses)
    ]
    events += [
        Event(rng.uniform(first, last), "failover", rng.uniform(*STALL) * lease)
        for _ in range(failovers)
    ]
    return sorted(events, key=lambda e: e.at)


def _failover(run: PgRun, stall: float) -> None:
    """Replication stalls for ``stall`` s, the lock server dies, its replica takes over."""
    assert run.link is not None and run.replica is not None and run.vip is not None
    run.link.freeze()
    time.sleep(stall)
    old_master, new_master = run.lock_server, run.replica
    old_master.kill()
    t0 = time.monotonic()
    new_master.promote()
    run.vip.retarget(new_master)
    run.vip.cut()
    replace_replica(run, old_master, new_master, t0)
    run.failovers += 1


def _moved_on(run: PgRun, engine: sa.Engine, index: int, where: int, writes: int) -> bool:
    """Another holder went past the paused one ``index``: it wrote the row (``writes``: the
    row's count when the pause began); when the paused one keeps the row locked (fenced, its
    claim made), nobody can write it: another holder took the lock."""
    if run.fenced and where == MID_TRANSACTION:
        return any(run.holding[j] for j in run.workers if j != index)
    with engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT writes FROM chaos_counter")) or 0) > writes


def inject(run: PgRun, engine: sa.Engine, events: Sequence[Event]) -> None:
    lease = run.s.lease
    for event in events:
        run.sleep_until(run.started_at + event.at)
        if time.monotonic() > run.end_at - 2 * lease:
            run.notes.append(f"no time left for the {event.kind} at {event.at:.1f} s")
            break
        if event.kind == "failover":
            _failover(run, event.stall)
            continue
        run.point.value = event.where
        index = run.trap()
        if index is None:
            run.notes.append(f"pause at {event.at:.1f} s: no holder reached the trap")
            continue
        run.pauses += 1
        stopped = time.monotonic()
        with engine.connect() as conn:
            writes = int(conn.scalar(sa.text("SELECT writes FROM chaos_counter")) or 0)
        if event.across:
            time.sleep(event.length / 2)
            _failover(run, event.stall)
        run.sleep_until(stopped + event.length)
        while not _moved_on(run, engine, index, event.where, writes):
            if time.monotonic() > stopped + MOVED_ON * lease:
                run.notes.append(f"pause at {event.at:.1f} s: nobody went past in {MOVED_ON:g} L")
                break
            time.sleep(0.02)
        run.resume(index)
    run.point.value = 0


@dataclass
class Outcome:
    seed: int
    fenced: bool
    lost: int = 0
    stale: int = 0
    value: int = 0
    writes: int = 0
    acked: int = 0
    refused: int = 0
    holds: int = 0
    pauses: int = 0
    failovers: int = 0
    twice: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "fenced" if self.fenced else "unfenced"

    def line(self) -> str:
        return (
            f"postgres-rmw s{self.seed} {self.mode}: lost updates {self.lost}, stale writes "
            f"accepted {self.stale} (counter {self.value}, writes accepted {self.writes}, "
            f"refused {self.refused}, holds {self.holds}, pauses {self.pauses}, failovers "
            f"{self.failovers})"
        )


def check(run: PgRun, engine: sa.Engine, seed: int) -> Outcome:
    """Count from the database: lost updates and stale writes accepted; from the workers' logs:
    holds, writes acknowledged, writes refused, tokens handed out twice."""
    out = Outcome(seed, run.fenced, pauses=run.pauses, failovers=run.failovers, notes=run.notes)
    with engine.connect() as conn:
        value, writes = conn.execute(sa.text("SELECT value, writes FROM chaos_counter")).one()
        audit = conn.execute(
            sa.text("SELECT old_fence, new_fence FROM chaos_audit ORDER BY seq")
        ).all()
    out.value, out.writes = int(value), int(writes)
    out.lost = out.writes - out.value
    top = 0
    for old_fence, new_fence in audit:
        top = max(top, int(old_fence))
        if int(new_fence) < top:
            out.stale += 1
        top = max(top, int(new_fence))
    tokens: dict[int, int] = {}
    for path in sorted(run.workdir.glob(f"{run.scenario.name}-{seed}-*.jsonl")):
        for text in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(text)
                if rec.get("k") != "hold":
                    continue
                out.holds += 1
                out.acked += rec.get("write") == "ok"
                out.refused += rec.get("write") == "stale"
                tokens[rec["token"]] = tokens.get(rec["token"], 0) + 1
    out.twice = sum(1 for count in tokens.values() if count > 1)
    if out.acked != out.writes:
        out.notes.append(f"{out.acked} writes acknowledged to workers, {out.writes} in the row")
    return out


def run_one(
    settings: Settings, db: PostgresServer, workdir: Path, seed: int, fenced: bool
) -> Outcome:
    engine = sa.create_engine(db.url_for("psycopg"), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for statement in SCHEMA:
                conn.execute(sa.text(statement))
        name = "postgres-rmw" if fenced else "postgres-rmw-unfenced"
        scenario = Scenario(
            name, "PostgreSQL read-modify-writes", inject_nothing, allows_overlap=True
        )
        run = PgRun(settings, scenario, workdir, seed, db.url_for("psycopg"), fenced)
        try:
            setup_failover(run)
            if not run.start_workers():
                run.notes.append("workers did not start: run called off")
            inject(run, engine, plan(seed, settings.duration, settings.lease))
            run.sleep_until(run.end_at)
            run.finish()
            return check(run, engine, seed)
        finally:
            run.close()
    finally:
        engine.dispose()


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, list[int]]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="10 s a run, seed 1 by default")
    p.add_argument("--workers", type=int, help="worker processes (default 4, quick 3)")
    p.add_argument("--lease", type=float, default=1.0, help="lease L in seconds (1.0)")
    p.add_argument("--cs", type=float, default=0.01, help="critical section in seconds (0.01)")
    p.add_argument("--duration", type=float, help="seconds a run (default 45, quick 10)")
    p.add_argument("--server", help="server label or path substring (default: the newest)")
    p.add_argument("--seed", type=int, action="append", help="a seed (repeatable; 1 2 3)")
    p.add_argument("--verbose", action="store_true", help="show the workers' redlease logs")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    a = p.parse_args(argv)
    chaos_report.MARKDOWN = a.markdown
    duration = a.duration or (10.0 if a.quick else 45.0)
    if duration < 4 * a.lease + 2:
        p.error(f"--duration must be at least 4 leases + 2 s ({4 * a.lease + 2:g} s)")
    settings = Settings(
        quick=a.quick,
        workers=a.workers or (3 if a.quick else 4),
        lease=a.lease,
        cs=a.cs,
        duration=duration,
        repeats=1,
        binary=choose_server(a.server),
        start_method="spawn",
        verbose=a.verbose,
    )
    return settings, a.seed or ([1] if a.quick else [1, 2, 3])


def main(argv: Sequence[str] | None = None) -> int:
    settings, seeds = parse_args(argv)
    print(
        f"redlease chaos check, postgres-rmw: {settings.binary.label}, {settings.workers} "
        f"workers, lease {settings.lease:g} s, {settings.duration:g} s a run, seeds "
        f"{' '.join(map(str, seeds))}; Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with PostgresServer() as db, tempfile.TemporaryDirectory(prefix="redlease-chaos-pg-") as tmp:
        version = sa.create_engine(db.url_for("psycopg"), poolclass=NullPool)
        with version.connect() as conn:
            pg = str(conn.scalar(sa.text("SHOW server_version"))).split()[0]
        version.dispose()
        print(f"  PostgreSQL {pg} on port {db.port}", flush=True)
        for seed in seeds:
            for fenced in (True, False):
                t0 = time.monotonic()
                outcome = run_one(settings, db, Path(tmp), seed, fenced)
                outcomes.append(outcome)
                print(f"  {outcome.line()} in {time.monotonic() - t0:.1f} s", flush=True)
    rows = [
        [
            o.seed,
            settings.binary.label,
            o.mode,
            o.holds,
            o.pauses,
            o.failovers,
            o.writes,
            o.refused,
            o.lost,
            o.stale,
        ]
        for o in outcomes
    ]
    print_table(
        f"postgres-rmw (lease L = {settings.lease:g} s; {settings.workers} workers; "
        f"{settings.duration:g} s a run)",
        ["seed", "server", "fencing", "holds", "pauses", "failovers", "accepted", "refused",
         "lost updates", "stale writes accepted"],
        rows,
    )  # fmt: skip
    fenced_runs = [o for o in outcomes if o.fenced]
    unfenced_runs = [o for o in outcomes if not o.fenced]
    goals = [
        ("fenced: 0 lost updates", sum(o.lost for o in fenced_runs) == 0),
        ("fenced: 0 stale writes accepted", sum(o.stale for o in fenced_runs) == 0),
        ("unfenced: the loss shows (lost updates > 0)", sum(o.lost for o in unfenced_runs) > 0),
        ("every run paused a holder", all(o.pauses > 0 for o in outcomes)),
    ]
    print()
    for text, ok in goals:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    for o in outcomes:
        for note in o.notes:
            print(f"  note s{o.seed} {o.mode}: {note}")
        if o.twice:
            print(f"  note s{o.seed} {o.mode}: {o.twice} tokens held by two holds")
    ok = all(passed for _, passed in goals)
    print(f"\n{'PASS' if ok else 'FAIL'}: done in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
