"""A client's pub/sub connections, owned by one listener thread.

Classic pub/sub (a single server, Sentinel, a Redis 6.2 cluster): one connection, to the server
or to any node of a cluster (a cluster forwards every message to every node). Sharded pub/sub
(a cluster of Redis/Valkey >= 7): one connection per master that owns the slot of a channel
waited on, opened when first needed and closed when idle, so never more than the masters.

Only the listener thread touches the connections (a TLS socket must not be read and written
from two threads at once); callers queue subscriptions and wake it through a pipe. Channels
stay subscribed for a short while after their last waiter leaves, so a hot lock does not pay a
subscribe round trip on every wait. When a connection fails, or a slot moves to another master
(the server unsubscribes its channels, or answers ``MOVED``), the channels are subscribed again
where their slot lives now (the cluster's layout read afresh), and their waiters re-check.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
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
from .._redis.wire import unread
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

IDLE_CHECK = 0.25
"""Seconds between looks for channels to unsubscribe."""


def wait(waiter: Waiter, timeout: float) -> Handed | bool:
    """Block until ``waiter`` is woken or ``timeout`` passes; consume the wake-up (and the
    hand-over it brought)."""
    return waiter.woken(waiter.event.wait(timeout))


class Subscriber:
    def __init__(self, client: Any, *, sharded: bool = False) -> None:
        self._client = client
        self._sharded = sharded
        self._kinds = SHARDED if sharded else CLASSIC
        self._source = connection_source(client)
        self.address = describe(client)
        self._user = user_of(client)
        self._mutex = threading.Lock()
        self._table = ChannelTable(threading.Event)
        self._links = Links(self._table)
        self._conns: dict[str, Any] = {}  # link -> its connection (listener thread only)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last_error: BaseException | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._idle_check = 0.0
        self._stale = False  # the cluster's layout must be read again before placing
        self.holders: Holders | None = None
        """Told of force releases and of (re)subscriptions of the holds' channels."""
        self._holds_check = 0.0
        self._ready: list[Any] = []  # what the last select found readable

    # --- callers' side --------------------------------------------------------------------

    def subscribe(
        self, channel: str, owner: str, *, name: str | None = None, private: str | None = None
    ) -> Waiter:
        """Register ``owner`` as a waiter on ``channel`` (and ``private``); return once the
        server confirmed the subscriptions."""
        waiter = Waiter(channel, owner, threading.Event(), private)
        with self._mutex:
            self._ensure_thread()
            entries, new = self._table.add(waiter)
            for each in new:
                self._links.want(each)
        self._wake()
        deadline = time.monotonic() + SUBSCRIBE_TIMEOUT
        for entry in entries:
            confirmed = entry.confirmation().wait(max(0.0, deadline - time.monotonic()))
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
        with self._mutex:
            if self._closed:
                return None
            return self._table.add_if_live(channel, owner, private)

    def unsubscribe(self, waiter: Waiter) -> None:
        with self._mutex:
            self._table.remove(waiter, time.monotonic())

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
        with self._mutex:
            orphan, new = self._table.abandon(record, waiter, time.monotonic())
            if new and not self._closed:
                self._ensure_thread()
                for each in new:
                    self._links.want(each)
        if new:
            self._wake()
        if orphan is not None:
            orphan.give_back()
        return record

    def left(self, record: Abandoned) -> None:
        """``record``'s leave was confirmed: its place is gone."""
        with self._mutex:
            self._table.left(record, time.monotonic())

    def watch_holds(self) -> None:
        """The client has a hold its watchdog renews: have the listener thread run, which
        subscribes the holds' channels itself (``_reconcile``); the caller never waits, nor
        wakes the thread."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            return  # (the acquire's path: nothing more)
        with self._mutex:
            if not self._closed:
                self._ensure_thread()

    def waiting(self, channel: str) -> int:
        with self._mutex:
            return self._table.waiting(channel)

    def close(self) -> None:
        """Stop the listener thread; every waiter (and every caller waiting for a
        subscription to be confirmed) is woken at once, to find the client closed."""
        with self._mutex:
            self._closed = True
            wake_everyone(self._table)
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        with contextlib.suppress(OSError):
            os.close(self._wake_r)
        with contextlib.suppress(OSError):
            os.close(self._wake_w)

    def _ensure_thread(self) -> None:
        if self._closed:
            raise ClientClosedError()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="redlease-subscriber", daemon=True
            )
            self._thread.start()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    # --- the listener thread --------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed:
            try:
                self._reconcile()
                if time.monotonic() >= self._retry_at:
                    self._place()
                self._read_available()
                self._drop_idle()
                self._pause()
            except Exception:
                log.exception("redlease subscriber failed; restarting it")
                for link in list(self._conns):
                    self._lose(link, None)
                self._retry_at = time.monotonic() + 0.1
        for link in list(self._conns):
            self._lose(link, None)

    def _reconcile(self) -> None:
        """Every ``HOLDS_CHECK``: listen on the channels of the client's holds now (where a
        force release tells them), and no longer on those of holds gone."""
        now = time.monotonic()
        if self.holders is None or now < self._holds_check:
            return
        self._holds_check = now + HOLDS_CHECK
        wanted = self.holders.held_channels()  # (never under our mutex)
        with self._mutex:
            for channel in self._table.reconcile_holds(wanted, now):
                self._links.want(channel)

    def _pause(self) -> None:
        """Sleep until a connection or the wake pipe can be read, or until the next retry."""
        readable: list[Any] = [self._wake_r]
        readable += [conn._sock for conn in self._conns.values() if conn._sock is not None]
        with self._mutex:
            pending = bool(self._links.pending())
        timeout = HOLDS_CHECK if self.holders is not None else 1.0
        if pending:
            timeout = min(timeout, max(0.0, self._retry_at - time.monotonic()))
        ready, _, _ = select.select(readable, [], [], timeout)
        self._ready = ready
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 4096):
                    pass

    def _failed(self, exc: BaseException) -> None:
        """A connection or a subscription failed: try again after a growing pause."""
        self._failures += 1
        self._last_error = exc
        self._stale = True
        pause = full_jitter(
            self._failures, base=0.05, cap=2.0, random=random.random, floor=MIN_PAUSE
        )
        self._retry_at = time.monotonic() + pause

    def _place(self) -> None:
        """Subscribe every channel that needs it, each on the connection its slot calls for."""
        with self._mutex:
            pending = self._links.pending()
        if not pending:
            return
        if self._stale and self._sharded:
            try:
                self._client.nodes_manager.initialize()  # the cluster's layout, read afresh
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
                conn = self._conns.get(link) or self._open(link, connect)
            except PLACE_ERRORS as exc:
                log.debug("subscriber connection to %s failed: %s", link or self.address, exc)
                self._failed(exc)
                continue
            with self._mutex:
                if channel not in self._table.entries:
                    continue  # nobody waits on it any more
                self._links.place(channel, link)
            try:
                conn.send_command(self._kinds.subscribe, channel)
            except CONNECTION_ERRORS as exc:
                self._lose(link, exc)

    def _open(self, link: str, connect: Callable[[], tuple[Any, dict[str, Any], str]]) -> Any:
        conn, address = new_subscriber_connection(connect, SUBSCRIBE_TIMEOUT)
        conn.connect()
        self._conns[link] = conn
        if link == ANY_NODE:
            self.address = address
        mode = "sharded" if self._sharded else "classic"
        log.debug("subscriber connected to %s (%s pub/sub)", address, mode)
        return conn

    def _lose(self, link: str, exc: BaseException | None) -> None:
        """``link``'s connection failed (or the client closes): its channels go elsewhere."""
        conn = self._conns.pop(link, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()
        with self._mutex:
            self._links.lost(link)
        if exc is not None:
            log.debug("subscriber connection to %s failed: %s", link or self.address, exc)
            self._failed(exc)

    def _drop_idle(self) -> None:
        now = time.monotonic()
        if now < self._idle_check:  # not on every message: a hot channel wakes us often
            return
        self._idle_check = now + IDLE_CHECK
        with self._mutex:
            idle = self._table.drop_idle(now, LINGER)
            links = [(channel, self._links.drop(channel)) for channel in idle]
        for channel, link in links:
            conn = self._conns.get(link) if link is not None else None
            if conn is None:
                continue
            try:
                conn.send_command(self._kinds.unsubscribe, channel)
            except CONNECTION_ERRORS as exc:
                self._lose(link or ANY_NODE, exc)
        if self._sharded:  # a master no channel needs any more: close its connection
            with self._mutex:
                idle_links = [link for link in self._links.idle() if link in self._conns]
                for link in idle_links:
                    self._links.forget(link)
            for link in idle_links:
                with contextlib.suppress(Exception):
                    self._conns.pop(link).disconnect()

    def _read_available(self) -> None:
        for link, conn in list(self._conns.items()):
            try:
                self._read(link, conn)
            except CONNECTION_ERRORS as exc:
                self._lose(link, exc)
        self._ready = []

    def _read(self, link: str, conn: Any) -> None:
        """Every message ``conn`` has: the first read without asking the socket again when
        the last ``select`` found it readable (data, or the server closed it: then an
        error), then what that read brought (``unread``), and the socket asked again only
        when that is all parsed (``can_read``: a flood is read to its end here)."""
        push = {"push_request": True} if str(getattr(conn, "protocol", 2)) == "3" else {}
        kinds = self._kinds
        readable = conn._sock is not None and conn._sock in self._ready
        while readable or unread(conn) or conn.can_read(timeout=0):
            readable = False
            try:
                message = conn.read_response(**push)
            except redis.exceptions.ResponseError as exc:  # MOVED, CLUSTERDOWN, ...
                with self._mutex:
                    channel = self._links.refused(link)
                    if channel is not None and is_denied(exc):
                        self._table.on_refused(channel, exc)
                log.debug("subscription on %s refused (%s): %s", link, channel, exc)
                self._failed(exc)
                continue
            kind, channel = text(message[0]), text(message[1])
            moved = check = False
            notices: list[Lost | Orphan] = []
            with self._mutex:
                if kind == kinds.message:
                    notices = self._table.on_message(channel, text(message[2]), time.monotonic())
                elif kind == kinds.subscribed:
                    check = self._links.confirmed(link, channel)
                    self._failures = 0
                elif kind == kinds.unsubscribed:
                    moved = self._links.unsubscribed(link, channel)
            holders = self.holders
            for notice in notices:  # (their listeners and give-backs run outside our mutex)
                if not isinstance(notice, Lost):
                    notice.give_back()  # a turn for an abandoned wait
                elif holders is not None:
                    holders.forced(notice)
            if check and holders is not None:
                holders.check_holds_now()
            if moved:  # the server's doing: the slot moved to another master
                log.debug("%s's slot moved off %s; subscribing where it is now", channel, link)
                self._stale = True
