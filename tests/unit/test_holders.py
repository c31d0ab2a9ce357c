"""Holder records: passwords never stored, records read back whatever is in them."""

from __future__ import annotations

import json
import os
import shlex
from urllib.parse import quote

import pytest

from redlease import HolderInfo
from redlease._shared.holders import (
    MAX_INFO,
    client_of,
    parse,
    record,
    record_key,
    scrub_text,
    scrub_words,
)


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["mysql", "-pSECRET", "-u", "root"], ["mysql", "-p***", "-u", "root"]),
        (["app", "--password=SECRET"], ["app", "--password=***"]),
        (["app", "--db-password", "SECRET", "x"], ["app", "--db-password", "***", "x"]),
        (["app", "--token", "SECRET"], ["app", "--token", "***"]),
        (["app", "--api-key=SECRET"], ["app", "--api-key=***"]),
        (["env", "PGPASSWORD=SECRET", "psql"], ["env", "PGPASSWORD=***", "psql"]),
        (["redis-cli", "-a", "SECRET", "ping"], ["redis-cli", "-a", "***", "ping"]),
        (["app", "redis://u:SECRET@h:6379/0"], ["app", "redis://u:***@h:6379/0"]),
        (["app", "--url=rediss://:SECRET@h"], ["app", "--url=rediss://:***@h"]),
        (["sleep", "60"], ["sleep", "60"]),
        (["ls", "-a", "/tmp"], ["ls", "-a", "/tmp"]),
    ],
)
def test_what_looks_like_a_password_is_masked(argv: list[str], shown: list[str]) -> None:
    assert scrub_words(argv) == shown
    assert "SECRET" not in scrub_text(" ".join(argv))


def test_a_description_keeps_its_spacing_and_is_cut() -> None:
    assert scrub_text("nightly  report for postgres://a:SECRET@db/x") == (
        "nightly  report for postgres://a:***@db/x"
    )
    long = scrub_text("x" * (MAX_INFO * 2))
    assert len(long) == MAX_INFO and long.endswith("...")


def test_a_record_round_trips() -> None:
    stored = record("sleep 60")
    info = parse(stored.encode())
    assert info is not None
    assert info.pid == os.getpid() and info.info == "sleep 60" and info.host and info.process
    assert info.as_json() == json.loads(stored)


@pytest.mark.parametrize("junk", [b"", b"not json", b"[1, 2]", b'{"pid": "x", "host": 3}'])
def test_a_record_that_is_not_one_is_read_as_unknown(junk: bytes) -> None:
    info = parse(junk)
    assert info is None or info == HolderInfo()


def test_keys() -> None:
    owner = "0f0e0d0c-0b0a-0908-0706-050403020100:17"
    assert client_of(owner) == "0f0e0d0c-0b0a-0908-0706-050403020100"
    assert record_key(client_of(owner)) == "redlease:client:{0f0e0d0c-0b0a-0908-0706-050403020100}"


def test_a_switch_named_like_a_secret_takes_no_value() -> None:
    argv = ["redis-cli", "--no-auth-warning", "ping"]
    assert scrub_words(argv) == argv


@pytest.mark.parametrize(
    "secret", ["hunter2", "p@ss word", "it's", "a/b?c"], ids=["plain", "space", "quote", "url"]
)
def test_the_clients_own_password_is_masked_anywhere(secret: str) -> None:
    """The client's password is masked where no rule sees a password: inside a script, a
    positional argument, percent-encoded in a URL, quoted by shlex.join."""
    argv = ["sh", "-c", f"echo {secret} | app", f"x{secret}y", f"redis://h/0?password={secret}"]
    for text in (" ".join(argv), shlex.join(argv), quote(secret, safe="")):
        scrubbed = scrub_text(text, secrets=[secret])
        assert secret not in scrubbed
        assert quote(secret, safe="") not in scrubbed
        assert "***" in scrubbed
    assert scrub_text("nothing to hide", secrets=["", "hunter2"]) == "nothing to hide"


@pytest.mark.parametrize("secret", ["a", "pw", "abc"])
def test_a_short_password_is_masked_only_where_it_stands_apart(secret: str) -> None:
    """A password of 1-3 characters is masked as a word of its own (a command's argument, in
    a URL, quoted), not inside other words: masking every "a" of a description would make it
    unreadable and show where the password's letters are."""
    text = f"backup abcdef pwd {secret} redis://:{secret}@h/0 '{secret}'"
    scrubbed = scrub_text(text, secrets=[secret])
    assert scrubbed == "backup abcdef pwd *** redis://:***@h/0 '***'"
