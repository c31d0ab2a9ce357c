"""Every error of the public API is a ``RedleaseError`` (and the builtin it resembles), with
the raw error as its ``__cause__`` and never its own cause: an ACL user without a command, a
key of another type, a server that does not speak Redis, a wrong password, a closed client,
an argument of the wrong type, a bad URL. Real servers; sync and asyncio."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import redlease
from redlease import (
    ClientClosedError,
    InvalidArgumentError,
    PermissionDeniedError,
    RedleaseError,
    ServerError,
    ServerUnavailableError,
    WrongTypeError,
)
from redlease._redis.errors import translate
from redlease.testing import RedisServer


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and its ``__cause__`` chain, failing on a loop (bounded)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None:
        assert id(current) not in seen, f"__cause__ loop at {current!r}"
        assert len(chain) < 20
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__
    return chain


def check(exc: BaseException, *builtin: type[BaseException]) -> None:
    """A ``RedleaseError``, also each ``builtin``, whose cause chain ends without a loop."""
    assert isinstance(exc, RedleaseError), repr(exc)
    for kind in builtin:
        assert isinstance(exc, kind), (exc, kind)
    assert exc.__cause__ is not exc
    causes(exc)


async def raised(side: Any, call: Any) -> BaseException:
    """What ``call()`` raised (sync), or what awaiting it raised (asyncio)."""
    try:
        await side(call())
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


@pytest.fixture
def acl_user(server: RedisServer) -> Iterator[str]:
    """A user allowed everything but scripts and PUBLISH: ``redis://bob:...@host:port``."""
    raw = redis.Redis.from_url(server.url)
    user = f"bob{threading.get_ident() % 1000}"
    raw.execute_command(
        "ACL", "SETUSER", user, "reset", "on", ">bobpw", "~*", "&*", "+@all",
        "-evalsha", "-eval", "-publish",
    )  # fmt: skip
    try:
        yield f"redis://{user}:bobpw@{server.host}:{server.port}/0"
    finally:
        raw.execute_command("ACL", "DELUSER", user)
        raw.close()


async def test_a_user_without_scripts_gets_permission_denied_naming_the_command(
    side: Any, acl_user: str, name: str
) -> None:
    client = side.client(acl_user)
    exc = await raised(side, lambda: client.lock(name).acquire(blocking=False))
    check(exc, PermissionDeniedError, PermissionError)
    assert isinstance(exc, PermissionDeniedError)
    assert exc.command == "evalsha"
    assert exc.name == name
    assert "bob" in str(exc)
    assert isinstance(exc.__cause__, redis.exceptions.NoPermissionError)


async def test_a_key_of_another_type_is_a_wrong_type_error_with_its_type(
    side: Any, server: RedisServer, name: str
) -> None:
    raw = redis.Redis.from_url(server.url)
    raw.rpush(name, "x")
    try:
        client = side.client(server.url)
        exc = await raised(side, lambda: client.lock(name).acquire(blocking=False))
        check(exc, WrongTypeError, InvalidArgumentError, ValueError)
        assert isinstance(exc, WrongTypeError)
        assert exc.name == name
        assert exc.key_type in ("list", "")  # a script of redlease's may not say the type
        assert isinstance(exc.__cause__, redis.exceptions.ResponseError)
        assert raw.lrange(name, 0, -1) == [b"x"]  # nothing written or deleted
    finally:
        raw.delete(name)
        raw.close()


@pytest.fixture
def http_port() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers every connection like an HTTP server."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


async def test_a_server_that_is_not_redis_is_unavailable_and_said_so(
    side: Any, http_port: int, name: str
) -> None:
    client = side.client(f"redis://127.0.0.1:{http_port}/0")
    exc = await raised(side, lambda: client.lock(name).acquire(blocking=False))
    check(exc, ServerUnavailableError, ConnectionError)
    assert "did not answer as Redis does" in str(exc)
    assert f"127.0.0.1:{http_port}" in str(exc)


async def test_a_wrong_password_is_permission_denied_not_an_outage(
    side: Any, acl_user: str, name: str
) -> None:
    client = side.client(acl_user.replace(":bobpw@", ":wrong@"), socket_timeout=5)
    exc = await raised(side, lambda: client.lock(name).acquire(timeout=30))  # not ridden out
    check(exc, PermissionDeniedError, PermissionError)
    assert isinstance(exc, PermissionDeniedError)
    assert exc.command == "auth"
    assert "wrong" not in str(exc) and "wrong" not in repr(exc)


async def test_every_call_after_close_is_client_closed(
    side: Any, server: RedisServer, name: str
) -> None:
    client = side.client(server.url)
    lock = client.lock(name)
    semaphore, latch = client.semaphore(f"{name}:s"), client.latch(f"{name}:l")
    await side(client.close())
    calls = [
        lambda: lock.acquire(blocking=False),
        lambda: lock.acquire(timeout=1),
        lambda: lock.locked(),
        lambda: lock.ttl(),
        lambda: lock.force_release(),
        lambda: semaphore.acquire(timeout=0),
        lambda: semaphore.available(),
        lambda: semaphore.try_set_permits(3),
        lambda: latch.count(),
        lambda: client.fenced_get(f"{name}:r", 1),
    ]
    for call in calls:
        exc = await raised(side, call)
        check(exc, ClientClosedError, RuntimeError)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_arguments_of_the_wrong_type_are_invalid_argument_errors(kind: str) -> None:
    client_cls = redlease.AsyncClient if kind == "async" else redlease.Client
    redlock_cls = redlease.AsyncRedlockClient if kind == "async" else redlease.RedlockClient
    for bad in (
        lambda: client_cls(42),  # type: ignore[arg-type]
        lambda: client_cls.from_url(42),  # type: ignore[arg-type]
        lambda: redlock_cls([object()]),  # type: ignore[list-item]
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            bad()
        check(caught.value, ValueError, TypeError)  # a TypeError too, as Python code expects


@pytest.mark.parametrize(
    "url",
    [
        "nonsense://",
        "redis://:s3cret@localhost:99999999",
        "redis://:s3cret@localhost:port",
        "redis://:hun/ter2@localhost:6379",
        "redis://:hunter2?x@localhost:6379",
        "redis://:hunter2#x@localhost:6379",
        "redis://:12/s3cret@localhost:6379",
        "redis+sentinel://:s3c/ret@localhost/m",
    ],
)
def test_a_bad_url_is_invalid_argument_without_its_password(url: str) -> None:
    for factory in (redlease.Client.from_url, redlease.AsyncClient.from_url):
        with pytest.raises(InvalidArgumentError) as caught:
            factory(url)
        exc = caught.value
        check(exc, ValueError)
        shown = "".join(f"{e!s} {e!r}" for e in causes(exc))
        for secret in ("s3cret", "s3c", "hun", "ter2", "hunter2", "12/"):
            if secret in url:
                assert secret not in shown, shown


def test_translation_never_returns_the_raw_error_and_keeps_it_as_cause() -> None:
    raw = [
        redis.exceptions.ResponseError("ERR something odd"),
        redis.exceptions.NoPermissionError(
            "User u has no permissions to run the 'publish' command"
        ),
        redis.exceptions.ResponseError(
            "NOPERM User u has no permissions to run the 'publish' command script: x"
        ),
        redis.exceptions.ResponseError("WRONGTYPE redlease: key k holds a string, not a lock"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
        redis.exceptions.InvalidResponse("Protocol Error: b'HTTP/1.1'"),
        redis.exceptions.AuthenticationError("invalid username-password pair"),
        redis.exceptions.AuthorizationError("no auth"),
        redis.exceptions.ConnectionError("gone"),
        redis.exceptions.TimeoutError("slow"),
        redis.exceptions.RedisClusterException("Redis Cluster cannot be connected"),
        redis.exceptions.DataError("Invalid input of type: 'dict'"),
        OSError("reset"),
    ]
    expected = [
        ServerError,
        PermissionDeniedError,
        PermissionDeniedError,
        WrongTypeError,
        WrongTypeError,
        ServerUnavailableError,
        PermissionDeniedError,
        PermissionDeniedError,
        ServerUnavailableError,
        ServerUnavailableError,
        ServerUnavailableError,
        InvalidArgumentError,
        ServerUnavailableError,
    ]
    for exc, kind in zip(raw, expected, strict=True):
        new = translate(exc, "h:1", "n")
        assert type(new) is kind, (exc, new)
        assert new is not exc
    publish = translate(raw[2], "h:1", "n")
    assert isinstance(publish, PermissionDeniedError) and publish.command == "publish"
    lua = translate(raw[3], "h:1", "n")
    assert isinstance(lua, WrongTypeError) and (lua.name, lua.key_type) == ("k", "string")


async def test_an_unexpected_error_reply_is_a_server_error_caused_by_it_not_itself(
    side: Any, acl_user: str, server: RedisServer, name: str
) -> None:
    # a user allowed scripts but not the keys of the lock: the server refuses with NOPERM
    raw = redis.Redis.from_url(server.url)
    user = acl_user.split("//")[1].split(":")[0]
    raw.execute_command("ACL", "SETUSER", user, "+evalsha", "+eval", "resetkeys", "~other:*")
    try:
        client = side.client(acl_user)
        exc = await raised(side, lambda: client.lock(name).acquire(blocking=False))
        check(exc, PermissionDeniedError)
        chain = causes(exc)
        assert isinstance(chain[-1], redis.exceptions.RedisError)
        assert all(isinstance(e, RedleaseError) for e in chain[:-1])
    finally:
        raw.close()
