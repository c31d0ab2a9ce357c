"""Every script that publishes takes the command ('publish' or 'spublish') as an argument and,
on every server, refuses any other before it changes anything."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis
from unit.test_pubsub import _publishing_calls
from unit.test_scripts import publish_argument

import redlease
from redlease._core.keys import CLASSIC
from redlease._core.requests import Call
from redlease.testing import RedisServer

CALLS = list(_publishing_calls(CLASSIC))


def _with_command(call: Call, command: str) -> Call:
    index = publish_argument(call.script.source.decode())
    assert index is not None
    args = list(call.args)
    args[index - 1] = command
    return replace(call, args=tuple(args))


@pytest.mark.parametrize("call", CALLS, ids=[c.script.name for c in CALLS])
def test_only_publish_or_spublish_is_run(server: RedisServer, call: Call) -> None:
    with redis.Redis.from_url(server.url) as raw:
        for bad in ("del", "flushall", "PUBLISH", ""):
            wrong = _with_command(call, bad)
            with pytest.raises(redis.ResponseError, match="must be publish or spublish"):
                raw.eval(wrong.script.source, len(wrong.keys), *wrong.keys, *wrong.args)
        good = _with_command(call, "publish")
        raw.eval(good.script.source, len(good.keys), *good.keys, *good.args)


def test_a_refused_command_changes_nothing(server: RedisServer, name: str) -> None:
    """A held lock survives a force-release whose publish command is refused."""
    with redlease.Client.from_url(server.url) as client, redis.Redis.from_url(server.url) as raw:
        lock = client.lock(name)
        assert lock.acquire(lease=30)
        force = next(lock._force_release_op())
        assert isinstance(force, Call)
        wrong = _with_command(force, "del")
        with pytest.raises(redis.ResponseError):
            raw.eval(wrong.script.source, len(wrong.keys), *wrong.keys, *wrong.args)
        assert lock.locked() and lock.owned()
        lock.release()
