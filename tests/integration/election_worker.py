"""A candidate of a leader election in a process of its own (tests and benchmarks/election.py).

    python election_worker.py SIDE URL NAME LEASE IDENTITY

It campaigns as long as it lives: each time it leads it prints ``leading <token> <t>``, keeps
leading until the leadership is lost, prints ``lost <t>`` and campaigns again (``<t>`` is
``time.monotonic()``, one clock for every process of a Linux machine). The asyncio side leads
in a task with ``cancel_on_loss=True`` (the block ends with ``LeaseLostError``). Prints
``ready`` first. Stopped, paused and killed by its parent, by PID.
"""

from __future__ import annotations

import asyncio
import sys
import time

import redlease


def say(*words: object) -> None:
    print(*words, flush=True)


def run_sync(url: str, name: str, lease: float, identity: str) -> None:
    client = redlease.Client.from_url(url, watchdog_timeout=lease)
    election = client.election(name, identity=identity)
    say("ready")
    while True:
        try:
            with election.leadership() as term:
                say("leading", term.token, time.monotonic())
                term.lost.wait()  # lead (the work would go here) until the leadership is lost
                say("lost", time.monotonic())
        except redlease.LeaseLostError:
            pass  # and campaign again


async def run_async(url: str, name: str, lease: float, identity: str) -> None:
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=lease)
    election = client.election(name, identity=identity)
    say("ready")
    while True:
        try:
            async with election.leadership(cancel_on_loss=True) as term:
                say("leading", term.token, time.monotonic())
                await asyncio.Event().wait()  # lead until cancelled by the loss
        except redlease.LeaseLostError:
            say("lost", time.monotonic())


def main() -> None:
    side, url, name, lease, identity = sys.argv[1:6]
    if side == "sync":
        run_sync(url, name, float(lease), identity)
    else:
        asyncio.run(run_async(url, name, float(lease), identity))


if __name__ == "__main__":
    main()
