"""Script calls packed straight into RESP bytes, for the hot path of a single-server client.

redis-py packs every command through a generic encoder that checks each argument's type
several times; a lock cycle is two script calls of ten arguments or so, and that packing was a
large share of redlease's own cost. Here the fixed part of a call (EVALSHA, the script's SHA,
the key count and the keys, which are the same for every call on one lock) is packed once and
cached; only the arguments are packed per call. No I/O here: the shells send the bytes with
redis-py's own connection (``send_packed_command``/``read_response``), so TLS, ACL users,
health checks and reconnection stay redis-py's.
"""

from __future__ import annotations

import inspect
from typing import Any

import redis.exceptions

from .._core.requests import Call

try:
    from redis._parsers import _AsyncHiredisParser as _HiredisParser
    from redis._parsers import hiredis as _hiredis_parser
except ImportError:  # (an older redis-py: every reply read as redis-py reads it)
    _HiredisParser = None  # type: ignore[assignment, misc]
    _hiredis_parser = None  # type: ignore[assignment]

SPARE_CONNECTIONS = 4
"""Connections a client keeps checked out of the pool between its calls: taking one from the
pool and giving it back costs more in redis-py than packing the command."""

_HEADS_LIMIT = 4096
"""Cached heads (one per script and lock name in use); the cache starts over when full."""


class Packer:
    """Packs ``Call``s as ``EVALSHA sha numkeys key... arg...`` in the client's encoding."""

    __slots__ = ("_bulks", "_encoding", "_errors", "_heads", "checkout")

    def __init__(
        self, encoding: str = "utf-8", errors: str = "strict", checkout: tuple[str, ...] = ()
    ) -> None:
        self._encoding = encoding
        self._errors = errors
        self._heads: dict[tuple[str, tuple[str, ...], int], bytes] = {}
        self._bulks: dict[str | int, bytes] = {}  # owner fields, leases, counts: they recur
        self.checkout = checkout
        """What ``get_connection`` of the pool takes (see ``checkout_args``)."""

    @classmethod
    def for_pool(cls, pool: Any) -> Packer:
        """A packer in the encoding of ``pool``'s connections (a redis-py pool, sync or async)."""
        kwargs = pool.connection_kwargs
        return cls(
            kwargs.get("encoding", "utf-8"),
            kwargs.get("encoding_errors", "strict"),
            checkout_args(pool),
        )

    def pack(self, call: Call) -> bytes:
        args = call.args
        index = (call.script.sha, call.keys, len(args))
        head = self._heads.get(index)
        if head is None:
            head = self._head(call, len(args))
            if len(self._heads) >= _HEADS_LIMIT:
                self._heads.clear()
            self._heads[index] = head
        bulks = self._bulks
        parts = [head]
        for arg in args:
            kind = type(arg)
            if kind is str or kind is int:  # exactly: never a bool, which equals an int
                bulk = bulks.get(arg)  # type: ignore[arg-type]
                if bulk is None:
                    bulk = self._bulk(arg)
                    if len(bulks) >= _HEADS_LIMIT:
                        bulks.clear()
                    bulks[arg] = bulk  # type: ignore[index]
            else:
                bulk = self._bulk(arg)
            parts.append(bulk)
        return b"".join(parts)

    def command(self, *args: str | int | bytes) -> bytes:
        """Any other command (``SCRIPT LOAD`` after the server lost its script cache)."""
        return b"*%d\r\n" % len(args) + b"".join([self._bulk(arg) for arg in args])

    def _head(self, call: Call, arg_count: int) -> bytes:
        keys = call.keys
        parts = [b"*%d\r\n$7\r\nEVALSHA\r\n" % (3 + len(keys) + arg_count)]
        parts.append(self._bulk(call.script.sha))
        parts.append(self._bulk(len(keys)))
        parts.extend(self._bulk(key) for key in keys)
        return b"".join(parts)

    def _bulk(self, value: str | int | bytes) -> bytes:
        if isinstance(value, str):
            data = value.encode(self._encoding, self._errors)
        elif isinstance(value, bytes):
            data = value
        elif isinstance(value, int) and not isinstance(value, bool):
            data = b"%d" % value
        else:
            raise TypeError(f"script argument of type {type(value).__name__}: {value!r}")
        return b"$%d\r\n%s\r\n" % (len(data), data)


def checkout_args(pool: Any) -> tuple[str, ...]:
    """What ``pool.get_connection`` needs: a command name before redis-py 5.3, none after
    (passing one there is deprecated)."""
    try:
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        return ()
    if parameter is None or parameter.default is not inspect.Parameter.empty:
        return ()
    return ("EVALSHA",)


def unread(conn: Any) -> bool:
    """Whether a sync redis-py connection ``conn`` holds reply bytes it has received but not
    parsed yet (its parser's buffer, or a TLS record already decrypted): what to read before
    its socket is asked again. Without a parser that can tell (an older redis-py), redis-py's
    own ``can_read(timeout=0)``, which also polls the socket."""
    sock = conn._sock
    if sock is not None and hasattr(sock, "pending") and sock.pending():
        return True
    parser = conn._parser
    reader = getattr(parser, "_reader", None)
    if reader is not None and hasattr(reader, "has_data"):
        return bool(reader.has_data())  # hiredis
    buffer = getattr(parser, "_buffer", None)
    if buffer is not None and hasattr(buffer, "unread_bytes"):
        return bool(buffer.unread_bytes())  # redis-py's own parsers
    return bool(conn.can_read(timeout=0))


NOT_ENOUGH_DATA: Any = getattr(_hiredis_parser, "NOT_ENOUGH_DATA", False)
"""What hiredis's reader gives while no whole reply is buffered (``False`` before redis-py 8)."""


def hiredis_parser(conn: Any) -> Any:
    """The hiredis parser of redis-py's asyncio connection ``conn``, or ``None`` (one of
    redis-py's Python parsers, or a redis-py without hiredis support)."""
    parser = getattr(conn, "_parser", None)
    if _HiredisParser is None or not isinstance(parser, _HiredisParser):
        return None
    return parser


def buffered_reply(parser: Any) -> Any:
    """The next reply already in ``parser``'s buffer (a hiredis parser of redis-py's), as
    redis-py's ``read_response`` would return it (an error reply as a ``ResponseError``, not
    raised; a push message as it is), or ``NOT_ENOUGH_DATA`` when a whole one is not there."""
    reader = parser._reader
    if reader is None or not parser._connected:
        return NOT_ENOUGH_DATA  # (the awaited read raises redis-py's own error)
    reply = reader.gets()
    if isinstance(reply, list):
        if reply and isinstance(reply[0], redis.exceptions.ConnectionError):
            raise reply[0]
    elif isinstance(reply, redis.exceptions.ConnectionError):
        raise reply
    return reply
