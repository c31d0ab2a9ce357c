"""Waiting helpers: bounded waits on a condition, never a bare sleep for correctness; the
counter that shows whether a lock excludes its threads or tasks."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import redis
import redis.asyncio


def reply_int(reply: object) -> int:
    """A raw client's reply that the test expects to be a number (a key or field that exists,
    a score)."""
    assert isinstance(reply, bytes | str | int | float), reply
    return int(reply)


def reply_bytes(reply: object) -> bytes:
    """A raw client's reply that the test expects in bytes (no decode_responses)."""
    assert isinstance(reply, bytes), reply
    return reply


def reply_str(reply: object) -> str:
    """A raw client's reply that the test expects decoded (decode_responses=True)."""
    assert isinstance(reply, str), reply
    return reply


def reply_scores(reply: object) -> list[tuple[bytes, float]]:
    """A raw client's reply WITHSCORES that the test expects in bytes (no decode_responses)."""
    assert isinstance(reply, list), reply
    for member, score in reply:
        assert isinstance(member, bytes) and isinstance(score, float), reply
    return reply


def reply_str_scores(reply: object) -> list[tuple[str, float]]:
    """A raw client's reply WITHSCORES that the test expects decoded (decode_responses=True)."""
    assert isinstance(reply, list), reply
    for member, score in reply:
        assert isinstance(member, str) and isinstance(score, float), reply
    return reply


def reply_strs(reply: Iterable[object]) -> list[str]:
    """A raw client's list reply that the test expects decoded (decode_responses=True)."""
    return [reply_str(item) for item in reply]


def reply_str_hash(reply: Mapping[Any, object]) -> dict[str, str]:
    """A raw client's hash reply (HGETALL) that the test expects decoded."""
    return {reply_str(k): reply_str(v) for k, v in reply.items()}


async def eventually(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` (sync or async) is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)


def ttl_rises(raw: Any, key: str) -> Callable[[], bool]:
    """A condition that turns true each time ``key``'s TTL went up (a renewal) since it was
    last asked (first: since this call): a watchdog renewing a lease, told apart from a lease
    merely running down."""
    last = [reply_int(raw.pttl(key))]

    def check() -> bool:
        ttl = reply_int(raw.pttl(key))
        up, last[0] = ttl > last[0], ttl
        return up

    return check


async def renewed(raw: Any, key: str, times: int = 2, timeout: float = 30.0) -> bool:
    """Whether ``key``'s TTL went back up ``times`` times within ``timeout`` seconds (polled
    every 0.1 s, ``ttl_rises``)."""
    rose = ttl_rises(raw, key)
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < times and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        seen += rose()
    return seen >= times


def run_forked(child: Callable[[], bool], timeout: float = 20.0) -> int:
    """Run ``child()`` in a forked child; its exit code (0: it returned True, 2: False, 1: it
    raised), or -1 when it had not finished within ``timeout`` seconds (it is then killed, by
    its PID)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            code = 0 if child() else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


@contextlib.contextmanager
def held_by_another_thread(*locks: Any) -> Iterator[None]:
    """Another thread holds ``locks`` until the block ends (as the watchdog or an acquiring
    thread does for a moment, at the worst time for a fork)."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    try:
        yield
    finally:
        done.set()
        thread.join(10)


def count_in_threads(url: str, counter: str, lock: Any, *, threads: int, rounds: int) -> int:
    """``threads`` threads each take ``lock`` (``with lock:``) ``rounds`` times and, under it,
    read the ``counter`` key and write it back one more (a lost update shows when two hold at
    once); returns how many times two threads were inside at once (0 under a working lock).
    The test checks the counter: ``threads * rounds``."""
    raw = redis.Redis.from_url(url)
    inside = overlaps = 0

    def work() -> None:
        nonlocal inside, overlaps
        for _ in range(rounds):
            with lock:
                inside += 1
                overlaps += inside > 1
                value = int(raw.get(counter) or 0)
                raw.set(counter, value + 1)
                inside -= 1

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    raw.close()
    return overlaps


async def count_in_tasks(url: str, counter: str, lock: Any, *, tasks: int, rounds: int) -> int:
    """``count_in_threads`` with asyncio tasks (``async with lock:``)."""
    raw = redis.asyncio.Redis.from_url(url)
    inside = overlaps = 0

    async def work() -> None:
        nonlocal inside, overlaps
        for _ in range(rounds):
            async with lock:
                inside += 1
                overlaps += inside > 1
                value = int(await raw.get(counter) or 0)
                await raw.set(counter, value + 1)
                inside -= 1

    await asyncio.wait_for(asyncio.gather(*(work() for _ in range(tasks))), 120)
    await raw.aclose()
    return overlaps


def counted(url: str, counter: str) -> int:
    """The ``counter`` key's value (0 when absent)."""
    raw = redis.Redis.from_url(url)
    try:
        return int(raw.get(counter) or 0)
    finally:
        raw.close()


async def in_owner(side: Any, body: Callable[[], Any]) -> Any:
    """Run ``body`` (a coroutine function on the asyncio side, else a plain one) as an owner
    of its own: a task, or a thread."""
    if side.is_async:
        return await asyncio.create_task(body())
    return await asyncio.to_thread(body)


def owner_body(side: Any, lock: Any, **acquire: Any) -> Callable[[], Any]:
    """Acquire ``lock`` (``acquire``'s arguments), note the token, release: as one owner."""
    if side.is_async:

        async def run_async() -> tuple[bool, int | None]:
            got = await lock.acquire(**acquire)
            token = lock.fencing_token
            if got:
                await lock.release()
            return got, token

        return run_async

    def run() -> tuple[bool, int | None]:
        got = lock.acquire(**acquire)
        token = lock.fencing_token
        if got:
            lock.release()
        return got, token

    return run
