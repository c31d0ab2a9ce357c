"""One pub/sub connection per client, owned by one listener thread.

Only the listener thread touches the connection (a TLS socket must not be read and written from
two threads at once); callers queue (un)subscriptions and wake it through a pipe. Channels stay
subscribed for a short while after their last waiter leaves, so a hot lock does not pay a
subscribe round trip on every wait. After a reconnect every waiter is woken to re-check.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import threading
import time
from typing import Any

import redis

from .._channels import ChannelTable, Waiter, text
from .._core.backoff import full_jitter
from .._shell import CONNECTION_ERRORS, connection_source, describe, log, unavailable

LINGER = 2.0
"""Seconds a channel stays subscribed after its last waiter left."""

SUBSCRIBE_TIMEOUT = 10.0


def wait(waiter: Waiter, timeout: float) -> bool:
    """Block until ``waiter`` is woken or ``timeout`` passes; consume the wake-up."""
    woken: bool = waiter.event.wait(timeout)
    waiter.event.clear()
    return woken


class Subscriber:
    def __init__(self, client: redis.Redis) -> None:
        self._source = connection_source(client)
        self.address = describe(client)
        self._mutex = threading.Lock()
        self._table = ChannelTable(threading.Event)
        self._outbox: list[tuple[str, str]] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._conn: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last_error: BaseException | None = None

    # --- callers' side --------------------------------------------------------------------

    def subscribe(self, channel: str, owner: str, *, name: str | None = None) -> Waiter:
        """Register ``owner`` as a waiter on ``channel``; return once the server confirmed it."""
        waiter = Waiter(channel, owner, threading.Event())
        with self._mutex:
            self._ensure_thread()
            entry, new = self._table.add(waiter)
            if new:
                self._outbox.append(("SUBSCRIBE", channel))
        self._wake()
        if not entry.confirmed.wait(SUBSCRIBE_TIMEOUT):
            self.unsubscribe(waiter)
            why = self._last_error or TimeoutError("subscription not confirmed")
            raise unavailable(why, self.address, name)
        return waiter

    def listen_if_live(self, channel: str, owner: str) -> Waiter | None:
        """A waiter on ``channel`` if this connection already listens there, else ``None``."""
        waiter = Waiter(channel, owner, threading.Event())
        with self._mutex:
            return waiter if self._table.add_if_live(waiter) else None

    def unsubscribe(self, waiter: Waiter) -> None:
        with self._mutex:
            self._table.remove(waiter, time.monotonic())

    def waiting(self, channel: str) -> int:
        with self._mutex:
            return self._table.waiting(channel)

    def close(self) -> None:
        self._closed = True
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
            raise RuntimeError("redlease client is closed")
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
        failures = 0
        while not self._closed:
            try:
                if self._conn is None:
                    self._connect()
                    failures = 0
                self._send_outbox()
                self._read_available()
                self._drop_idle()
                self._pause([self._conn._sock, self._wake_r], 1.0)
            except CONNECTION_ERRORS as exc:
                if self._closed:
                    break
                failures += 1
                self._last_error = exc
                log.debug("subscriber connection to %s failed: %s", self.address, exc)
                self._disconnected()
                self._pause(
                    [self._wake_r], full_jitter(failures, base=0.05, cap=2.0, random=random.random)
                )
            except Exception:
                log.exception("redlease subscriber failed; restarting it")
                self._disconnected()
                self._pause([self._wake_r], 0.1)
        self._disconnected()

    def _pause(self, readable: list[Any], timeout: float) -> None:
        """Sleep until one of ``readable`` can be read or ``timeout``; empty the wake pipe."""
        select.select(readable, [], [], timeout)
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass

    def _connect(self) -> None:
        connection_class, kwargs, self.address = self._source()
        conn = connection_class(**kwargs)
        conn.connect()
        self._conn = conn
        self._last_error = None
        with self._mutex:
            self._outbox = [("SUBSCRIBE", ch) for ch in self._table.resubscribe()]

    def _disconnected(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()
        with self._mutex:
            self._table.disconnected()

    def _send_outbox(self) -> None:
        with self._mutex:
            outbox, self._outbox = self._outbox, []
        for command, channel in outbox:
            self._conn.send_command(command, channel)

    def _drop_idle(self) -> None:
        with self._mutex:
            idle = self._table.drop_idle(time.monotonic(), LINGER)
        for channel in idle:
            self._conn.send_command("UNSUBSCRIBE", channel)

    def _read_available(self) -> None:
        conn = self._conn
        push = {"push_request": True} if str(getattr(conn, "protocol", 2)) == "3" else {}
        while conn.can_read(timeout=0):
            message = conn.read_response(**push)
            kind, channel = text(message[0]), text(message[1])
            with self._mutex:
                if kind == "message":
                    self._table.on_message(channel, text(message[2]))
                elif kind == "subscribe":
                    self._table.on_subscribed(channel)
