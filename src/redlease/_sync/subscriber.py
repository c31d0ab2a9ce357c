"""One pub/sub connection per client, owned by one listener thread.

Only the listener thread touches the connection (a TLS socket must not be read and written from
two threads at once); callers queue (un)subscriptions and wake it through a pipe. Channels stay
subscribed for a short while after their last waiter leaves, so a hot lock does not pay a
subscribe round trip on every wait. After a reconnect every waiter is woken to re-check.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import Any

import redis

from .._shell import CONNECTION_ERRORS, address_of, log, subscriber_kwargs, unavailable

LINGER = 5.0
"""Seconds a channel stays subscribed after its last waiter left."""

SUBSCRIBE_TIMEOUT = 10.0


class Waiter:
    """One waiting caller's wake-up flag."""

    __slots__ = ("channel", "event")

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.event = threading.Event()

    def wait(self, timeout: float) -> bool:
        woken = self.event.wait(timeout)
        self.event.clear()
        return woken


class _Channel:
    __slots__ = ("confirmed", "idle_since", "rewake", "waiters")

    def __init__(self) -> None:
        self.waiters: set[Waiter] = set()
        self.confirmed = threading.Event()
        self.idle_since: float | None = None
        self.rewake = False  # wake the waiters once re-subscribed after a reconnect


class Subscriber:
    def __init__(self, client: redis.Redis) -> None:
        pool = client.connection_pool
        kwargs = subscriber_kwargs(pool.connection_kwargs)
        self._connection_class = pool.connection_class
        self._kwargs = kwargs
        self.address = address_of(kwargs)
        self._mutex = threading.Lock()
        self._channels: dict[str, _Channel] = {}
        self._outbox: list[tuple[str, str]] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._conn: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # --- callers' side --------------------------------------------------------------------

    def subscribe(self, channel: str, *, name: str | None = None) -> Waiter:
        """Register a waiter on ``channel`` and return once the server confirmed it."""
        waiter = Waiter(channel)
        with self._mutex:
            self._ensure_thread()
            entry = self._channels.get(channel)
            if entry is None:
                entry = self._channels[channel] = _Channel()
                self._outbox.append(("SUBSCRIBE", channel))
            entry.waiters.add(waiter)
            entry.idle_since = None
        self._wake()
        if not entry.confirmed.wait(SUBSCRIBE_TIMEOUT):
            self.unsubscribe(waiter)
            raise unavailable(TimeoutError("subscription not confirmed"), self.address, name)
        return waiter

    def unsubscribe(self, waiter: Waiter) -> None:
        with self._mutex:
            entry = self._channels.get(waiter.channel)
            if entry is not None:
                entry.waiters.discard(waiter)
                if not entry.waiters:
                    entry.idle_since = time.monotonic()

    def waiting(self, channel: str) -> int:
        with self._mutex:
            entry = self._channels.get(channel)
            return len(entry.waiters) if entry else 0

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
                sock = self._conn._sock
                select.select([sock, self._wake_r], [], [], 1.0)
                with contextlib.suppress(OSError):
                    while os.read(self._wake_r, 4096):
                        pass
            except CONNECTION_ERRORS as exc:
                if self._closed:
                    break
                failures += 1
                log.debug("subscriber connection to %s failed: %s", self.address, exc)
                self._disconnected()
                # bounded, interruptible back-off before reconnecting
                select.select([self._wake_r], [], [], min(1.0, 0.05 * 2**failures))
            except Exception:
                log.exception("redlease subscriber failed; restarting it")
                self._disconnected()
                time.sleep(0.1)
        self._disconnected()

    def _connect(self) -> None:
        conn = self._connection_class(**self._kwargs)
        conn.connect()
        self._conn = conn
        with self._mutex:
            channels = [ch for ch, entry in self._channels.items() if entry.waiters]
            for ch in channels:
                self._channels[ch].rewake = True
            for ch in [ch for ch, entry in self._channels.items() if not entry.waiters]:
                del self._channels[ch]
            self._outbox = [("SUBSCRIBE", ch) for ch in channels]
        if channels:
            log.debug(
                "subscriber reconnected to %s; re-subscribing %d", self.address, len(channels)
            )

    def _disconnected(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()
        with self._mutex:
            entries = list(self._channels.values())
        for entry in entries:
            entry.confirmed.clear()

    def _send_outbox(self) -> None:
        with self._mutex:
            outbox, self._outbox = self._outbox, []
        for command, channel in outbox:
            self._conn.send_command(command, channel)

    def _drop_idle(self) -> None:
        now = time.monotonic()
        with self._mutex:
            idle = [
                ch
                for ch, entry in self._channels.items()
                if entry.idle_since is not None and now - entry.idle_since >= LINGER
            ]
            for ch in idle:
                del self._channels[ch]
        for ch in idle:
            self._conn.send_command("UNSUBSCRIBE", ch)

    def _read_available(self) -> None:
        conn = self._conn
        while conn.can_read(timeout=0):
            self._dispatch(conn.read_response())

    def _dispatch(self, message: Any) -> None:
        kind = _text(message[0])
        channel = _text(message[1])
        with self._mutex:
            entry = self._channels.get(channel)
            waiters = list(entry.waiters) if entry else []
        if entry is None:
            return
        if kind == "subscribe":
            entry.confirmed.set()
            if entry.rewake:
                entry.rewake = False
                for waiter in waiters:
                    waiter.event.set()
        elif kind == "message":
            for waiter in waiters:
                waiter.event.set()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
