"""Small things of the command line (issue 32): ``list --json`` shows a lock as ``status
--json`` does (waiters and fencing token read, not null), counts read in the singular when
one, and ``bench`` says where its server came from."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis

from redlease import Client

from .helpers import assert_one_line, call_cli, cli_env, eventually, finish, run_cli, start_cli


@pytest.fixture
def holder(url: str) -> Iterator[Client]:
    with Client.from_url(url) as client:
        yield client


@pytest.fixture
def prefix() -> str:
    return f"cli:{uuid.uuid4().hex[:8]}:"


def test_list_json_shows_a_lock_as_status_does(
    url: str, prefix: str, holder: Client, r: redis.Redis
) -> None:
    name = f"{prefix}job"
    assert holder.lock(name).acquire(lease=60)
    waiter = start_cli("run", "--url", url, "-w", "30", name, sys.executable, "-c", "")
    try:
        eventually(
            lambda: holder.lock(name).statistics().waiters == 1, what="a waiter", proc=waiter
        )
        (listed,) = json.loads(call_cli("list", "--url", url, "--json", f"{prefix}*").stdout)
        (shown,) = json.loads(call_cli("status", "--url", url, "--json", name).stdout)
    finally:
        holder.lock(name).release()
        assert finish(waiter)[0] == 0
    assert listed["waiters"] == shown["waiters"] == 1  # list said null
    assert listed["fencing_token"] == shown["fencing_token"] > 0
    del listed["ttl"], shown["ttl"]
    assert listed == shown


def test_list_limit_1_says_lock(url: str, prefix: str, holder: Client) -> None:
    for i in range(2):
        assert holder.lock(f"{prefix}{i}").acquire(lease=60)
    result = call_cli("list", "--url", url, "--limit", "1", f"{prefix}*")
    assert result.returncode == 0, result.stderr
    line = assert_one_line(result.stderr)
    assert "the first 1 lock found (--limit 1)" in line  # was "1 locks"


@pytest.mark.parametrize("from_env", [False, True])
def test_bench_says_where_its_url_came_from(url: str, from_env: bool) -> None:
    args = ["bench", "--seconds", "0.2", "--threads", "1"]
    if from_env:
        result = run_cli(*args, env=cli_env(REDLEASE_URL=url))
    else:
        result = run_cli(*args, "--url", url)
    assert result.returncode == 0, result.stderr
    said = "given by $REDLEASE_URL" if from_env else "given by --url"
    assert said in result.stdout.splitlines()[0], result.stdout
