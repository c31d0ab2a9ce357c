"""The script of ``release(keep_for=)`` (``lock_release_keep.lua``): its header against the call
the core makes, and its receipts' lifetime against the plain release's."""

from __future__ import annotations

from redlease._core.keep import RELEASE_KEEP, release_keep, release_keep_call
from redlease._core.lock import RECEIPT_MS

from ._fakes import KEYS, OWNER, first_call
from .test_scripts import header_arity


def test_the_header_matches_the_call() -> None:
    call = release_keep_call(KEYS, OWNER, request_id="r", token=7, keep_ms=1000)
    assert call.script is RELEASE_KEEP
    assert header_arity("lock_release_keep", 1) == (len(call.keys), len(call.args)) == (2, 6)
    assert call.keys == (KEYS.name, KEYS.receipts)  # the plain release's receipts key
    assert all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in call.args)


def test_the_operation_sends_that_call_once() -> None:
    op = release_keep(KEYS, OWNER, request_id="r", token=7, keep_ms=1500, unsure=True)
    call = first_call(op)
    assert call.args == (OWNER, 1, "r", 7, 1500, 1)
    try:
        op.send([1, 0, 1500])
    except StopIteration as stop:
        assert stop.value == 0
    else:
        raise AssertionError("the operation sent more than one call")


def test_receipts_last_as_long_as_the_plain_release_s() -> None:
    source = RELEASE_KEEP.source.decode()
    assert f"'px', {RECEIPT_MS})" in source  # a rewrite
    assert f"redis.call('pexpire', KEYS[2], {RECEIPT_MS})" in source  # an append
