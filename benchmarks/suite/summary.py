"""Section summary: the targets of the sections that ran, PASS or MISS."""

import math
import statistics
from collections.abc import Callable

from .common import Context, print_table
from .scale import PIPELINE_MIN_RATIO, SCALE_MAX_CONNECTIONS, SCALE_MAX_RSS_MB, _pipeline_ratio
from .subjects import SYNC_LOCKS

# --- section: summary -----------------------------------------------------------------------


MAX_COMMANDS_PER_CS = {"redlease": 12, "redlease-lease": 13, "redlease-fair": 12}
"""Goal (issue #33): commands the server runs per contended critical section, Lua-internal
ones and the counter's GET and SET included, by lock."""

HANDOFF_MAX_RATIO = 0.9
"""Goal: redlease's hand-over p50 at most this times python-redis-lock's."""

ASYNC_FLOOR_MIN_RATIO = 0.9
"""Goal: redlease's asyncio cycles at least this times the raw floor's (redis.asyncio)."""

FAIR_SHARE_SLACK_PP = 0.5
"""How far (percentage points) a process's share may be from 100/N for "exact fairness"."""


def section_summary(ctx: Context) -> None:
    rows: list[list[object]] = []
    server = ctx.binary.label

    def target(what: str, value: float | None, goal: str, ok: Callable[[float], bool]) -> None:
        if value is None or math.isnan(value):
            rows.append([what, "n/a", goal, "n/a"])
        else:
            # three decimals below 10, so that a ratio of 0.996 does not show as 1.00
            shown = f"{value:.3f}" if isinstance(value, float) and abs(value) < 10 else value
            rows.append([what, shown, goal, "PASS" if ok(value) else "MISS"])

    def check(what: str, value: object, goal: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("PASS" if ok else "MISS")
        rows.append([what, "n/a" if value is None else value, goal, verdict])

    rounds = ctx.uncontended_rounds
    for parser in dict.fromkeys(p for p, _, _ in rounds):
        for api in ("sync", "asyncio"):
            target(
                f"redlease uncontended / redis-py Lock, {parser}, {api} ({server})",
                paired_ratio(
                    rounds.get((parser, api, "redlease")), rounds.get((parser, api, "redis-py"))
                ),
                ">= 1.0",
                lambda v: v >= 1.0,
            )
        target(
            f"redlease uncontended / raw floor, {parser}, asyncio ({server})",
            ctx.uncontended_ratio.get((parser, "asyncio", "redlease")),
            f">= {ASYNC_FLOOR_MIN_RATIO:g}",
            lambda v: v >= ASYNC_FLOOR_MIN_RATIO,
        )
    if ctx.contention:
        _contention_targets(ctx, target)
    _scale_targets(ctx, target, check)
    if rows:
        print_table("Summary", ["target", "value", "goal", "result"], rows)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def paired_ratio(a: list[float] | None, b: list[float] | None) -> float | None:
    """The median of the per-round ratios of two subjects run back to back in each round."""
    if not a or not b:
        return None
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _contention_targets(ctx: Context, target: Callable[..., None]) -> None:
    top = max(ctx.settings.procs)
    for procs in ctx.settings.procs:
        ours = ctx.contention.get(("redlease", procs))
        theirs = ctx.contention.get(("python-redis-lock", procs))
        target(
            f"redlease hand-over p50 / python-redis-lock, {procs} procs",
            ratio(ours.handoff_p50_ms if ours else None, theirs.handoff_p50_ms if theirs else None),
            f"<= {HANDOFF_MAX_RATIO:g}",
            lambda v: v <= HANDOFF_MAX_RATIO,
        )
        fixed = ctx.contention.get(("redlease-lease", procs))
        target(
            f"redlease lease=30s hand-over p50 / python-redis-lock, {procs} procs",
            ratio(
                fixed.handoff_p50_ms if fixed else None, theirs.handoff_p50_ms if theirs else None
            ),
            f"<= {HANDOFF_MAX_RATIO:g}",
            lambda v: v <= HANDOFF_MAX_RATIO,
        )
        target(
            f"redlease CS/s / python-redis-lock, {procs} procs",
            ratio(ours.cs_per_s if ours else None, theirs.cs_per_s if theirs else None),
            ">= 1.0",
            lambda v: v >= 1.0,
        )
        off = (
            100 * max(abs(ours.share_min - 1 / procs), abs(ours.share_max - 1 / procs))
            if ours
            else None
        )
        target(
            f"redlease share off the fair 100/{procs} %, {procs} procs (points)",
            off,
            f"<= {FAIR_SHARE_SLACK_PP:g}",
            lambda v: v <= FAIR_SHARE_SLACK_PP,
        )
        for key in ("redlease", "redlease-lease", "redlease-fair"):
            run = ctx.contention.get((key, procs))
            target(
                f"{SYNC_LOCKS[key].label} cmds/CS, {procs} procs",
                run.commands_per_cs if run else None,
                f"<= {MAX_COMMANDS_PER_CS[key]:g}",
                lambda v, most=MAX_COMMANDS_PER_CS[key]: v <= most,
            )
    ours_top = ctx.contention.get(("redlease", top))
    target(
        f"redlease longest / median wait, {top} procs",
        ours_top.wait_ratio if ours_top else None,
        "<= 20",
        lambda v: v <= 20,
    )
    ours_runs = [r for (key, _), r in ctx.contention.items() if key == "redlease"]
    target(
        "redlease lost updates + overlaps, all runs",
        sum(r.lost + r.overlaps for r in ours_runs) if ours_runs else None,
        "0",
        lambda v: v == 0,
    )


def _scale_targets(ctx: Context, target: Callable[..., None], check: Callable[..., None]) -> None:
    s = ctx.settings
    for kind, n, what in (
        ("tasks", s.scale_tasks, "asyncio tasks on one AsyncClient"),
        ("threads", s.scale_threads, "threads on one Client"),
    ):
        r = ctx.scale.get(kind)
        if r is None:
            continue
        label = f"{n:,} {what}"
        if "failed" in r:
            check(f"{label}: served", "failed", "all, in order, no errors", False)
            continue
        errors = sum(r["errors"].values()) + r["timed_out"]
        check(
            f"{label}: served / errors / in order",
            f"{r['served']:,} / {errors:,} / {'yes' if r['in_order'] else 'no'}",
            f"{n:,} / 0 / yes",
            r["served"] == n and errors == 0 and r["in_order"] and r["finished"],
        )
        target(
            f"{label}: server connections",
            r["max_connections"],
            f"<= {SCALE_MAX_CONNECTIONS}",
            lambda v: v <= SCALE_MAX_CONNECTIONS,
        )
        target(
            f"{label}: peak RSS MB",
            r["rss_peak_mb"],
            f"< {SCALE_MAX_RSS_MB:g}",
            lambda v: v < SCALE_MAX_RSS_MB,
        )
    pipe = ctx.scale.get("pipeline")
    if pipe is not None:
        value = _pipeline_ratio(pipe.get("figures") or {})
        target(
            f"pipelined redlease / redis.asyncio pool, {s.pipeline_tasks:,} tasks",
            value if isinstance(value, int | float) else None,
            f">= {PIPELINE_MIN_RATIO:g}",
            lambda v: v >= PIPELINE_MIN_RATIO,
        )
    held = ctx.scale.get("held")
    if held is not None:
        if "failed" in held:
            check(f"{s.scale_locks:,} locks held by one watchdog", "failed", "all", False)
        else:
            check(
                f"{held['n']:,} locks held {held['held_after_s']:g} s later (one watchdog)",
                f"{held['held']:,}",
                f"{held['n']:,}",
                held["held"] == held["n"],
            )
