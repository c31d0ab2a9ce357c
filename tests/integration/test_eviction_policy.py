"""A server whose eviction policy may delete a held lock's key: the client reads the policy at
its first use of the server (once, not per call) and warns, refuses or goes on as told; a user
who may not read it is not hindered. Real servers started with ``--maxmemory 100mb
--maxmemory-policy <policy>``, sync and asyncio."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import pytest
import redis

from redlease import EvictionPolicyError, InvalidArgumentError, RedleaseWarning
from redlease.testing import RedisServer, ServerBinary

EVICTING = [
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
]


def start(binary: ServerBinary, policy: str, maxmemory: str = "100mb") -> RedisServer:
    args = ("--maxmemory", maxmemory, "--maxmemory-policy", policy)
    return RedisServer(binary, extra_args=args).start()


@pytest.fixture
def evicting(binary: ServerBinary, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    with start(binary, getattr(request, "param", "volatile-lru")) as srv:
        yield srv


def config_calls(url: str) -> int:
    raw = redis.Redis.from_url(url)
    try:
        stats = raw.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_config"))
    finally:
        raw.close()


async def cycle(side, client, name: str) -> None:
    lock = client.lock(name)
    assert await side(lock.acquire(blocking=False))
    await side(lock.release())


@pytest.mark.parametrize("policy", EVICTING)
async def test_an_evicting_policy_is_warned_about_once(side, binary, name, policy, caplog):
    with start(binary, policy) as srv:
        client = side.client(srv.url)
        with (
            caplog.at_level(logging.WARNING, logger="redlease"),
            pytest.warns(RedleaseWarning, match=policy) as told,
        ):
            await cycle(side, client, name)
        # (pytest.warns records every warning: another test's objects collected meanwhile
        # may add a ResourceWarning)
        (warned,) = [w for w in told if issubclass(w.category, RedleaseWarning)]
        assert f"127.0.0.1:{srv.port}" in str(warned.message)  # names the server
        assert "noeviction" in str(warned.message)  # and what to configure
        logged = [r for r in caplog.records if r.name == "redlease" and policy in r.message]
        assert len(logged) == 1 and logged[0].levelno == logging.WARNING
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            for i in range(5):
                await cycle(side, client, f"{name}:{i}")
        assert [w for w in again if issubclass(w.category, RedleaseWarning)] == []
        (seen,) = await side(client.eviction_policies())
        assert (seen.policy, seen.maxmemory, seen.evictable) == (policy, 100 << 20, True)


async def test_noeviction_is_not_warned_about(side, binary, name):
    with start(binary, "noeviction") as srv:
        client = side.client(srv.url, eviction="refuse")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RedleaseWarning)
            await cycle(side, client, name)
        (seen,) = await side(client.eviction_policies())
        assert (seen.policy, seen.evictable, seen.source) == ("noeviction", False, "config")


async def test_no_memory_limit_means_nothing_is_evicted(side, binary, name):
    """maxmemory 0 (no limit, 64-bit): an evicting policy never evicts, so no warning and no
    refusal; the policy is still reported."""
    with start(binary, "allkeys-lru", maxmemory="0") as srv:
        client = side.client(srv.url, eviction="refuse")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RedleaseWarning)
            await cycle(side, client, name)
        (seen,) = await side(client.eviction_policies())
        assert (seen.policy, seen.maxmemory, seen.evictable) == ("allkeys-lru", 0, False)


@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-random"])
async def test_refuse_raises_before_anything_is_written(side, binary, name, policy):
    with start(binary, policy) as srv:
        client = side.client(srv.url, eviction="refuse")
        raw = redis.Redis.from_url(srv.url)
        for _ in range(2):  # every call refused, not only the first
            with pytest.raises(EvictionPolicyError) as info:
                await side(client.lock(name).acquire(blocking=False))
            assert info.value.policy == policy
            assert info.value.address == f"127.0.0.1:{srv.port}"
            assert policy in str(info.value) and "noeviction" in str(info.value)
            assert isinstance(info.value, RuntimeError)
        assert raw.exists(name) == 0
        assert raw.keys("redlease:client:*") == []  # not even the client's holder record
        raw.config_set("maxmemory-policy", "noeviction")  # the operator fixes the server
        await cycle(side, client, name)  # the same client now works
        raw.close()


async def test_ignore_does_not_read_the_policy(side, evicting, name):
    client = side.client(evicting.url, eviction="ignore")
    before = config_calls(evicting.url)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RedleaseWarning)
        await cycle(side, client, name)
    assert config_calls(evicting.url) == before


async def test_the_policy_is_read_once_per_client_not_per_call(side, name, private_server):
    url = private_server.url
    client = side.client(url)
    before = config_calls(url)
    for i in range(20):
        await cycle(side, client, f"{name}:{i}")
    assert config_calls(url) - before == 1


async def test_a_server_restarted_with_another_policy_is_checked_again(side, binary, name):
    with start(binary, "noeviction") as srv:
        client = side.client(srv.url)
        await cycle(side, client, name)
        srv.extra_args = ("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
        srv.restart()  # an empty script cache: the reload checks the server again
        with pytest.warns(RedleaseWarning, match="allkeys-lru"):
            await cycle(side, client, name)
            await cycle(side, client, name)


async def test_a_user_without_config_and_info_is_not_hindered(side, evicting, name, caplog):
    if evicting.binary.version_tuple < (7,):
        pytest.skip("Redis 6.2's ACL subcommand rules differ; the 7+ servers cover this")
    raw = redis.Redis.from_url(evicting.url)
    raw.execute_command(
        "ACL", "SETUSER", "noconf", "reset", "on", ">pw", "~*", "&*", "+@all", "-config", "-info"
    )  # fmt: skip
    raw.close()
    client = side.client(f"redis://noconf:pw@127.0.0.1:{evicting.port}", eviction="refuse")
    with caplog.at_level(logging.DEBUG, logger="redlease"), warnings.catch_warnings():
        warnings.simplefilter("error", RedleaseWarning)
        await cycle(side, client, name)  # neither refused nor warned: not known
    assert any("unknown" in r.message for r in caplog.records if r.levelno == logging.DEBUG)
    (seen,) = await side(client.eviction_policies())
    assert (seen.policy, seen.evictable, seen.source) == (None, None, None)


async def test_a_user_without_config_is_told_through_info(side, evicting, name):
    raw = redis.Redis.from_url(evicting.url)
    raw.execute_command(
        "ACL", "SETUSER", "noconf2", "reset", "on", ">pw", "~*", "&*", "+@all", "-config"
    )  # fmt: skip
    raw.close()
    client = side.client(f"redis://noconf2:pw@127.0.0.1:{evicting.port}")
    with pytest.warns(RedleaseWarning, match="volatile-lru"):
        await cycle(side, client, name)
    (seen,) = await side(client.eviction_policies())
    assert (seen.policy, seen.evictable, seen.source) == ("volatile-lru", True, "info")


def test_a_bad_eviction_option_is_refused(server):
    from redlease import Client

    with pytest.raises(InvalidArgumentError, match="eviction"):
        Client.from_url(server.url, eviction="warm")  # type: ignore[arg-type]  # wrong on purpose
