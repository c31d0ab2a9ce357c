"""One pub/sub connection per client, read by one asyncio task.

Callers send SUBSCRIBE themselves (asyncio writes never interleave within a command) and wait for
the reader task to see the confirmation. Channels stay subscribed for a short while after their
last waiter leaves. After a reconnect the reader re-subscribes everything and, once confirmed,
wakes every waiter to re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from typing import Any

import redis.asyncio

from .._channels import ChannelTable, Waiter, text
from .._core.backoff import full_jitter
from .._shell import CONNECTION_ERRORS, connection_source, describe, log, unavailable
from .._sync.subscriber import LINGER, SUBSCRIBE_TIMEOUT


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds.

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives just as
    the event is set (CPython gh-86296), and a cancelled waiter must stop waiting."""
    if sys.version_info >= (3, 11):
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True
    try:  # pragma: no cover - Python 3.10
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True


async def wait(waiter: Waiter, timeout: float) -> bool:
    """Wait until ``waiter`` is woken or ``timeout`` passes; consume the wake-up."""
    woken = await wait_event(waiter.event, timeout)
    waiter.event.clear()
    return woken


class Subscriber:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._source = connection_source(client)
        self.address = describe(client)
        self._table = ChannelTable(asyncio.Event)
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._last_error: BaseException | None = None

    async def subscribe(self, channel: str, owner: str, *, name: str | None = None) -> Waiter:
        """Register ``owner`` as a waiter on ``channel``; return once the server confirmed it."""
        if self._closed:
            raise RuntimeError("redlease client is closed")
        self._ensure_task()
        waiter = Waiter(channel, owner, asyncio.Event())
        entry, new = self._table.add(waiter)
        try:
            if new:
                await self._send("SUBSCRIBE", channel)
            confirmed = await wait_event(entry.confirmed, SUBSCRIBE_TIMEOUT)
        except BaseException:
            self.unsubscribe(waiter)
            raise
        if not confirmed:
            self.unsubscribe(waiter)
            why = self._last_error or TimeoutError("subscription not confirmed")
            raise unavailable(why, self.address, name)
        return waiter

    def listen_if_live(self, channel: str, owner: str) -> Waiter | None:
        """A waiter on ``channel`` if this connection already listens there, else ``None``."""
        waiter = Waiter(channel, owner, asyncio.Event())
        return waiter if self._table.add_if_live(waiter) else None

    def unsubscribe(self, waiter: Waiter) -> None:
        self._table.remove(waiter, time.monotonic())
        if not self._table.waiting(waiter.channel):
            loop = asyncio.get_running_loop()
            loop.call_later(LINGER, lambda: loop.create_task(self._drop_idle()))

    def waiting(self, channel: str) -> int:
        return self._table.waiting(channel)

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
                conn = self._conn
                push = {"push_request": True} if str(getattr(conn, "protocol", 2)) == "3" else {}
                # never cancelled mid-reply (that would tear the connection down)
                message = await conn.read_response(**push)
                kind, channel = text(message[0]), text(message[1])
                if kind == "message":
                    self._table.on_message(channel, text(message[2]))
                elif kind == "subscribe":
                    self._table.on_subscribed(channel)
            except CONNECTION_ERRORS as exc:
                failures += 1
                self._last_error = exc
                log.debug("subscriber connection to %s failed: %s", self.address, exc)
                await self._disconnect()
                await asyncio.sleep(full_jitter(failures, base=0.05, cap=2.0, random=random.random))

    async def _connect(self) -> None:
        connection_class, kwargs, self.address = self._source()
        conn = connection_class(**kwargs)
        await conn.connect()
        self._conn = conn
        self._last_error = None
        for channel in self._table.resubscribe():
            await conn.send_command("SUBSCRIBE", channel)

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        self._table.disconnected()
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect()

    async def _drop_idle(self) -> None:
        if self._closed:
            return
        # a little slack: call_later may fire a hair before LINGER by the monotonic clock
        for channel in self._table.drop_idle(time.monotonic() + 0.05, LINGER):
            await self._send("UNSUBSCRIBE", channel)
