"""A password is never printed: not in ``str``/``repr`` of an error (nor its causes), not in
the logs, not in what the CLI writes. Passwords of every shape, found in a URL by its
structure: an unencoded ``/``, ``?``, ``#``, ``@`` or ``:`` in a password is masked (or the
URL refused with a message that does not quote it), and a one-character password such as
``1`` neither leaks nor garbles messages. Real servers (``--requirepass``, ACL users)."""

from __future__ import annotations

import contextlib
import io
import logging
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pytest
import redis
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import redlease
from redlease import InvalidArgumentError, PermissionDeniedError, RedleaseError
from redlease._redis.urls import masked_url
from redlease.cli import main as cli_main
from redlease.testing import RedisServer

STRUCTURAL = "/?#@:% []"
"""Characters that mean something in a URL, or that percent-decoding changes."""

passwords = st.text(
    alphabet=st.sampled_from(list(STRUCTURAL) + list("aZ19-_.!~*'()$&+,;é\u2603")),
    min_size=1,
    max_size=24,
)


def shape(password: str) -> str:
    """A different password of the same shape: every character that is not structural
    replaced, so a message that does not quote the password stays the same."""
    return "".join(c if c in STRUCTURAL else ("Q" if c != "Q" else "R") for c in password)


def shown(exc: BaseException) -> str:
    """Everything a traceback or a log could print about ``exc`` and its causes."""
    parts: list[str] = []
    current: BaseException | None = exc
    for _ in range(10):
        if current is None:
            break
        parts += [type(current).__name__, str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def outcome(fn: Any) -> str:
    try:
        fn()
    except Exception as exc:
        return shown(exc)
    return "ok"


def cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(password=passwords)
def test_a_url_is_masked_by_its_structure_whatever_the_password(password: str) -> None:
    assume("=" not in password)
    for user in ("", "app"):
        for pw in (password, quote(password, safe="")):
            url = f"redis://{user}:{pw}@127.0.0.1:6380/0?socket_timeout=1"
            assert masked_url(url) == f"redis://{user}:***@127.0.0.1:6380/0?socket_timeout=1"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(password=passwords)
@example(password="%11")  # unencoded, a URL's "%11" is "\x11": the server refuses that password
def test_errors_and_cli_output_never_depend_on_the_password(
    acl_server: RedisServer, password: str
) -> None:
    """What is printed for a URL with ``password`` is exactly what is printed for another
    password of the same shape: nothing of it is quoted, and nothing else is garbled."""
    other = shape(password)
    assume(other != password)
    host = f"{acl_server.host}:{acl_server.port}"
    user = f"u{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(acl_server.url)
    raw.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    try:
        name = f"pw:{uuid.uuid4().hex[:8]}"

        def url(pw: str, *, encode: bool) -> str:
            return f"redis://{user}:{quote(pw, safe='') if encode else pw}@{host}/0"

        # the right password, percent-encoded: it works
        def lock_call(u: str) -> Any:
            def run() -> None:
                with redlease.Client.from_url(u) as c:
                    assert c.lock(name).acquire(blocking=False)
                    c.lock(name).release()

            return run

        # the right password, percent-encoded: it works
        assert outcome(lock_call(url(password, encode=True))) == "ok"
        # the right password unencoded: it works, or is refused without being quoted (or, where
        # it holds a valid percent-escape, it is decoded as any URL's, and the server refuses it)
        done = outcome(lock_call(url(password, encode=False)))
        decoded_differs = unquote(password) != password
        assert (
            done == "ok"
            or "bad Redis URL" in done
            or (decoded_differs and done.startswith("PermissionDeniedError\n"))
        ), done
        if done != "ok":  # refused for its structure: as another password of that shape is
            assert _same(done, outcome(lock_call(url(other, encode=False))))
        for encode in (True, False):
            # a wrong password: what is shown is the same for both shapes
            mine, theirs = url(password + "x", encode=encode), url(other + "x", encode=encode)
            assert _same(outcome(lock_call(mine)), outcome(lock_call(theirs)))
            code_a, out_a = cli("status", "--url", mine, name)
            code_b, out_b = cli("status", "--url", theirs, name)
            assert code_a == code_b
            assert _same(out_a, out_b)
    finally:
        raw.execute_command("ACL", "DELUSER", user)
        raw.close()


def _same(mine: str, theirs: str) -> bool:
    """Equal once the parts that differ from run to run (client ids, owners) are ignored;
    the password's text itself never makes them differ."""
    if mine == theirs:
        return True
    # client ids and owner fields are random: compare with them taken out
    import re

    strip = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(:\d+)?")
    return strip.sub("<id>", mine) == strip.sub("<id>", theirs)


NASTY = ["1", "hunter2/x?y#z@w:v", "p w%20&password=q", "@@@", "é/☃"]


@pytest.mark.parametrize("password", NASTY)
async def test_a_requirepass_server_with_a_nasty_password(
    side: Any, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="redlease")
    with RedisServer() as server:
        # requirepass set once the server answers (its start-up check pings without one)
        with redis.Redis.from_url(server.url) as admin:
            admin.config_set("requirepass", password)
        host = f"{server.host}:{server.port}"
        good = f"redis://:{quote(password, safe='')}@{host}/0"
        client = side.client(good)
        name = f"pw:{uuid.uuid4().hex[:8]}"
        assert await side(client.lock(name).acquire(blocking=False))
        await side(client.lock(name).release())
        code, out = cli("status", "--url", good, name)
        assert code == 0, out
        assert name in out  # nothing garbled (a scrubbed "1" would mangle the name)
        wrong = side.client(f"redis://:{quote(password + 'x', safe='')}@{host}/0")
        try:
            await side(wrong.lock(name).acquire(blocking=False))
        except PermissionDeniedError as exc:
            text = shown(exc)
        else:
            raise AssertionError("a wrong password was accepted")
        raw_url = f"redis://:{password}@{host}/0"
        try:
            unencoded = side.client(raw_url)
            await side(unencoded.lock(name).acquire(blocking=False))
            raw_text = ""
        except RedleaseError as exc:
            raw_text = shown(exc)
        code, cli_out = cli("status", "--url", raw_url, name)
        if len(password) > 1:  # "1" is in every address; the others must never be printed
            for where in (text, raw_text, cli_out, caplog.text):
                assert password not in where, where
                assert quote(password, safe="") not in where, where
        if code == 0:  # the unencoded URL could be read: its output is whole
            assert name in cli_out and "***" not in cli_out, cli_out
        else:
            assert "bad Redis URL" in cli_out or "authentication failed" in cli_out, cli_out
        assert host in text  # the address whole: nothing garbled


def test_a_bad_url_in_the_cli_is_one_line_without_its_password() -> None:
    for url in ("redis://:hunter2/x@localhost:6379", "redis://:hunter2@localhost:port"):
        code, out = cli("status", "--url", url, "x")
        assert code == 2
        assert "hunter2" not in out and "redis://:***@localhost" in out
    with pytest.raises(InvalidArgumentError) as caught:
        redlease.Client.from_url("redis://:hunter2/x@localhost:6379")
    assert "hunter2" not in shown(caught.value)
