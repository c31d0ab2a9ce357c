"""Sections ping and uncontended."""

import asyncio
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from .common import Context, UncontendedKey, note, print_table, progress, quantile
from .subjects import (
    ASYNC_LOCKS,
    SYNC_LOCKS,
    UNCONTENDED,
    AsyncSubject,
    Subject,
    async_available,
)

# --- section: ping --------------------------------------------------------------------------


def section_ping(ctx: Context) -> None:
    with ctx.server() as server:
        conn = redis.Redis.from_url(server.url)
        try:
            for _ in range(200):
                conn.ping()
            samples = []
            for _ in range(ctx.settings.ping_count):
                t0 = time.perf_counter_ns()
                conn.ping()
                samples.append((time.perf_counter_ns() - t0) / 1e6)
        finally:
            conn.close()
    ctx.ping_ms = statistics.median(samples)
    print_table(
        "PING round trip (redis-py, loopback)",
        ["", "median ms", "p99 ms", "pings/s at median"],
        [["PING", ctx.ping_ms, quantile(samples, 0.99), 1000 / ctx.ping_ms]],
    )


# --- section: uncontended -------------------------------------------------------------------


def _sync_round(subject: Subject, cycles: int) -> float:
    acquire, release = subject.acquire, subject.release
    t0 = time.perf_counter()
    for _ in range(cycles):
        if not acquire(None):
            raise RuntimeError("uncontended acquire failed")
        release()
    return cycles / (time.perf_counter() - t0)


async def _async_round(subject: AsyncSubject, cycles: int) -> float:
    acquire, release = subject.acquire, subject.release
    t0 = time.perf_counter()
    for _ in range(cycles):
        if not await acquire():
            raise RuntimeError("uncontended acquire failed")
        await release()
    return cycles / (time.perf_counter() - t0)


def _run_async_round(loop: asyncio.AbstractEventLoop, subject: AsyncSubject, cycles: int) -> float:
    return loop.run_until_complete(_async_round(subject, cycles))


@dataclass(frozen=True)
class Parser:
    """A reply parser, passed to every subject as ``parser_class`` in its connection kwargs."""

    label: str
    sync_kwargs: dict[str, Any]
    async_kwargs: dict[str, Any]


def reply_parsers() -> tuple[list[Parser], list[str]]:
    """hiredis (when installed) and redis-py's pure-Python RESP2 parser, and notes."""
    import redis.asyncio.connection as async_connection
    import redis.connection as sync_connection
    from redis.utils import HIREDIS_AVAILABLE

    python = Parser(
        "python",
        {"parser_class": sync_connection._RESP2Parser},
        {"parser_class": async_connection._AsyncRESP2Parser},
    )
    if not HIREDIS_AVAILABLE:
        return [python], ["hiredis rows: hiredis is not installed (pip install -e '.[bench]')"]
    hiredis = Parser(
        "hiredis",
        {"parser_class": sync_connection._HiredisParser},
        {"parser_class": async_connection._AsyncHiredisParser},
    )
    return [hiredis, python], []


def _parser_in_use(client: Any) -> str:
    """The parser class a redis-py client's pool gives its connections."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", {})
    parser = kwargs.get("parser_class")
    return getattr(parser, "__name__", "default")


def section_uncontended(ctx: Context) -> None:
    s = ctx.settings
    warmup = max(100, s.cycles // 10)
    samples: dict[UncontendedKey, list[float]] = {}
    sync_subjects: dict[UncontendedKey, Subject] = {}
    async_subjects: dict[UncontendedKey, AsyncSubject] = {}
    parsers, skipped = reply_parsers()
    with ctx.server() as server:
        loop = asyncio.new_event_loop()
        try:
            for parser in parsers:
                for key in UNCONTENDED:
                    kind = SYNC_LOCKS[key]
                    if not kind.available():
                        skipped.append(f"{kind.label}: module {kind.needs!r} not installed")
                        continue
                    name = f"bench:free:{parser.label}:{key}"
                    subject = kind.factory(server.url, name, **parser.sync_kwargs)
                    sync_subjects[(parser.label, "sync", key)] = subject
                    wanted = parser.sync_kwargs["parser_class"].__name__
                    if _parser_in_use(subject.redis) != wanted:
                        raise RuntimeError(f"{kind.label}: parser is not {wanted}")
                if not async_available():
                    skipped.append("asyncio redlease: redlease.AsyncClient is not importable yet")
                    continue
                for key, make in ASYNC_LOCKS.items():
                    name = f"bench:async:{parser.label}:{key}"
                    try:
                        made = loop.run_until_complete(
                            make(server.url, name, **parser.async_kwargs)
                        )
                    except Exception as exc:
                        skipped.append(f"asyncio {key}: {type(exc).__name__}: {exc}")
                        continue
                    async_subjects[(parser.label, "asyncio", key)] = made
                    wanted = parser.async_kwargs["parser_class"].__name__
                    if _parser_in_use(made.redis) != wanted:
                        raise RuntimeError(f"asyncio {key}: parser is not {wanted}")
            for subject in sync_subjects.values():
                _sync_round(subject, warmup)
            for asubject in async_subjects.values():
                loop.run_until_complete(_async_round(asubject, warmup))
            groups: dict[tuple[str, str], list[tuple[UncontendedKey, Callable[[], float]]]] = {}
            for key, subject in sync_subjects.items():
                job = functools.partial(_sync_round, subject, s.cycles)
                groups.setdefault(key[:2], []).append((key, job))
            for key, asubject in async_subjects.items():
                job = functools.partial(_run_async_round, loop, asubject, s.cycles)
                groups.setdefault(key[:2], []).append((key, job))
            samples = {key: [] for group in groups.values() for key, _ in group}
            ratios = {key: [] for key in samples}
            # interleave the locks, starting each round with the next one, so that machine
            # noise and warm caches favour none of them; each parser-and-API group runs
            # back to back, its raw floor among them, and each lock's ratio is taken against
            # the floor of the same round (the median of those per-round ratios)
            order = list(groups)
            for i in progress(range(s.rounds), "uncontended rounds"):
                for group_key in order[i % len(order) :] + order[: i % len(order)]:
                    group = groups[group_key]
                    shift = i % len(group)
                    this_round = {key: job() for key, job in group[shift:] + group[:shift]}
                    floor_rate = this_round.get((*group_key, "raw"))
                    for key, rate in this_round.items():
                        samples[key].append(rate)
                        if floor_rate:
                            ratios[key].append(rate / floor_rate)
        finally:
            for subject in sync_subjects.values():
                subject.close()
            for asubject in async_subjects.values():
                loop.run_until_complete(asubject.close())
            loop.close()

    ctx.uncontended = {key: statistics.median(values) for key, values in samples.items()}
    ctx.uncontended_rounds = samples
    ctx.uncontended_ratio = {key: statistics.median(v) for key, v in ratios.items() if v}
    rows: list[list[object]] = []
    for (parser_label, api, key), rate in ctx.uncontended.items():
        spread = samples[(parser_label, api, key)]
        rows.append(
            [
                SYNC_LOCKS[key].label,
                parser_label,
                api,
                rate,
                1e6 / rate,
                min(spread),
                max(spread),
                ctx.uncontended_ratio.get((parser_label, api, key)),
            ]
        )
    print_table(
        f"Uncontended acquire+release: median of {s.rounds} rounds x {s.cycles} cycles",
        ["lock", "parser", "API", "cycles/s", "us/cycle", "min round", "max round", "x floor"],
        rows,
    )
    if ctx.ping_ms:
        note(f"two round trips at the PING median = {1e3 / (2 * ctx.ping_ms):,.0f} cycles/s")
    note(
        "x floor: median of per-round ratios against the raw floor with the same parser and"
        " API (asyncio: redis.asyncio), run back to back with it"
    )
    note("python = redis-py's own RESP2 parser (parser_class=_RESP2Parser / _AsyncRESP2Parser)")
    for text in dict.fromkeys(skipped):
        note(f"skipped {text}")
