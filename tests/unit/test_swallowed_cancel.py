"""A cancellation that ``asyncio.wait_for`` swallows inside redis-py is raised all the same.

redis-py writes each command in ``asyncio.wait_for`` when a socket timeout is set. On Python
3.10 and 3.11 ``wait_for`` returns the inner result and drops the caller's cancellation when
both come in the same turn of the loop (CPython gh-86296): a task cancelled in
``election.observe()`` went on observing (seen in CI; on 3.10 the guard itself was missing,
as 3.10 has no ``Task.cancelling()``). ``cancellable`` raises such a cancellation once the
call returns. These tests make that turn happen on purpose, with asyncio's own ``wait_for``,
on every version (``async_timeout`` stands for ``asyncio.timeout`` on 3.10, as in
redis-py)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from redlease._asyncio.cancel import cancellable, within
from redlease._asyncio.compat import wait_event

if sys.version_info >= (3, 11):
    from asyncio import timeout
else:  # pragma: no cover - Python 3.10
    from async_timeout import timeout


async def _racing(guarded: bool) -> tuple[asyncio.Task[str], asyncio.Future[str]]:
    """A task awaiting a future through ``wait_for`` (as redis-py writes), cancelled in the very
    turn the future completes."""
    written: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def redis_py_write() -> str:
        return await asyncio.wait_for(written, 10)

    async def caller() -> str:
        call = redis_py_write()
        return await (cancellable(call) if guarded else call)

    task = asyncio.ensure_future(caller())
    for _ in range(5):  # let it reach wait_for's inner wait
        await asyncio.sleep(0)
    written.set_result("OK")
    task.cancel()
    return task, written


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the cancellation on 3.12+")
async def test_wait_for_swallows_a_cancellation_before_312():
    """The bug the guard is for (if this starts failing, Python fixed it: the guard stays
    harmless)."""
    task, _ = await _racing(guarded=False)
    assert await task == "OK"  # the cancellation is gone
    if sys.version_info >= (3, 11):
        assert task.cancelling() == 1  # yet still counted on the task (3.10 counts nothing)


async def test_a_swallowed_cancellation_is_raised():
    task, _ = await _racing(guarded=True)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_no_cancellation_no_change():
    """A call nobody cancels returns its result; a cancellation the call handles itself (a
    timeout of its own, which takes its cancellation back) is not raised."""

    async def answer() -> str:
        await asyncio.sleep(0)
        return "OK"

    assert await cancellable(answer()) == "OK"

    async def times_out_inside() -> str:
        try:
            async with timeout(0.01):
                await asyncio.sleep(10)
        except asyncio.TimeoutError:
            return "OK"
        return "not timed out"

    assert await cancellable(times_out_inside()) == "OK"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.uncancel() is new in 3.11")
async def test_a_cancellation_taken_back_is_not_raised():
    async def taken_back() -> str:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            if sys.version_info >= (3, 11):  # always (the skipif); mypy checks as Python 3.10
                task.uncancel()
        return "OK"

    assert await cancellable(taken_back()) == "OK"


async def test_a_timeout_around_the_call_still_times_out():
    """A timeout cancels the task when it expires: when ``wait_for`` swallows that
    cancellation the guard raises it, and the timeout turns it into ``TimeoutError``."""
    written: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def redis_py_write() -> str:
        return await asyncio.wait_for(written, 10)

    async def caller() -> str:
        async with timeout(0.01):
            result = await cancellable(redis_py_write())
            await asyncio.sleep(10)  # only reached if the timeout were lost
            return result

    task = asyncio.ensure_future(caller())
    loop = asyncio.get_running_loop()

    def write_back() -> None:
        if not written.done():
            written.set_result("OK")

    loop.call_later(0.01, write_back)
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done, "the timeout was lost"
    with pytest.raises(asyncio.TimeoutError):
        task.result()


async def test_a_timeout_in_the_very_turn_the_write_ends_still_times_out():
    """The timeout expires in the very turn ``wait_for``'s write completes (the swallow made
    to happen, not left to the clock)."""
    written: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    inside = asyncio.Event()

    async def redis_py_write() -> str:
        inside.set()
        return await asyncio.wait_for(written, 10)

    async def caller() -> str:
        async with timeout(10) as expiry:
            expiries.append(expiry)
            result = await cancellable(redis_py_write())
            await asyncio.sleep(10)  # only reached if the timeout were lost
            return result

    expiries: list[object] = []
    task = asyncio.ensure_future(caller())
    await inside.wait()
    for _ in range(5):  # let it reach wait_for's inner wait
        await asyncio.sleep(0)
    written.set_result("OK")
    expiry = expiries[0]
    if sys.version_info >= (3, 11):  # expires now: next turn, with the write's wake-up
        expiry.reschedule(-1)  # type: ignore[attr-defined]
    else:  # pragma: no cover - Python 3.10: its update() would move it to this task
        loop = asyncio.get_running_loop()
        loop.call_soon(expiry._on_timeout)  # type: ignore[attr-defined]
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done, "the timeout was lost"
    with pytest.raises(asyncio.TimeoutError):
        task.result()


async def test_a_call_that_fails_after_a_swallowed_cancellation_raises_the_cancellation():
    """The caller was cancelled: that comes before the call's own error (a connection error
    raised after ``wait_for`` dropped the cancellation)."""
    written: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def write_then_fail() -> str:
        await asyncio.wait_for(written, 10)
        raise ConnectionError("the reply never came")

    task = asyncio.ensure_future(cancellable(write_then_fail()))
    for _ in range(5):
        await asyncio.sleep(0)
    written.set_result("OK")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_a_timed_wait_cancelled_as_it_ends_raises_the_cancellation(turns):
    """``within`` (and ``wait_event`` on it), the engine's timed waits, cancelled in the turn
    the awaited event is set or up to three turns later: a cancellation that reaches the
    waiter (``cancel()`` returns True) is raised. With ``asyncio.wait_for`` on Python 3.10 the
    wait returned True for 0, 1 and 2 turns (a cancelled fair waiter stayed in line)."""
    event = asyncio.Event()
    task = asyncio.ensure_future(wait_event(event, 10))
    for _ in range(5):  # let it reach its wait
        await asyncio.sleep(0)
    event.set()
    for _ in range(turns):
        await asyncio.sleep(0)
    if task.cancel():
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        assert await task is True  # it had returned before the cancellation


async def test_a_timed_wait_returns_the_result_or_times_out():
    async def answer() -> str:
        await asyncio.sleep(0)
        return "OK"

    assert await within(answer(), 5) == "OK"
    assert await within(answer(), None) == "OK"
    started = asyncio.Event()

    async def never() -> None:
        started.set()
        await asyncio.Event().wait()

    waiting = asyncio.ensure_future(never())
    with pytest.raises(asyncio.TimeoutError):
        await within(waiting, 0.01)
    assert started.is_set() and waiting.cancelled()  # stopped, as wait_for stops it
    assert await wait_event(asyncio.Event(), 0.01) is False


async def test_a_cancelled_timed_wait_stops_what_it_waited_for():
    waiting = asyncio.ensure_future(asyncio.Event().wait())
    task = asyncio.ensure_future(within(waiting, 10))
    for _ in range(5):
        await asyncio.sleep(0)
    assert task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiting.cancelled()
