"""A client's pub/sub connections, each read by an asyncio task of its own.

Classic pub/sub (a single server, Sentinel, a Redis 6.2 cluster): one connection, to the server
or to any node of a cluster (a cluster forwards every message to every node). Sharded pub/sub
(a cluster of Redis/Valkey >= 7): one connection per master that owns the slot of a channel
waited on, opened when first needed and closed when idle, so never more than the masters.
redis.asyncio's ``RedisCluster`` has no pub/sub: these are plain connections to the nodes.

Callers register their channels; one placing task subscribes each on the connection its slot
calls for. Channels stay subscribed for a short while after their last waiter leaves. When a
connection fails, or a slot moves to another master (the server unsubscribes its channels, or
answers ``MOVED``), the channels are subscribed again where their slot lives now (the cluster's
layout read afresh), and, once confirmed, their waiters re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any

import redis.exceptions

from .._core.backoff import MIN_PAUSE, full_jitter
from .._core.log import log
from .._core.requests import Handed
from .._redis.connections import (
    ANY_NODE,
    connection_source,
    describe,
    new_subscriber_connection,
    subscriber_route,
    user_of,
)
from .._redis.errors import (
    CONNECTION_ERRORS,
    PLACE_ERRORS,
    is_denied,
    subscription_refused,
    unavailable,
)
from .._shared.channels import (
    CLASSIC,
    HOLDS_CHECK,
    LINGER,
    SHARDED,
    SUBSCRIBE_TIMEOUT,
    Abandoned,
    ChannelTable,
    Holders,
    Links,
    Lost,
    Orphan,
    Waiter,
    text,
    wake_everyone,
)
from ..errors import ClientClosedError
from .cancel import cancellable
from .compat import wait_event


async def wait(waiter: Waiter, timeout: float) -> Handed | bool:
    """Wait until ``waiter`` is woken or ``timeout`` passes; consume the wake-up (and the
    hand-over it brought)."""
    return waiter.woken(await wait_event(waiter.event, timeout))


class Subscriber:
    def __init__(self, client: Any, *, sharded: bool = False) -> None:
        self._client = client
        self._sharded = sharded
        self._kinds = SHARDED if sharded else CLASSIC
        self._source = connection_source(client)
        self.address = describe(client)
        self._user = user_of(client)
        self._table = ChannelTable(asyncio.Event)
        self._links = Links(self._table)
        self._conns: dict[str, Any] = {}  # link -> its connection
        self._readers: dict[str, asyncio.Task[None]] = {}  # link -> the task reading it
        self._work = asyncio.Event()  # something to subscribe or drop
        self._task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self._last_error: BaseException | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._stale = False  # the cluster's layout must be read again before placing
        self.holders: Holders | None = None
        """Told of force releases and of (re)subscriptions of the holds' channels."""
        self._holds_check = 0.0

    async def subscribe(
        self, channel: str, owner: str, *, name: str | None = None, private: str | None = None
    ) -> Waiter:
        """Register ``owner`` as a waiter on ``channel`` (and ``private``); return once the
        server confirmed the subscriptions."""
        if self._closed:
            raise ClientClosedError(name=name)
        self._ensure_task()
        waiter = Waiter(channel, owner, asyncio.Event(), private)
        entries, new = self._table.add(waiter)
        for each in new:
            self._links.want(each)
        if new:
            self._work.set()
        deadline = time.monotonic() + SUBSCRIBE_TIMEOUT
        for entry in entries:
            try:
                confirmed = await wait_event(
                    entry.confirmation(), max(0.0, deadline - time.monotonic())
                )
            except BaseException:
                self.unsubscribe(waiter)
                raise
            if self._closed:
                self.unsubscribe(waiter)
                raise ClientClosedError(name=name)
            if entry.refusal is not None:
                self.unsubscribe(waiter)
                command = self._kinds.subscribe.lower()
                error = subscription_refused(entry.refusal, self.address, name, command, self._user)
                raise error from entry.refusal
            if not confirmed:
                self.unsubscribe(waiter)
                why = self._last_error or TimeoutError("subscription not confirmed")
                raise unavailable(why, self.address, name)
        return waiter

    def listen_if_live(self, channel: str, owner: str, private: str | None = None) -> Waiter | None:
        """A waiter on ``channel`` (and ``private``) if this client already listens there,
        else ``None``."""
        if self._closed:
            return None
        return self._table.add_if_live(channel, owner, private)

    def unsubscribe(self, waiter: Waiter) -> None:
        self._table.remove(waiter, time.monotonic())
        if not all(self._table.waiting(channel) for channel in waiter.channels):
            # a little slack: call_later may fire a hair before LINGER by the monotonic clock
            asyncio.get_running_loop().call_later(LINGER + 0.05, self._work.set)

    def abandon(
        self,
        waiter: Waiter | None,
        channel: str,
        owner: str,
        wait: str,
        give_back: Callable[[Handed | None], None],
    ) -> Abandoned:
        """The wait ``wait`` of ``owner`` is over without the lock and its leave is about to
        be sent (``waiter``: how it listened, if it did): until ``left``, a turn that comes
        for it on ``channel`` is given back (``give_back``) at once, and so is a hand-over
        that came for it already."""
        record = Abandoned(channel, owner, wait, give_back)
        orphan, new = self._table.abandon(record, waiter, time.monotonic())
        if new and not self._closed:
            self._ensure_task()
            for each in new:
                self._links.want(each)
            self._work.set()
        if orphan is not None:
            orphan.give_back()
        return record

    def left(self, record: Abandoned) -> None:
        """``record``'s leave was confirmed: its place is gone."""
        self._table.left(record, time.monotonic())

    def waiting(self, channel: str) -> int:
        return self._table.waiting(channel)

    def watch_holds(self) -> None:
        """The client has a hold its watchdog renews: have the placing task run, which
        subscribes the holds' channels itself (``_reconcile``); the caller never waits (call
        it from the client's event loop)."""
        if not self._closed:
            self._ensure_task()

    async def close(self) -> None:
        """Stop the tasks; every waiter (and every caller waiting for a subscription to be
        confirmed) is woken at once, to find the client closed."""
        self._closed = True
        wake_everyone(self._table)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        readers = list(self._readers.values())
        for link in list(self._conns):
            self._lose(link, None)
        await asyncio.gather(*readers, *self._closing, return_exceptions=True)

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="redlease-subscriber"
            )

    # --- the placing task -----------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            timeout = HOLDS_CHECK if self.holders is not None else 1.0
            if self._links.pending():
                timeout = min(timeout, max(0.0, self._retry_at - time.monotonic()))
            await wait_event(self._work, timeout)
            self._work.clear()
            try:
                self._reconcile()
                if time.monotonic() >= self._retry_at:
                    await self._place()
                await self._drop_idle()
            except Exception:
                log.exception("redlease subscriber failed; restarting it")
                for link in list(self._conns):
                    self._lose(link, None)
                self._retry_at = time.monotonic() + 0.1

    def _reconcile(self) -> None:
        """Every ``HOLDS_CHECK``: listen on the channels of the client's holds now (where a
        force release tells them), and no longer on those of holds gone."""
        now = time.monotonic()
        if self.holders is None or now < self._holds_check:
            return
        self._holds_check = now + HOLDS_CHECK
        for channel in self._table.reconcile_holds(self.holders.held_channels(), now):
            self._links.want(channel)

    def _failed(self, exc: BaseException) -> None:
        """A connection or a subscription failed: try again after a growing pause."""
        self._failures += 1
        self._last_error = exc
        self._stale = True
        pause = full_jitter(
            self._failures, base=0.05, cap=2.0, random=random.random, floor=MIN_PAUSE
        )
        self._retry_at = time.monotonic() + pause
        self._work.set()

    async def _place(self) -> None:
        """Subscribe every channel that needs it, each on the connection its slot calls for."""
        pending = self._links.pending()
        if not pending:
            return
        if self._stale and self._sharded:
            try:
                await self._client.initialize()
                await self._client.nodes_manager.initialize()  # the layout, read afresh
            except PLACE_ERRORS as exc:
                log.debug("subscriber could not read the cluster's layout: %s", exc)
                self._failed(exc)
                return
            self._stale = False
        for channel in pending:
            link = "?"
            try:
                link, connect = subscriber_route(
                    self._client, channel, sharded=self._sharded, source=self._source
                )
                conn = self._conns.get(link) or await self._open(link, connect)
            except PLACE_ERRORS as exc:
                log.debug("subscriber connection to %s failed: %s", link or self.address, exc)
                self._failed(exc)
                continue
            if channel not in self._table.entries:
                continue  # nobody waits on it any more
            self._links.place(channel, link)
            try:
                await cancellable(conn.send_command(self._kinds.subscribe, channel))
            except CONNECTION_ERRORS as exc:
                self._lose(link, exc)

    async def _open(self, link: str, connect: Callable[[], tuple[Any, dict[str, Any], str]]) -> Any:
        conn, address = new_subscriber_connection(connect, SUBSCRIBE_TIMEOUT)
        await cancellable(conn.connect())
        self._conns[link] = conn
        self._readers[link] = asyncio.get_running_loop().create_task(
            self._read(link, conn), name=f"redlease-subscriber {address}"
        )
        if link == ANY_NODE:
            self.address = address
        mode = "sharded" if self._sharded else "classic"
        log.debug("subscriber connected to %s (%s pub/sub)", address, mode)
        return conn

    def _lose(self, link: str, exc: BaseException | None) -> None:
        """``link``'s connection failed (or the client closes): its channels go elsewhere."""
        conn = self._conns.pop(link, None)
        reader = self._readers.pop(link, None)
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        if conn is not None:
            self._close_later(conn)
        self._links.lost(link)
        if exc is not None:
            log.debug("subscriber connection to %s failed: %s", link or self.address, exc)
            self._failed(exc)

    def _close_later(self, conn: Any) -> None:
        closing = asyncio.get_running_loop().create_task(conn.disconnect())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _drop_idle(self) -> None:
        for channel in self._table.drop_idle(time.monotonic(), LINGER):
            link = self._links.drop(channel)
            conn = self._conns.get(link) if link is not None else None
            if conn is None:
                continue
            try:
                await cancellable(conn.send_command(self._kinds.unsubscribe, channel))
            except CONNECTION_ERRORS as exc:
                self._lose(link or ANY_NODE, exc)
        if self._sharded:  # a master no channel needs any more: close its connection
            for link in [link for link in self._links.idle() if link in self._conns]:
                self._links.forget(link)
                self._lose(link, None)

    # --- one task per connection ----------------------------------------------------------

    async def _read(self, link: str, conn: Any) -> None:
        push = {"push_request": True} if str(getattr(conn, "protocol", 2)) == "3" else {}
        kinds = self._kinds
        try:
            while True:
                try:
                    # never cancelled mid-reply but to close the connection
                    message = await conn.read_response(**push)
                except redis.exceptions.ResponseError as exc:  # MOVED, CLUSTERDOWN, ...
                    channel = self._links.refused(link)
                    if channel is not None and is_denied(exc):
                        self._table.on_refused(channel, exc)
                    log.debug("subscription on %s refused (%s): %s", link, channel, exc)
                    self._failed(exc)
                    continue
                kind, channel = text(message[0]), text(message[1])
                holders = self.holders
                if kind == kinds.message:
                    payload = text(message[2])
                    notices: list[Lost | Orphan]
                    notices = self._table.on_message(channel, payload, time.monotonic())
                    for notice in notices:
                        if not isinstance(notice, Lost):
                            notice.give_back()  # a turn for an abandoned wait
                        elif holders is not None:
                            holders.forced(notice)
                elif kind == kinds.subscribed:
                    if self._links.confirmed(link, channel) and holders is not None:
                        holders.check_holds_now()
                    self._failures = 0
                elif kind == kinds.unsubscribed and self._links.unsubscribed(link, channel):
                    # the server's doing: the slot moved to another master
                    log.debug("%s's slot moved off %s; subscribing where it is now", channel, link)
                    self._stale = True
                    self._work.set()
        except CONNECTION_ERRORS as exc:
            if self._conns.get(link) is conn:
                self._lose(link, exc)
