"""An instance of a scheduled job in a process of its own (for test_scheduled_lock.py).

``python scheduled_worker.py crash SIDE URL NAME AT_MOST_FOR KEEP_ALIVE WATCHDOG``:
    run the job (its slot taken with ``at_most_for``, or ``keep_alive`` 1 with the client's
    ``watchdog_timeout``), print "running" from inside it, then sleep until killed (60 s at
    most).
``python scheduled_worker.py ticks SIDE URL NAME AT_LEAST AT_MOST TICKS INTERVAL JITTER``:
    print "ready", read the first tick's time (``time.time()``) from stdin, then at each of
    TICKS ticks, INTERVAL s apart, each late by a random 0..JITTER s, call the job, which
    counts its run in ``NAME:runs:<tick>`` and takes 20 ms; print "done".
"""

from __future__ import annotations

import asyncio
import random
import sys
import time

import redis

import redlease

WORK = 0.02


def crash_sync(url: str, name: str, at_most: float, keep_alive: bool, watchdog: float) -> None:
    client = redlease.Client.from_url(url, watchdog_timeout=watchdog)
    slot = client.scheduled_lock(
        name, at_most_for=None if keep_alive else at_most, keep_alive=keep_alive
    )

    @slot
    def job() -> None:
        print("running", flush=True)
        time.sleep(60)

    job()
    print("skipped", flush=True)


async def crash_async(
    url: str, name: str, at_most: float, keep_alive: bool, watchdog: float
) -> None:
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog)
    slot = client.scheduled_lock(
        name, at_most_for=None if keep_alive else at_most, keep_alive=keep_alive
    )

    @slot
    async def job() -> None:
        print("running", flush=True)
        await asyncio.sleep(60)

    await job()
    print("skipped", flush=True)


def ticks_sync(
    url: str, name: str, at_least: float, at_most: float, ticks: int, interval: float, jitter: float
) -> None:
    raw = redis.Redis.from_url(url)
    with redlease.Client.from_url(url) as client:

        @client.scheduled_lock(name, at_most_for=at_most, at_least_for=at_least)
        def job(tick: int) -> None:
            raw.incr(f"{name}:runs:{tick}")
            time.sleep(WORK)

        print("ready", flush=True)
        start = float(sys.stdin.readline())
        for tick in range(ticks):
            at = start + tick * interval + random.uniform(0, jitter)
            time.sleep(max(0.0, at - time.time()))
            job(tick)
    raw.close()
    print("done", flush=True)


async def ticks_async(
    url: str, name: str, at_least: float, at_most: float, ticks: int, interval: float, jitter: float
) -> None:
    raw = redis.asyncio.Redis.from_url(url)
    async with redlease.AsyncClient.from_url(url) as client:

        @client.scheduled_lock(name, at_most_for=at_most, at_least_for=at_least)
        async def job(tick: int) -> None:
            await raw.incr(f"{name}:runs:{tick}")
            await asyncio.sleep(WORK)

        print("ready", flush=True)
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        start = float(line)
        for tick in range(ticks):
            at = start + tick * interval + random.uniform(0, jitter)
            await asyncio.sleep(max(0.0, at - time.time()))
            await job(tick)
    await raw.aclose()
    print("done", flush=True)


def main() -> None:
    mode, side, url, name = sys.argv[1:5]
    args = [float(a) for a in sys.argv[5:]]
    if mode == "crash":
        at_most, keep_alive, watchdog = args[0], bool(args[1]), args[2]
        if side == "sync":
            crash_sync(url, name, at_most, keep_alive, watchdog)
        else:
            asyncio.run(crash_async(url, name, at_most, keep_alive, watchdog))
    elif mode == "ticks":
        at_least, at_most, ticks, interval, jitter = args
        if side == "sync":
            ticks_sync(url, name, at_least, at_most, int(ticks), interval, jitter)
        else:
            asyncio.run(ticks_async(url, name, at_least, at_most, int(ticks), interval, jitter))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
