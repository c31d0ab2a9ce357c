"""One token sequence with Java's ``RFencedLock`` (issue 35 part 3): a Java thread's
``RFencedLock`` (``redlease.testing.redisson.RedissonFencedLock``: Redisson's keys, arguments
and script effects, ``INCR`` of ``redisson_lock_token:{name}`` at every acquisition) and
redlease's ``client.lock`` on the same name take their tokens from one key, so that a
resource guarded by both accepts each current holder's write, before and after a failover to
a replica that missed the last tokens; on names with and without braces."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from integration.test_lock_guarantees import Failover

from redlease import StaleTokenError
from redlease._core.keys import lock_token_key
from redlease.testing.redisson import RedissonFencedLock
from redlease.testing.servers import ServerBinary

FORMS = ["plain", "{order}:42", "a{b}c"]
ROUNDS = 4


def unique(form: str) -> str:
    """A fresh name of the given form: no braces, braces around a prefix, braces inside."""
    tag = uuid.uuid4().hex[:8]
    forms = {"plain": f"plain-{tag}", "{order}:42": f"{{order-{tag}}}:42"}
    return forms.get(form, f"a{{b-{tag}}}c")


@pytest.fixture(params=FORMS)
def lock_name(request: pytest.FixtureRequest) -> str:
    return unique(request.param)


@pytest.fixture
def failover(binary: ServerBinary) -> Iterator[Failover]:
    setup = Failover(binary)
    try:
        yield setup
    finally:
        setup.close()


class Guarded:
    """A resource both sides guard: a Redis string written with ``fenced_set`` (it refuses a
    token below the highest it has seen), through the redlease client of the test."""

    def __init__(self, side: Any, client: Any, name: str) -> None:
        self.side = side
        self.client = client
        self.key = f"resource:{name}"
        self.accepted: list[tuple[str, int]] = []

    async def write(self, who: str, token: int) -> None:
        await self.side(self.client.fenced_set(self.key, f"{who} {token}", token))
        self.accepted.append((who, token))


async def java_turn(java: RedissonFencedLock, guarded: Guarded, tokens: list[int]) -> None:
    token = java.try_lock_and_get_token(10)
    assert token is not None, "the Java thread could not take the free lock"
    assert java.get_token() == token
    await guarded.write("java", token)
    tokens.append(token)
    assert java.unlock()


async def redlease_turn(side: Any, lock: Any, guarded: Guarded, tokens: list[int]) -> None:
    async with side.hold(lock, timeout=10) as lease:
        token = lease.fencing_token
        await guarded.write("redlease", token)
        tokens.append(token)


async def test_alternating_java_and_redlease_holders_share_one_increasing_sequence(
    side, server, lock_name
):
    """Java, redlease, Java, ... each takes the lock in turn: every token is above every one
    before it, from either side, and the guarded resource accepts every holder's write. (On
    redlease's own counter Java's tokens 1, 2, ... stay below redlease's first, and the
    resource refuses every Java write after it.) A Java re-entry takes a token of its own
    (Redisson INCRs at every acquisition), still above redlease's."""
    client = side.client(server.url)
    lock = client.lock(lock_name)
    guarded = Guarded(side, client, lock_name)
    java = RedissonFencedLock(server.url, lock_name)
    tokens: list[int] = []
    try:
        for _ in range(ROUNDS):
            await java_turn(java, guarded, tokens)
            await redlease_turn(side, lock, guarded, tokens)
        # Java re-enters its own hold: a fresh token from the same key, above redlease's
        outer = java.try_lock_and_get_token(10)
        inner = java.try_lock_and_get_token(10)
        assert outer is not None and inner is not None
        tokens += [outer, inner]
        assert not java.unlock() and java.unlock()
        await redlease_turn(side, lock, guarded, tokens)
    finally:
        java.close()
    assert tokens == sorted(set(tokens)), f"tokens not strictly increasing: {tokens}"
    assert [t for _, t in guarded.accepted] == [t for t in tokens if t not in (outer, inner)]
    raw = redis.Redis.from_url(server.url)
    try:  # the key Java INCRs is the one redlease counts in, left at the last token
        assert int(raw.get(lock_token_key(lock_name)) or 0) == tokens[-1]
    finally:
        raw.close()


async def test_a_java_holder_after_a_redlease_holder_is_not_refused(side, server, lock_name):
    """The old defect in one step: redlease holds first (its token is the server clock in
    microseconds), then Java: Java's write must be accepted, an older holder's refused."""
    client = side.client(server.url)
    lock = client.lock(lock_name)
    guarded = Guarded(side, client, lock_name)
    java = RedissonFencedLock(server.url, lock_name)
    tokens: list[int] = []
    try:
        await redlease_turn(side, lock, guarded, tokens)
        await java_turn(java, guarded, tokens)
        with pytest.raises(StaleTokenError):  # the earlier redlease holder, late
            await side(client.fenced_set(guarded.key, "late", tokens[0]))
    finally:
        java.close()
    assert tokens[1] > tokens[0]


async def test_tokens_keep_increasing_for_both_sides_after_a_failover(side, failover):
    """Both sides take the lock on the master; the replica stops copying; both take it again
    (the replica misses those tokens); the replica is promoted. redlease's next token is above
    every token either side had (its time floor), and the counter is lifted to it, so Java's
    next token is above that; the guarded resource (on another server, not failed over)
    accepts each holder's write throughout."""
    name = unique("plain")
    client = side.client(failover.link.url, socket_timeout=2, socket_connect_timeout=2)
    guard_client = side.client(failover.master.url)  # the resource: stays on the old master
    lock = client.lock(name)
    guarded = Guarded(side, guard_client, name)
    tokens: list[int] = []
    java = RedissonFencedLock(failover.link.url, name)
    try:
        await java_turn(java, guarded, tokens)
        await redlease_turn(side, lock, guarded, tokens)
        failover.replica_falls_behind()
        await java_turn(java, guarded, tokens)
        await redlease_turn(side, lock, guarded, tokens)
        await java_turn(java, guarded, tokens)
    finally:
        java.close()
    failover.fail_over()
    stale = redis.Redis.from_url(failover.replica.url)
    try:
        assert int(stale.get(lock_token_key(name)) or 0) < tokens[-1]  # the copy is behind
    finally:
        stale.close()
    await redlease_turn(side, lock, guarded, tokens)
    java = RedissonFencedLock(failover.link.url, name)  # Java reconnects to the new master
    try:
        await java_turn(java, guarded, tokens)
    finally:
        java.close()
    assert tokens == sorted(set(tokens)), f"tokens not strictly increasing: {tokens}"
    assert [t for _, t in guarded.accepted] == tokens


def test_a_name_whose_braces_form_no_tag_is_refused():
    """The token key must share the lock key's cluster slot: ``redisson_lock_token:{name}``
    does for a plain name (its tag is the name, which is the plain key's hash); a name with
    braces that form no tag would put it elsewhere."""
    assert lock_token_key("orders") == "redisson_lock_token:{orders}"
    assert lock_token_key("{order}:42") == "redisson_lock_token:{order}:42"
    for bad in ("a{b", "a}b", "a{}b"):
        with pytest.raises(ValueError, match="braces"):
            lock_token_key(bad)
