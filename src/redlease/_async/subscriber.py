"""One pub/sub connection per client, read by one asyncio task.

Callers send SUBSCRIBE themselves (asyncio writes never interleave within a command) and wait for
the reader task to see the confirmation. Channels stay subscribed for a short while after their
last waiter leaves. After a reconnect the reader re-subscribes everything and, once confirmed,
wakes every waiter to re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import redis.asyncio

from .._shell import CONNECTION_ERRORS, address_of, log, subscriber_kwargs, unavailable

LINGER = 5.0
SUBSCRIBE_TIMEOUT = 10.0


class Waiter:
    """One waiting task's wake-up flag."""

    __slots__ = ("channel", "event")

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
            woken = True
        except asyncio.TimeoutError:
            woken = False
        self.event.clear()
        return woken


class _Channel:
    __slots__ = ("confirmed", "idle_since", "rewake", "waiters")

    def __init__(self) -> None:
        self.waiters: set[Waiter] = set()
        self.confirmed = asyncio.Event()
        self.idle_since: float | None = None
        self.rewake = False


class Subscriber:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        pool = client.connection_pool
        kwargs = subscriber_kwargs(pool.connection_kwargs)
        self._connection_class = pool.connection_class
        self._kwargs = kwargs
        self.address = address_of(kwargs)
        self._channels: dict[str, _Channel] = {}
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def subscribe(self, channel: str, *, name: str | None = None) -> Waiter:
        """Register a waiter on ``channel`` and return once the server confirmed it."""
        if self._closed:
            raise RuntimeError("redlease client is closed")
        self._ensure_task()
        waiter = Waiter(channel)
        entry = self._channels.get(channel)
        if entry is None:
            entry = self._channels[channel] = _Channel()
            if self._conn is not None:
                await self._send("SUBSCRIBE", channel)
        entry.waiters.add(waiter)
        entry.idle_since = None
        try:
            await asyncio.wait_for(entry.confirmed.wait(), SUBSCRIBE_TIMEOUT)
        except asyncio.TimeoutError:
            self.unsubscribe(waiter)
            raise unavailable(
                TimeoutError("subscription not confirmed"), self.address, name
            ) from None
        except BaseException:
            self.unsubscribe(waiter)
            raise
        return waiter

    def unsubscribe(self, waiter: Waiter) -> None:
        entry = self._channels.get(waiter.channel)
        if entry is not None:
            entry.waiters.discard(waiter)
            if not entry.waiters:
                entry.idle_since = time.monotonic()
                loop = asyncio.get_running_loop()
                loop.call_later(LINGER, lambda: loop.create_task(self._drop_idle()))

    def waiting(self, channel: str) -> int:
        entry = self._channels.get(channel)
        return len(entry.waiters) if entry else 0

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self._disconnect()

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="redlease-subscriber"
            )

    async def _send(self, *args: str) -> None:
        conn = self._conn
        if conn is None:
            return  # the reader sends every subscription when it (re)connects
        try:
            await conn.send_command(*args)
        except CONNECTION_ERRORS as exc:
            log.debug("subscriber send to %s failed: %s", self.address, exc)

    async def _run(self) -> None:
        failures = 0
        while not self._closed:
            try:
                if self._conn is None:
                    await self._connect()
                    failures = 0
                # never cancelled mid-reply (that would tear the connection down)
                self._dispatch(await self._conn.read_response())
            except CONNECTION_ERRORS as exc:
                failures += 1
                log.debug("subscriber connection to %s failed: %s", self.address, exc)
                await self._disconnect()
                await asyncio.sleep(min(1.0, 0.05 * 2**failures))

    async def _connect(self) -> None:
        conn = self._connection_class(**self._kwargs)
        await conn.connect()  # type: ignore[no-untyped-call]
        self._conn = conn
        for ch in [ch for ch, entry in self._channels.items() if not entry.waiters]:
            del self._channels[ch]
        for ch, entry in self._channels.items():
            entry.rewake = True
            await conn.send_command("SUBSCRIBE", ch)

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        for entry in self._channels.values():
            entry.confirmed.clear()
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect()

    async def _drop_idle(self) -> None:
        if self._closed:
            return
        now = time.monotonic()
        idle = [
            ch
            for ch, entry in self._channels.items()
            if entry.idle_since is not None and now - entry.idle_since >= LINGER - 0.05
        ]
        for ch in idle:
            del self._channels[ch]
            await self._send("UNSUBSCRIBE", ch)

    def _dispatch(self, message: Any) -> None:
        kind = _text(message[0])
        entry = self._channels.get(_text(message[1]))
        if entry is None:
            return
        if kind == "subscribe":
            entry.confirmed.set()
            if entry.rewake:
                entry.rewake = False
                for waiter in entry.waiters:
                    waiter.event.set()
        elif kind == "message":
            for waiter in entry.waiters:
                waiter.event.set()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
