"""The analysis of a chaos run (``tools/chaos.py``): the holds its workers logged, read back and
measured against each other and against the resources' final values."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from chaos_run import Fault, Run
from chaos_scenarios import Scenario
from chaos_worker import FENCED, HAS_FENCING, LOCK_NAME, UNFENCED, Fail, Hold, as_text


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
    return set(as_text(value).split(",")) if value else set()


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
        r.leftover = any(not as_text(f).startswith("redlease:") for f in remaining)
    return r
