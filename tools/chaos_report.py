"""The output of the chaos run (``tools/chaos.py``): the tables, the goals with their verdict,
the notes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from chaos_analysis import NETWORK_BLIPS, Result
from chaos_worker import HAS_FENCING

HANDOVER = 0.1
"""The next waiter must hold a killed holder's lock within the lease plus this."""


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
