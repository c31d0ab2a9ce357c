"""``@client.exclusive(..., on_busy=...)`` and ``redlease.exclusive(..., client=...)`` (issue #25,
section 3), on a real server, each test on the sync and asyncio side: ``"skip"`` returns
``None`` without running (a ``skipped`` event, an INFO log line), ``"raise"`` raises
``LockTimeoutError`` at once, ``"wait"`` waits up to ``timeout``; a module-level ``exclusive``
finds its client when called, so the client may be made after the decoration.

A taken lock below stays taken (a watchdog-renewed hold) until the test releases it: a call
that waited for it instead of skipping or raising would never return."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import redlease
from redlease import ArgumentTypeError, InvalidArgumentError, LockEvent, LockTimeoutError
from redlease.testing import RedisServer


def job(side: Any, decorator: Callable[[Any], Any], runs: list[Any]) -> Callable[..., Any]:
    """A function ``order(order_id)`` (a coroutine function on the asyncio side) decorated by
    ``decorator``: it records its call in ``runs`` and returns its argument."""
    order: Callable[[int], Any]  # a coroutine function on the asyncio side
    if side.is_async:

        async def order(order_id: int) -> int:
            await asyncio.sleep(0)
            runs.append(order_id)
            return order_id

    else:

        def order(order_id: int) -> int:
            runs.append(order_id)
            return order_id

    return decorator(order)


async def taken(side: Any, url: str, name: str) -> Any:
    holder = side.client(url).lock(name)
    assert await side(holder.acquire())
    return holder


async def test_on_busy_skip_returns_none_without_running(
    side: Any, server: RedisServer, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = side.client(server.url)
    events: list[LockEvent] = []
    client.add_listener(events.append)
    runs: list[int] = []
    order = job(side, client.exclusive(name + ":{order_id}", on_busy="skip"), runs)
    assert order.__name__ == "order"
    assert await side(order(1)) == 1  # free: runs
    holder = await taken(side, server.url, f"{name}:2")
    with caplog.at_level(logging.INFO, logger="redlease"):
        assert await side(order(2)) is None  # busy: skipped at once
    assert runs == [1]
    skips = [e for e in events if e.kind == "skipped"]
    assert [(e.name, e.owner) for e in skips] == [(f"{name}:2", client._owner())]
    assert skips[0].wait is not None and skips[0].wait >= 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("skipped" in m and f"{name}:2" in m for m in messages), messages
    await side(holder.release())
    assert await side(order(2)) == 2
    assert runs == [1, 2]
    assert not await side(client.lock(f"{name}:2").locked())


async def test_on_busy_skip_is_counted_by_the_metrics(
    side: Any, server: RedisServer, name: str
) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from redlease.metrics import PrometheusMetrics

    registry = prometheus_client.CollectorRegistry()
    client = side.client(server.url)
    client.add_listener(PrometheusMetrics(registry=registry, per_lock=True))
    order = job(side, client.exclusive(name, on_busy="skip"), [])
    holder = await taken(side, server.url, name)
    assert await side(order(1)) is None
    assert await side(order(2)) is None
    assert registry.get_sample_value("redlease_skipped_runs_total", {"lock": name}) == 2
    await side(holder.release())


async def test_on_busy_raise_raises_at_once(side: Any, server: RedisServer, name: str) -> None:
    client = side.client(server.url)
    runs: list[int] = []
    order = job(side, client.exclusive(name, on_busy="raise"), runs)
    assert await side(order(1)) == 1
    holder = await taken(side, server.url, name)
    with pytest.raises(LockTimeoutError) as info:
        await side(order(2))
    assert info.value.name == name and "single try" in str(info.value)
    await side(holder.release())
    assert runs == [1]


async def test_on_busy_wait_waits_up_to_timeout(side: Any, server: RedisServer, name: str) -> None:
    client = side.client(server.url)
    runs: list[int] = []
    order = job(side, client.exclusive(name, timeout=0.2), runs)  # on_busy="wait", the default
    waiting = job(side, client.exclusive(name, on_busy="wait", timeout=60), runs)
    holder = await taken(side, server.url, name)
    with pytest.raises(LockTimeoutError, match=r"within 0\.2 s"):
        await side(order(1))
    assert runs == []
    # a waiting call is woken when the holder lets go
    if side.is_async:
        call = asyncio.ensure_future(waiting(2))
    else:
        done: list[Any] = []
        thread = threading.Thread(target=lambda: done.append(waiting(2)), daemon=True)
        thread.start()
    stats = client.lock(name).statistics
    for _ in range(1000):  # bounded: until the call waits in line
        if (await side(stats())).local_waiters:
            break
        await asyncio.sleep(0.01)
    await side(holder.release())
    if side.is_async:
        assert await asyncio.wait_for(call, 60) == 2
    else:
        await asyncio.to_thread(thread.join, 60)
        assert done == [2]
    assert runs == [2]


async def test_skip_after_waiting_its_timeout(side: Any, server: RedisServer, name: str) -> None:
    """``on_busy="skip"`` with a ``timeout``: skip if still busy after it."""
    client = side.client(server.url)
    runs: list[int] = []
    order = job(side, client.exclusive(name, on_busy="skip", timeout=0.1), runs)
    holder = await taken(side, server.url, name)
    assert await side(order(1)) is None
    await side(holder.release())
    assert await side(order(2)) == 2
    assert runs == [2]


async def test_an_error_in_the_function_is_not_a_skip(
    side: Any, server: RedisServer, name: str
) -> None:
    """A ``LockTimeoutError`` raised by the function itself goes to the caller, and the lock
    is released."""
    client = side.client(server.url)

    def boom(_: int) -> int:
        raise LockTimeoutError("the function's own", name="other")

    if side.is_async:

        @client.exclusive(name, on_busy="skip")
        async def fails(n: int) -> int:
            return boom(n)

    else:

        @client.exclusive(name, on_busy="skip")
        def fails(n: int) -> int:
            return boom(n)

    with pytest.raises(LockTimeoutError, match="the function's own"):
        await side(fails(1))
    assert not await side(client.lock(name).locked())


async def test_bad_decorations_are_refused(side: Any, server: RedisServer, name: str) -> None:
    client = side.client(server.url)
    for bad in ("Skip", "retry", None, 409):
        with pytest.raises(InvalidArgumentError, match="on_busy"):
            client.exclusive(name, on_busy=bad)
        with pytest.raises(InvalidArgumentError, match="on_busy"):
            redlease.exclusive(name, client=client, on_busy=bad)  # type: ignore[call-overload]  # wrong on purpose
    with pytest.raises(InvalidArgumentError, match="timeout"):
        client.exclusive(name, timeout=-1)
    with pytest.raises(InvalidArgumentError, match="lease"):
        client.exclusive(name, lease=0)

    def gen() -> Any:
        yield 1

    async def agen() -> Any:
        yield 1

    for fn in (gen, agen):
        with pytest.raises(InvalidArgumentError, match="generator"):
            redlease.exclusive(name, client=client)(fn)
    with pytest.raises(InvalidArgumentError, match="generator"):
        client.exclusive(name)(agen if side.is_async else gen)


async def test_a_client_made_after_the_decoration(side: Any, server: RedisServer, name: str):
    """``redlease.exclusive(..., client=callable)``: the callable is called at each call, so a
    function decorated at import time runs on the client made at startup (and a new one after
    a restart of the app)."""

    class State:
        client: Any = None

    state = State()
    runs: list[int] = []
    order = job(side, redlease.exclusive(name + ":{order_id}", client=lambda: state.client), runs)
    assert order.__name__ == "order"
    with pytest.raises(ArgumentTypeError, match="returned None"):
        await side(order(1))
    state.client = side.client(server.url)  # startup
    assert await side(order(1)) == 1
    holder = await taken(side, server.url, f"{name}:2")
    skipping = job(
        side,
        redlease.exclusive(name + ":{order_id}", client=lambda: state.client, on_busy="skip"),
        runs,
    )
    assert await side(skipping(2)) is None
    direct = redlease.exclusive(name + ":{order_id}", client=state.client, timeout=0)
    with pytest.raises(LockTimeoutError):  # a client itself, not a callable
        await side(job(side, direct, runs)(2))
    await side(holder.release())
    await side(state.client.close())
    state.client = side.client(server.url)  # a new app, a new client
    assert await side(skipping(2)) == 2
    assert runs == [1, 2]


async def test_the_client_must_match_the_function(side: Any, server: RedisServer, name: str):
    """A coroutine function needs an ``AsyncClient``, a plain one a ``Client``: the wrong
    one is a clear ``ArgumentTypeError`` at the call (the client is only known then)."""
    other_side = redlease.Client if side.is_async else redlease.AsyncClient
    wrong: Any = other_side.from_url(server.url)  # a client of the other side
    order = job(side, redlease.exclusive(name, client=lambda: wrong), [])
    expected = "AsyncClient" if side.is_async else "needs a Client"
    with pytest.raises(ArgumentTypeError, match=expected):
        await side(order(1))
    with pytest.raises(ArgumentTypeError, match="got str"):
        not_a_client = redlease.exclusive(name, client=lambda: "redis://")  # type: ignore[arg-type,return-value]  # wrong on purpose
        await side(job(side, not_a_client, [])(1))
    if side.is_async:
        wrong.close()
    else:
        await wrong.close()


def test_locked_is_the_former_name_of_exclusive() -> None:
    # ``locked`` is the query (``Lock.locked()``): the decorator's former name is gone from
    # the clients, and redlease.locked says what it is called now
    assert not hasattr(redlease.Client, "locked") and not hasattr(redlease.AsyncClient, "locked")
    with pytest.raises(AttributeError, match=r"redlease\.locked was renamed redlease\.exclusive"):
        redlease.locked  # noqa: B018
    with pytest.raises(ImportError):
        from redlease import locked  # noqa: F401
    assert "locked" not in redlease.__all__ and "exclusive" in redlease.__all__
