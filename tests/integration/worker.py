"""A separate process for cross-process tests: ``python worker.py MODE SIDE URL NAME [N]``.

count: N times acquire -> non-atomic GET/SET of a counter -> release; prints "done".
hold:  acquire (watchdog lease), print "held", then sleep until killed.
wait-fair: wait in a fair lock's line (print "waiting"), then hold it until killed.
"""

from __future__ import annotations

import asyncio
import sys
import time

import redis

import redlease


def count_sync(url: str, name: str, n: int) -> None:
    raw = redis.Redis.from_url(url)
    with redlease.Client.from_url(url) as client:
        lock = client.lock(name)
        for _ in range(n):
            with lock:
                value = int(raw.get(name + ":counter") or 0)
                raw.set(name + ":counter", value + 1)
    print("done", flush=True)


async def count_async(url: str, name: str, n: int) -> None:
    raw = redis.asyncio.Redis.from_url(url)
    async with redlease.AsyncClient.from_url(url) as client:
        lock = client.lock(name)
        for _ in range(n):
            async with lock:
                value = int(await raw.get(name + ":counter") or 0)
                await raw.set(name + ":counter", value + 1)
    await raw.aclose()
    print("done", flush=True)


def hold_sync(url: str, name: str, watchdog: float) -> None:
    client = redlease.Client.from_url(url, watchdog_timeout=watchdog)
    client.lock(name).acquire()
    print("held", flush=True)
    time.sleep(600)


async def hold_async(url: str, name: str, watchdog: float) -> None:
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog)
    await client.lock(name).acquire()
    print("held", flush=True)
    await asyncio.sleep(600)


def main() -> None:
    mode, side, url, name = sys.argv[1:5]
    arg = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    if mode == "count":
        if side == "sync":
            count_sync(url, name, int(arg))
        else:
            asyncio.run(count_async(url, name, int(arg)))
    elif mode == "wait-fair":  # take a place in a fair lock's line, say so, then wait on
        client = redlease.Client.from_url(url)
        print("waiting", flush=True)
        client.fair_lock(name).acquire()
        print("held", flush=True)
        time.sleep(600)
    elif mode == "hold":
        if side == "sync":
            hold_sync(url, name, arg)
        else:
            asyncio.run(hold_async(url, name, arg))


if __name__ == "__main__":
    main()
