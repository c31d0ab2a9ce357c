"""The hot path's packer writes exactly the bytes redis-py would send for the same command."""

from __future__ import annotations

import pytest
import redis.connection

from redlease._core import scripts
from redlease._core.requests import Call
from redlease._redis.wire import Packer, checkout_args


def _redis_py_bytes(*args: object, encoding: str = "utf-8") -> bytes:
    # redis-py's own serializer (with hiredis installed redis-py packs with hiredis, which
    # ignores the client's encoding)
    conn = redis.connection.Connection(encoding=encoding)
    serializer = redis.connection.PythonRespSerializer(conn._buffer_cutoff, conn.encoder.encode)
    return b"".join(serializer.pack(*args))


@pytest.mark.parametrize(
    ("keys", "args"),
    [
        (("order:42", "redisson_lock__channel:{order:42}"), ("owner:1", 0, 30000)),
        (("заказ:7",), ("владелец:2", -1, b"\x00\xffraw")),
        ((), ()),
        (("k",), (10**18, "", "with\r\nnewline")),
    ],
)
def test_evalsha_matches_redis_py(keys, args):
    call = Call(scripts.LOCK_ACQUIRE, keys, args)
    expected = _redis_py_bytes("EVALSHA", scripts.LOCK_ACQUIRE.sha, len(keys), *keys, *args)
    packer = Packer()
    assert packer.pack(call) == expected
    assert packer.pack(call) == expected  # the cached head gives the same bytes


def test_the_client_encoding_is_used():
    call = Call(scripts.LOCK_RELEASE, ("café",), ("naïve", 1))
    expected = _redis_py_bytes(
        "EVALSHA", scripts.LOCK_RELEASE.sha, 1, "café", "naïve", 1, encoding="latin-1"
    )
    assert Packer("latin-1").pack(call) == expected


def test_same_keys_with_other_arguments_are_not_confused():
    packer = Packer()
    one = Call(scripts.LOCK_RELEASE, ("a",), ("x",))
    two = Call(scripts.LOCK_RELEASE, ("a",), ("x", "y"))
    assert packer.pack(one) == _redis_py_bytes("EVALSHA", scripts.LOCK_RELEASE.sha, 1, "a", "x")
    assert packer.pack(two) == _redis_py_bytes(
        "EVALSHA", scripts.LOCK_RELEASE.sha, 1, "a", "x", "y"
    )


def test_other_commands():
    assert Packer().command("SCRIPT", "LOAD", b"return 1") == _redis_py_bytes(
        "SCRIPT", "LOAD", b"return 1"
    )


@pytest.mark.parametrize("bad", [True, 1.5, None, object()])
def test_an_argument_of_another_type_is_refused(bad):
    with pytest.raises(TypeError, match="script argument"):
        Packer().pack(Call(scripts.LOCK_RELEASE, ("k",), (bad,)))


def test_checkout_passes_a_command_name_only_where_redis_py_needs_one():
    major, minor = (int(part) for part in redis.__version__.split(".")[:2])
    expected = () if (major, minor) >= (5, 3) else ("EVALSHA",)
    assert checkout_args(redis.ConnectionPool()) == expected
