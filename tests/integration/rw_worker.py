"""A reader in a process of its own: ``python rw_worker.py SIDE URL NAME WATCHDOG``.

Takes the read lock of NAME (lease renewed by the watchdog), prints "held", then sleeps until
killed.
"""

from __future__ import annotations

import asyncio
import sys
import time

import redlease
from redlease._async.rwlock import AsyncReadWriteLock
from redlease._sync.rwlock import ReadWriteLock


def hold_sync(url: str, name: str, watchdog: float) -> None:
    client = redlease.Client.from_url(url, watchdog_timeout=watchdog)
    assert ReadWriteLock(client, name).read_lock().acquire(timeout=10)
    print("held", flush=True)
    time.sleep(600)


async def hold_async(url: str, name: str, watchdog: float) -> None:
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog)
    assert await AsyncReadWriteLock(client, name).read_lock().acquire(timeout=10)
    print("held", flush=True)
    await asyncio.sleep(600)


def main() -> None:
    side, url, name, watchdog = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if side == "sync":
        hold_sync(url, name, watchdog)
    else:
        asyncio.run(hold_async(url, name, watchdog))


if __name__ == "__main__":
    main()
