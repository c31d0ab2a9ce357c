"""A lock holder in a process of its own, driven line by line on stdin, for fault tests.

    python holder.py SIDE LOCK_URL NAME WATCHDOG [RESOURCE_URL]

SIDE is ``sync`` or ``async``. It prints ``ready``, then answers each command with one line:

    acquire             held <fencing token>        (waits as long as it takes)
    read KEY            value <value, or - when missing>      (on the resource server)
    write KEY VALUE     ok                          (plain SET: no fencing)
    fenced KEY VALUE    ok | stale                  (fenced_set with the hold's token)
    release             released | lost | notowned
    told                told | untold               (whether on_lease_lost ran)
    exit

Any other failure answers ``error <ExceptionType>``. The test pauses, kills or cuts this
process; it never needs to sleep to wait for it, since every answer is a line to wait for.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import redis
import redis.asyncio

import redlease


def _answer(text: str) -> None:
    print(text, flush=True)


def run_sync(url: str, name: str, watchdog: float, resource_url: str) -> None:
    told = threading.Event()
    client = redlease.Client.from_url(url, watchdog_timeout=watchdog, socket_timeout=5)
    resource = redlease.Client.from_url(resource_url)
    raw = redis.Redis.from_url(resource_url, decode_responses=True)
    lock = client.lock(name, on_lease_lost=lambda _e: told.set())
    token = 0
    _answer("ready")
    for line in sys.stdin:
        cmd, *args = line.split()
        try:
            if cmd == "acquire":
                lock.acquire()
                token = lock.fencing_token or 0
                _answer(f"held {token}")
            elif cmd == "read":
                value = raw.get(args[0])
                assert not isinstance(value, bytes)  # decode_responses
                _answer(f"value {value or '-'}")
            elif cmd == "write":
                raw.set(args[0], args[1])
                _answer("ok")
            elif cmd == "fenced":
                try:
                    resource.fenced_set(args[0], args[1], token)
                    _answer("ok")
                except redlease.StaleTokenError:
                    _answer("stale")
            elif cmd == "release":
                _answer(_release(lock.release))
            elif cmd == "told":
                _answer("told" if told.is_set() else "untold")
            elif cmd == "exit":
                break
            else:
                _answer(f"error unknown command {cmd!r}")
        except Exception as exc:
            _answer(f"error {type(exc).__name__}")
    client.close()
    resource.close()
    raw.close()


def _release(release: Any) -> str:
    try:
        release()
    except redlease.LeaseLostError:
        return "lost"
    except redlease.NotOwnedError:
        return "notowned"
    return "released"


async def run_async(url: str, name: str, watchdog: float, resource_url: str) -> None:
    told = threading.Event()
    client = redlease.AsyncClient.from_url(url, watchdog_timeout=watchdog, socket_timeout=5)
    resource = redlease.AsyncClient.from_url(resource_url)
    raw = redis.asyncio.Redis.from_url(resource_url, decode_responses=True)
    lock = client.lock(name, on_lease_lost=lambda _e: told.set())
    token = 0
    _answer("ready")
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        cmd, *args = line.split()
        try:
            if cmd == "acquire":
                await lock.acquire()
                token = lock.fencing_token or 0
                _answer(f"held {token}")
            elif cmd == "read":
                value = await raw.get(args[0])
                assert not isinstance(value, bytes)  # decode_responses
                _answer(f"value {value or '-'}")
            elif cmd == "write":
                await raw.set(args[0], args[1])
                _answer("ok")
            elif cmd == "fenced":
                try:
                    await resource.fenced_set(args[0], args[1], token)
                    _answer("ok")
                except redlease.StaleTokenError:
                    _answer("stale")
            elif cmd == "release":
                try:
                    await lock.release()
                    _answer("released")
                except redlease.LeaseLostError:
                    _answer("lost")
                except redlease.NotOwnedError:
                    _answer("notowned")
            elif cmd == "told":
                _answer("told" if told.is_set() else "untold")
            elif cmd == "exit":
                break
            else:
                _answer(f"error unknown command {cmd!r}")
        except Exception as exc:
            _answer(f"error {type(exc).__name__}")
    await client.close()
    await resource.close()
    await raw.aclose()


def main() -> None:
    side, url, name, watchdog = sys.argv[1:5]
    resource_url = sys.argv[5] if len(sys.argv) > 5 else url
    if side == "sync":
        run_sync(url, name, float(watchdog), resource_url)
    else:
        asyncio.run(run_async(url, name, float(watchdog), resource_url))


if __name__ == "__main__":
    main()
