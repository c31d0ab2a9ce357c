"""Run one script of ``src/redlease/lua/`` on a real server against an explicit model state.

The model (``lockmodel.py``) keeps the server's keys as values: for each key its type, its
content and its TTL in the model's time unit. A server step is one call of a real script, on
one private server started for the test session (``redlease.testing.RedisServer``: nothing
persisted), in one pipeline on one connection:

1. the state's keys are written under key names of this step's own (a fresh ``{s<n>}`` hash
   tag before the model's name, so nothing a step leaves can leak into another), each with
   its TTL (``PEXPIRE`` of the model's TTL in milliseconds);
2. the script runs by ``EVALSHA`` with the KEYS and ARGV of the ``Call`` the client code built,
   its data keys mapped to this step's names (channels are not keys and keep their names);
3. a read-back script (test infrastructure, below) finds every key of the step's hash tag
   (``SCAN``: also those a script names from a prefix it was given, as Redisson's read-write
   lock does), returns its type, content and PTTL and deletes it; ``DBSIZE`` then proves the
   step left nothing behind.

TTLs read back are rounded up to the model's unit (a step takes far less than one unit); a
reply's millisecond values just below a whole unit (a PTTL read a moment after it was set)
are rounded up the same way, so that the model sees the TTLs it wrote. Both rely on the step
running promptly: a step whose script ran ``SLOW_MS`` or more after the client read the clock
for its state's times (the test process stalled in between, by a garbage collection or a
loaded machine, or the server) is run again, under a fresh tag, until one is prompt (a late
run leaves nothing: its keys were read back and deleted, its messages read).

Pub/sub is real too. The scripts ask ``PUBSUB NUMSUB`` whether a waiter's client still
listens, so each simulated process that listens (in the model's state) has a real connection
subscribed to its channels (``listen``); and every message a script publishes is observed by a
pattern subscriber (``PSUBSCRIBE *``, which ``NUMSUB`` does not count), read up to a marker
message the step's pipeline publishes last, so the model can deliver it late, twice or never.
"""

from __future__ import annotations

import hashlib
import math
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redlease.testing import RedisServer

READBACK = b"""
local out = {}
local cursor = '0'
repeat
  local page = redis.call('scan', cursor, 'match', ARGV[1], 'count', 1000)
  cursor = page[1]
  for _, k in ipairs(page[2]) do
    local t = redis.call('type', k).ok
    local v = {}
    if t == 'hash' then v = redis.call('hgetall', k)
    elseif t == 'zset' then v = redis.call('zrange', k, 0, -1, 'withscores')
    elseif t == 'string' then v = {redis.call('get', k)}
    elseif t == 'set' then v = redis.call('smembers', k)
    elseif t == 'list' then v = redis.call('lrange', k, 0, -1)
    end
    out[#out + 1] = {k, t, redis.call('pttl', k), v}
    redis.call('del', k)
  end
until cursor == '0'
return out
"""
READBACK_SHA = hashlib.sha1(READBACK).hexdigest()
MARKER = "model:marker"
"""Published after each step: the observer reads up to it (no script listens to it: only the
observer's pattern subscription hears it, and PUBSUB NUMSUB/CHANNELS do not count those)."""

KeyState = tuple[str, str, int, Any]
"""One key: (model name, type, TTL in units (-1: none), content)."""
State = tuple[KeyState, ...]
"""The server's keys, sorted by name."""


class RespError(Exception):
    """An error reply."""


def _encode(args: Sequence[Any]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    """A minimal RESP2 connection (no client library in the way of the timing)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, commands: Iterable[Sequence[Any]]) -> None:
        self.sock.sendall(b"".join(_encode(c) for c in commands))

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2 :]
                return line
            self._fill()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def read(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2 :]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError(f"bad reply line {line!r}")

    def call(self, *args: Any) -> Any:
        self.send([args])
        return self.read()

    def close(self) -> None:
        self.sock.close()


SLOW_MS = 40
"""A step whose server time after the script is this far (or more) past the client's clock
when the step's state was written is run again: below ``round_ms``'s 50 ms, so every
millisecond value the step reads or writes is within a rounding of what the model meant.
(A stall of a whole unit there made a group lock's value with one unit left expire before
the renewal ran: a false I3 in CI's 3.11 step, reproduced by a 1.1 s sleep.)"""

TRIES = 100
"""How many times a step is run before a slow one is given up on (an error, not a verdict)."""


def round_ms(value: int, unit_ms: int) -> int:
    """A millisecond value read a moment after a whole number of units was set, as set."""
    if 0 < value < 10**12 and value % unit_ms >= unit_ms - 50:
        return value + unit_ms - value % unit_ms
    return value


def normalize(value: Any, unit_ms: int) -> Any:
    """A reply as hashable values: lists as tuples, ms values rounded (``round_ms``)."""
    if isinstance(value, list):
        return tuple(normalize(v, unit_ms) for v in value)
    if isinstance(value, int):
        return round_ms(value, unit_ms)
    return value


@dataclass(frozen=True)
class Step:
    """What one script run did: the keys after it, its reply and the messages it published
    (channel, payload), in order."""

    state: State
    reply: Any
    published: tuple[tuple[str, str], ...]


class ServerEngine:
    """Runs scripts on one private server against explicit states (see the module doc)."""

    def __init__(self, server: RedisServer, unit_ms: int = 1000) -> None:
        self.server = server
        self.unit_ms = unit_ms
        self.main = Conn(server.host, server.port)
        self.observer = Conn(server.host, server.port)
        self.observer.call("PSUBSCRIBE", "*")
        self.listeners: dict[str, tuple[Conn, tuple[str, ...]]] = {}
        self.loaded: set[str] = set()
        self.steps = 0
        self.seconds = 0.0
        self.slow = 0  # runs done again for being late (SLOW_MS)
        assert self.main.call("DBSIZE") == 0, "the model's server must start empty"

    def close(self) -> None:
        for conn, _ in self.listeners.values():
            conn.close()
        self.main.close()
        self.observer.close()

    # --- pub/sub ---------------------------------------------------------------------------

    def listen(self, wanted: dict[str, tuple[str, ...]]) -> None:
        """Make each listener (a simulated process) subscribed to exactly its channels."""
        for name, channels in wanted.items():
            conn, now = self.listeners.get(name, (None, ()))
            if now == channels:
                continue
            if conn is None:
                conn = Conn(self.server.host, self.server.port)
            if now:
                conn.send([("UNSUBSCRIBE", *now)])
                self._confirmed(conn, "unsubscribe", len(now))
            if channels:
                conn.send([("SUBSCRIBE", *channels)])
                self._confirmed(conn, "subscribe", len(channels))
            self.listeners[name] = (conn, channels)

    @staticmethod
    def _confirmed(conn: Conn, kind: str, n: int) -> None:
        seen = 0
        for _ in range(1_000_000):
            if seen == n:
                return
            reply = conn.read()
            if isinstance(reply, list) and reply and reply[0] == kind:
                seen += 1
        raise RuntimeError(f"no {kind} confirmation")

    def _published(self, marker: str) -> tuple[tuple[str, str], ...]:
        """The messages published before the step's marker (published last, in the same
        pipeline: a subscriber receives messages in the order they were published)."""
        out: list[tuple[str, str]] = []
        for _ in range(1_000_000):
            reply = self.observer.read()
            if isinstance(reply, list) and reply and reply[0] == "pmessage":
                if reply[2] == MARKER:
                    if reply[3] == marker:
                        return tuple(out)
                    continue
                out.append((reply[2], reply[3]))
        raise RuntimeError("no marker on the observer")

    # --- one step --------------------------------------------------------------------------

    def run(
        self,
        state: State,
        source: bytes,
        keys: Sequence[str],
        args: Sequence[Any],
        channels: frozenset[str],
        times: frozenset[str] = frozenset(),
    ) -> Step:
        """Run ``source`` with ``keys``/``args`` on ``state``; ``channels``: the names among
        ``keys`` that are channels (passed as they are; every other is a key, or a prefix of
        keys, and gets the step's tag before it); ``times``: keys
        whose numbers are server times in epoch milliseconds (a fair lock's places), kept in
        the state relative to the model's clock, as ``"@<units from now>"``. A slow run is
        run again (``SLOW_MS``)."""
        late_ms = 0
        for _ in range(TRIES):
            step, late_ms = self._run_once(state, source, keys, args, channels, times)
            if late_ms < SLOW_MS:
                return step
            self.slow += 1
        raise RuntimeError(f"no run of the step within {SLOW_MS} ms in {TRIES} (last {late_ms})")

    def _run_once(
        self,
        state: State,
        source: bytes,
        keys: Sequence[str],
        args: Sequence[Any],
        channels: frozenset[str],
        times: frozenset[str],
    ) -> tuple[Step, int]:
        """One run of the step, and how late its script ran: the server's time after it less
        the client's when it computed the state's times (ms)."""
        began = time.perf_counter()
        sha = hashlib.sha1(source).hexdigest()
        if sha not in self.loaded:
            assert self.main.call("SCRIPT", "LOAD", source) == sha
            self.loaded.add(sha)
        if READBACK_SHA not in self.loaded:
            assert self.main.call("SCRIPT", "LOAD", READBACK) == READBACK_SHA
            self.loaded.add(READBACK_SHA)
        self.steps += 1
        tag = f"{{s{self.steps}}}"
        fresh = {k: tag + k for k in [k for k, *_ in state] + list(keys) if k not in channels}
        cmds: list[tuple[Any, ...]] = []
        now_ms = time.time_ns() // 10**6  # the server's clock: the same host's
        for key, kind, ttl, value in state:
            k = fresh[key]
            if key in times:
                value = _absolute(value, now_ms, self.unit_ms)
            if kind == "hash":
                cmds.append(("HSET", k, *[x for pair in value for x in pair]))
            elif kind == "zset":
                cmds.append(("ZADD", k, *[x for m, s in value for x in (s, m)]))
            elif kind == "string":
                cmds.append(("SET", k, value))
            elif kind == "set":
                cmds.append(("SADD", k, *value))
            elif kind == "list":
                cmds.append(("RPUSH", k, *value))
            else:
                raise AssertionError(kind)
            if ttl > 0:
                cmds.append(("PEXPIRE", k, ttl * self.unit_ms))
        writes = len(cmds)
        mapped = [fresh.get(k, k) for k in keys]
        cmds.append(("EVALSHA", sha, len(mapped), *mapped, *args))
        cmds.append(("TIME",))
        cmds.append(("EVALSHA", READBACK_SHA, 0, tag.replace("[", "\\[") + "*"))
        cmds.append(("DBSIZE",))
        cmds.append(("PUBLISH", MARKER, str(self.steps)))
        self.main.send(cmds)
        replies = [self.main.read() for _ in cmds]
        for r in replies[:writes]:
            if isinstance(r, RespError):
                raise RuntimeError(f"writing the state failed: {r}")
        reply, now, back, left, _ = replies[writes:]
        server_ms = int(now[0]) * 1000 + int(now[1]) // 1000
        if isinstance(back, RespError) or left != 0:
            raise RuntimeError(f"read-back failed ({back!r}) or keys left behind ({left})")
        out: list[KeyState] = []
        for name, kind, pttl, content in back:
            key = name[len(tag) :]
            if pttl == -1:
                ttl = -1
            elif pttl >= 0:
                ttl = max(1, math.ceil(pttl / self.unit_ms))
            else:
                continue
            if kind == "hash":
                value = tuple(sorted(zip(content[::2], content[1::2], strict=True)))
            elif kind == "zset":
                value = tuple(zip(content[::2], content[1::2], strict=True))
            elif kind == "string":
                value = content[0]
            elif kind == "set":
                value = tuple(sorted(content))
            else:
                value = tuple(content)
            if key in times:
                value = _relative(value, server_ms, self.unit_ms)
            out.append((key, kind, ttl, value))
        out.sort()
        published = self._published(str(self.steps))
        self.seconds += time.perf_counter() - began
        late_ms = server_ms - now_ms
        if isinstance(reply, RespError):
            return Step(tuple(out), reply, published), late_ms
        return Step(tuple(out), normalize(reply, self.unit_ms), published), late_ms


def _is_ms(x: Any) -> bool:
    return isinstance(x, str) and len(x) == 13 and x.isdigit()


def _relative(value: Any, now_ms: int, unit_ms: int) -> Any:
    """Epoch milliseconds (13 digits) as ``"@<units from now>"`` (rounded up)."""
    if isinstance(value, tuple):
        return tuple(_relative(v, now_ms, unit_ms) for v in value)
    if _is_ms(value):
        return f"@{math.ceil((int(value) - now_ms) / unit_ms)}"
    return value


def _absolute(value: Any, now_ms: int, unit_ms: int) -> Any:
    if isinstance(value, tuple):
        return tuple(_absolute(v, now_ms, unit_ms) for v in value)
    if isinstance(value, str) and value.startswith("@"):
        return str(now_ms + int(value[1:]) * unit_ms)
    return value


def start_engine(unit_ms: int = 1000) -> tuple[RedisServer, ServerEngine]:
    """A private server (the newest binary found) and an engine on it."""
    server = RedisServer().start()
    try:
        return server, ServerEngine(server, unit_ms)
    except BaseException:
        server.stop()
        raise
