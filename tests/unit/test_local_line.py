"""The local line engines on their own (no sockets): first come, first head; a timeout or a
cancellation leaves the line and passes the turn on; ``close()`` ends every waiter; a line
goes when its last waiter leaves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from redlease._asyncio.line import AsyncLines
from redlease._threads.line import Lines
from redlease.errors import ClientClosedError

KEY = ("name", "layout")


async def _settle() -> None:
    """Let every ready task run (a bounded number of loop steps)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_tasks_become_head_in_arrival_order() -> None:
    lines = AsyncLines()
    heads: list[int] = []
    release = [asyncio.Event() for _ in range(5)]

    async def one(i: int) -> None:
        async with lines.turn(KEY, "name", None) as head:
            assert head
            heads.append(i)
            await release[i].wait()

    tasks = [asyncio.create_task(one(i)) for i in range(5)]
    await _settle()
    assert (heads, lines.waiting(KEY)) == ([0], 5)
    for i in range(5):
        release[i].set()
        await _settle()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert heads == [0, 1, 2, 3, 4]
    assert lines.waiting(KEY) == 0 and not lines.opened()  # no line left behind


async def test_a_timeout_or_a_cancellation_leaves_the_line() -> None:
    lines = AsyncLines()
    heads: list[int] = []
    go = asyncio.Event()

    async def one(i: int, timeout: float | None) -> bool:
        async with lines.turn(KEY, "name", timeout) as head:
            if head:
                heads.append(i)
                if i == 0:
                    await go.wait()
            return head

    first = asyncio.create_task(one(0, None))
    await _settle()
    timed = asyncio.create_task(one(1, 0.01))
    cancelled = asyncio.create_task(one(2, None))
    last = asyncio.create_task(one(3, None))
    assert await asyncio.wait_for(timed, 10) is False
    await _settle()
    cancelled.cancel()
    await _settle()
    assert lines.waiting(KEY) == 2  # the head and the last
    go.set()
    assert await asyncio.wait_for(last, 10) is True
    assert heads == [0, 3]
    assert first.done() and cancelled.cancelled()
    assert not lines.opened()


async def test_a_head_cancelled_as_its_turn_comes_passes_it_on() -> None:
    lines = AsyncLines()
    go = asyncio.Event()
    heads: list[int] = []

    async def one(i: int) -> None:
        async with lines.turn(KEY, "name", None):
            heads.append(i)
            if i == 0:
                await go.wait()

    tasks = [asyncio.create_task(one(i)) for i in range(3)]
    await _settle()
    go.set()
    await asyncio.sleep(0)  # the first leaves: the second's turn is set, not yet run
    tasks[1].cancel()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    assert heads == [0, 2]
    assert not lines.opened()


async def test_close_ends_the_waiters_and_refuses_newcomers() -> None:
    lines = AsyncLines()
    go = asyncio.Event()

    async def one() -> None:
        async with lines.turn(KEY, "name", None):
            await go.wait()

    tasks = [asyncio.create_task(one()) for _ in range(4)]
    await _settle()
    lines.close()
    await _settle()
    assert all(isinstance(t.exception(), ClientClosedError) for t in tasks[1:])
    go.set()
    await asyncio.wait_for(tasks[0], 10)
    assert not lines.opened()
    with pytest.raises(ClientClosedError):
        async with lines.turn(KEY, "name", None):
            pass


def _until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) for another thread to make ``condition`` true."""
    done = threading.Event()
    for _ in range(2_000):
        if condition():
            return
        done.wait(0.005)
    raise AssertionError("condition not met within 10 s")


def test_threads_become_head_in_arrival_order_and_a_timeout_leaves() -> None:
    lines = Lines()
    heads: list[int] = []
    outcomes: dict[int, bool] = {}
    release = {i: threading.Event() for i in range(4)}

    def one(i: int, timeout: float | None) -> None:
        with lines.turn(KEY, "name", timeout) as head:
            outcomes[i] = head
            if head:
                heads.append(i)
                release[i].wait(10)

    threads = []
    for i, timeout in enumerate((None, None, 0.01, None)):
        threads.append(threading.Thread(target=one, args=(i, timeout)))
        threads[-1].start()

        def arrived(i: int = i) -> bool:
            return lines.waiting(KEY) == i + 1 or i in outcomes

        _until(arrived)
    _until(lambda: outcomes.get(2) is False)
    for i in (0, 1, 3):
        release[i].set()
    for thread in threads:
        thread.join(10)
    assert heads == [0, 1, 3]
    assert not lines.opened()


def test_close_ends_the_waiting_threads() -> None:
    lines = Lines()
    go = threading.Event()
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with lines.turn(KEY, "name", None):
                go.wait(10)
        except ClientClosedError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    _until(lambda: lines.waiting(KEY) == 4)
    lines.close()
    _until(lambda: len(errors) == 3)
    go.set()
    for thread in threads:
        thread.join(10)
    assert not lines.opened()
