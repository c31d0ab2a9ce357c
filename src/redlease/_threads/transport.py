"""How a thread client's script call reaches the socket: the twin of ``_asyncio/transport.py``.

A command packed by redlease (``_wire.Packer``) is written on a connection the client keeps
checked out between calls (``send_checked_out``), and its reply read, in the calling thread. A
thread's call cannot be cancelled midway, so there is nothing to read late. There is no
pipeline on threads (``Client`` has no ``pipeline`` option).
"""

from __future__ import annotations

from typing import Any

import redis.exceptions

from .._redis.errors import HUNG, Hung
from .._redis.wire import SPARE_CONNECTIONS


def drop_idle(pool: Any) -> None:
    """Close the idle connections of ``pool`` (a call's connection failed: the others most
    likely died with it); redis-py closes them under the pool's lock, so none is handed out
    meanwhile."""
    pool.disconnect(inuse_connections=False)


def send_checked_out(pool: Any, checkout: tuple[str, ...], spare: list[Any], packed: bytes) -> Any:
    """A command packed by redlease, on a connection kept between calls (``spare``, at most
    ``SPARE_CONNECTIONS``; else one from ``pool``); a dead connection is retried as redis-py's
    own commands are (the connection's ``retry``)."""
    try:
        conn = spare.pop()
    except IndexError:
        conn = pool.get_connection(*checkout)

    def send() -> Any:
        try:
            conn.send_packed_command([packed])
            return conn.read_response()
        except HUNG as exc:  # a hung server: redis-py's retry would only wait again
            raise Hung(exc) from exc

    def failed(_: Exception) -> None:
        conn.disconnect()

    try:
        reply = conn.retry.call_with_retry(send, failed)
    except redis.exceptions.ResponseError:
        spare.append(conn)  # an error reply, read whole: the connection is fine
        raise
    except BaseException as exc:
        conn.disconnect()  # nothing or half a reply read: never reuse it as it is
        pool.release(conn)
        if isinstance(exc, Hung):
            raise exc.error from None
        raise
    if len(spare) < SPARE_CONNECTIONS:
        spare.append(conn)
    else:
        pool.release(conn)
    return reply
