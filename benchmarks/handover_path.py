"""Where a hand-over's time goes (issue #33), on a private server: two processes hand one lock
back and forth (sync ``Client``, the watchdog's default lease), each holding it 2 ms so that
the other is in line, and each stage of the hand-over is stamped on the monotonic clock,
which both processes share:

release -> send
    the releasing thread, from ``release()`` to the release script's bytes handed to the
    socket (redis-py's ``send_packed_command``);
send -> listener wakes
    the server runs the script, which publishes the grant on the waiter's client channel, and
    the waiting process's listener thread returns from ``select``;
listener wakes -> message handled
    the listener reads and parses the message and hands it to the waiting thread;
message handled -> waiter runs
    the waiting thread wakes (its ``threading.Event``);
waiter runs -> acquire returns
    the rest of ``acquire()``: the grant checked, the hold recorded, the watchdog told.

The stamps wrap redlease's own functions in these two processes (a microsecond or two each);
the median PING round trip, measured in the same run, is the yardstick.

    python benchmarks/handover_path.py                    # 3 rounds of 400 hand-overs
    python benchmarks/handover_path.py --server valkey --rounds 5
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import statistics
import time
from typing import Any

import redis
from suite.common import choose_server

import redlease
from redlease.testing import RedisServer

HOLD_S = 0.002
STAGES = ("release", "send", "wakes", "handled", "runs", "returns")
LABELS = {
    "send": "release -> send",
    "wakes": "send -> listener wakes",
    "handled": "listener wakes -> message handled",
    "runs": "message handled -> waiter runs",
    "returns": "waiter runs -> acquire returns",
}


def _stamp_stages(stamps: dict[str, int]) -> None:
    """Wrap the functions at each stage's end so that they record the time they ran."""
    import redis.connection

    from redlease._shared import channels
    from redlease._sync import driver
    from redlease._threads import subscriber

    send = redis.connection.AbstractConnection.send_packed_command

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        stamps["send"] = time.monotonic_ns()
        send(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]

    pause = subscriber.Subscriber._pause

    def _pause(self: Any) -> None:
        pause(self)
        stamps["woke"] = time.monotonic_ns()

    subscriber.Subscriber._pause = _pause  # type: ignore[method-assign]

    on_message = channels.ChannelTable.on_message

    def on_message_stamped(self: Any, channel: str, payload: str, now: float) -> Any:
        if ":" in payload and not payload.startswith(channels.LOST_PREFIX):  # a grant
            stamps["handled"] = time.monotonic_ns()
            stamps["wakes"] = stamps.get("woke", 0)
        return on_message(self, channel, payload, now)

    channels.ChannelTable.on_message = on_message_stamped  # type: ignore[method-assign]

    def wait(waiter: Any, timeout: float) -> Any:
        woken = waiter.event.wait(timeout)
        stamps["runs"] = time.monotonic_ns()
        return waiter.woken(woken)

    driver.wait = wait  # type: ignore[attr-defined]


def _worker(url: str, me: int, cycles: int, shared: dict[str, Any], barrier: Any) -> None:
    stamps: dict[str, int] = {}
    _stamp_stages(stamps)
    client = redlease.Client.from_url(url)
    lock = client.lock("bench:handover-path")
    barrier.wait()
    for i in range(cycles):
        if i % 2 != me:
            continue
        if not lock.acquire(timeout=10):
            raise RuntimeError("no hand-over within 10 s")
        if i > 0:  # handed over by the other process
            shared["returns"][i] = time.monotonic_ns()
            for stage in ("wakes", "handled", "runs"):
                shared[stage][i] = stamps.get(stage, 0)
        time.sleep(HOLD_S)  # the other joins the line meanwhile
        shared["release"][i + 1] = time.monotonic_ns()
        lock.release()
        shared["send"][i + 1] = stamps["send"]
    client.close()


def _round(url: str, cycles: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    shared = {stage: ctx.Array("q", cycles + 2, lock=False) for stage in STAGES}
    barrier = ctx.Barrier(2)
    workers = [
        ctx.Process(target=_worker, args=(url, me, cycles, shared, barrier)) for me in (0, 1)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        if w.exitcode != 0:
            raise SystemExit(f"handover_path.py: a worker failed (exit code {w.exitcode})")
    figures: dict[str, float] = {}
    warm = range(10, cycles)
    for before, stage in itertools.pairwise(STAGES):
        gaps = [
            (shared[stage][i] - shared[before][i]) / 1000
            for i in warm
            if shared[stage][i] and shared[before][i]
        ]
        figures[stage] = statistics.median(gaps)
    total = [(shared["returns"][i] - shared["release"][i]) / 1000 for i in warm]
    figures["total"] = statistics.median(total)
    return figures


def _ping_us(url: str, count: int = 2000) -> float:
    conn = redis.Redis.from_url(url)
    times = []
    for _ in range(count):
        started = time.perf_counter_ns()
        conn.ping()
        times.append((time.perf_counter_ns() - started) / 1000)
    conn.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="redis-7", help="server label or path substring")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=400)
    options = parser.parse_args()
    rounds: list[dict[str, float]] = []
    with RedisServer(choose_server(options.server)) as server:
        ping = _ping_us(server.url)
        for _ in range(options.rounds):
            rounds.append(_round(server.url, options.cycles))
    print(
        f"{server.binary.label}: hand-over stages, microseconds, median of {options.cycles} "
        f"hand-overs per round (median of the rounds, and each round); PING round trip "
        f"{ping:.0f} us"
    )
    for stage in (*LABELS, "total"):
        values = [r[stage] for r in rounds]
        each = ", ".join(f"{v:.0f}" for v in values)
        label = LABELS.get(stage, "release -> acquire returns (whole)")
        print(f"  {label:36s} {statistics.median(values):6.0f}   ({each})")


if __name__ == "__main__":
    main()
