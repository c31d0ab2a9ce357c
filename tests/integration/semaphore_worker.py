"""A separate process for crash tests: ``python semaphore_worker.py MODE SIDE URL NAME WATCHDOG``.

lease-hold: take one permit of a lease semaphore (renewed lease), print "held", sleep until
            killed.
"""

from __future__ import annotations

import asyncio
import sys
import time

import redlease
from redlease._async.semaphore import AsyncLeaseSemaphore
from redlease._sync.semaphore import LeaseSemaphore


def hold_sync(url: str, name: str, watchdog: float) -> None:
    client = redlease.Client.from_url(url, watchdog_timeout=watchdog)
    permit = LeaseSemaphore(client, name).acquire(timeout=10)
    print("held" if permit else "timeout", flush=True)
    time.sleep(600)


async def hold_async(url: str, name: str, watchdog: float) -> None:
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog)
    permit = await AsyncLeaseSemaphore(client, name).acquire(timeout=10)
    print("held" if permit else "timeout", flush=True)
    await asyncio.sleep(600)


def main() -> None:
    mode, side, url, name, watchdog = sys.argv[1:6]
    if mode == "lease-hold":
        if side == "sync":
            hold_sync(url, name, float(watchdog))
        else:
            asyncio.run(hold_async(url, name, float(watchdog)))


if __name__ == "__main__":
    main()
