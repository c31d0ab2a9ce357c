"""Sentinel URLs (``_redis/urls.py``): parsing, merging with ``from_url``'s keywords, masking.

No sockets: parsing is pure, and building a client over a Sentinel connects to nothing until
the first command.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.sentinel

import redlease
from redlease import InvalidArgumentError
from redlease._redis.connections import describe
from redlease._redis.urls import (
    SENTINEL_PORT,
    is_sentinel_url,
    masked_url,
    parse_sentinel_url,
    sentinel_master,
    url_secrets,
)

SECRET = "s3cr:t@/?#%"  # every character that needs escaping in a URL
ESCAPED = "s3cr%3At%40%2F%3F%23%25"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis+sentinel://h/m", True),
        ("REDIS+SENTINEL://h/m", True),
        ("rediss+sentinel://h/m", True),
        ("redis-sentinel://h#m", True),
        ("rediss-sentinel://h#m", True),
        ("redis://h:6379/0", False),
        ("rediss://h", False),
        ("unix:///tmp/redis.sock", False),
        ("sentinel://h:26379", False),  # Kombu's transport URL: not a client URL
        ("redis+sentinel", False),
    ],
)
def test_is_sentinel_url(url: str, expected: bool) -> None:
    assert is_sentinel_url(url) is expected


def test_python_form_hosts_service_db_and_default_port() -> None:
    parsed = parse_sentinel_url(
        "redis+sentinel://10.0.0.1:26380,10.0.0.2,sentinel-3:5000/mymaster/2"
    )
    assert parsed.sentinels == (
        ("10.0.0.1", 26380),
        ("10.0.0.2", SENTINEL_PORT),
        ("sentinel-3", 5000),
    )
    assert parsed.service == "mymaster"
    assert parsed.connection_kwargs == {"db": 2}
    assert parsed.sentinel_kwargs == {}
    assert not parsed.tls
    assert parsed.address == "sentinel mymaster at 10.0.0.1:26380,10.0.0.2:26379,sentinel-3:5000"


@pytest.mark.parametrize(
    ("url", "db"),
    [
        ("redis+sentinel://h/mymaster", None),
        ("redis+sentinel://h/mymaster/", None),
        ("redis+sentinel://h/mymaster/0", 0),
        ("redis+sentinel://h/mymaster/15/", 15),
        ("redis+sentinel://h/mymaster/3?db=4", 4),  # the query wins, as in redis-py
    ],
)
def test_python_form_db(url: str, db: int | None) -> None:
    parsed = parse_sentinel_url(url)
    assert parsed.service == "mymaster"
    assert parsed.connection_kwargs.get("db") == db


def test_ipv6_sentinels_in_brackets() -> None:
    parsed = parse_sentinel_url("redis+sentinel://[::1]:26380,[fe80::1%25eth0],[2001:db8::7]/m")
    assert parsed.sentinels == (
        ("::1", 26380),
        ("fe80::1%eth0", SENTINEL_PORT),  # percent-decoded, as redis-py does
        ("2001:db8::7", SENTINEL_PORT),
    )
    assert parsed.address.startswith("sentinel m at [::1]:26380,[fe80::1%eth0]:26379,")


def test_credentials_are_the_masters_and_percent_decoded() -> None:
    parsed = parse_sentinel_url(f"redis+sentinel://app%40eu:{ESCAPED}@h/m")
    assert parsed.connection_kwargs == {"username": "app@eu", "password": SECRET}
    assert parsed.sentinel_kwargs == {}  # the sentinels get their own, if any
    assert parse_sentinel_url(f"redis+sentinel://:{ESCAPED}@h/m").connection_kwargs == {
        "password": SECRET
    }
    # a bare word is a user, as redis-py reads redis://user@host
    assert parse_sentinel_url("redis+sentinel://app@h/m").connection_kwargs == {"username": "app"}


def test_sentinel_options_and_master_options_parsed_as_redis_py_does() -> None:
    parsed = parse_sentinel_url(
        "redis+sentinel://h/m?socket_timeout=0.5&socket_keepalive=true&health_check_interval=10"
        "&client_name=worker&sentinel_password=sp%21&sentinel_username=watcher"
        "&sentinel_socket_timeout=0.2&min_other_sentinels=1"
    )
    assert parsed.connection_kwargs == {
        "socket_timeout": 0.5,
        "socket_keepalive": True,
        "health_check_interval": 10,
        "client_name": "worker",  # an option redis-py does not parse is passed on as a string
    }
    assert parsed.sentinel_kwargs == {
        "password": "sp!",
        "username": "watcher",
        "socket_timeout": 0.2,
    }
    assert parsed.min_other_sentinels == 1


def test_lettuce_form() -> None:
    parsed = parse_sentinel_url(
        f"redis-sentinel://{ESCAPED}@h1:26379,h2:26380/3?timeout=500ms&clientName=api#mymaster"
    )
    assert parsed.sentinels == (("h1", 26379), ("h2", 26380))
    assert parsed.service == "mymaster"
    assert parsed.connection_kwargs == {
        "password": SECRET,  # Lettuce: a bare password@
        "socket_timeout": 0.5,
        "client_name": "api",
        "db": 3,
    }
    other = parse_sentinel_url("redis-sentinel://u:p@h?sentinelMasterId=mm&database=4&timeout=2")
    assert other.service == "mm"
    assert other.connection_kwargs == {
        "username": "u",
        "password": "p",
        "db": 4,
        "socket_timeout": 2,
    }


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [("5", 5.0), ("5s", 5.0), ("250ms", 0.25), ("1m", 60.0), ("1.5s", 1.5), ("100us", 1e-4)],
)
def test_lettuce_timeout_units(timeout: str, seconds: float) -> None:
    parsed = parse_sentinel_url(f"redis-sentinel://h?timeout={timeout}#m")
    assert parsed.connection_kwargs["socket_timeout"] == pytest.approx(seconds)


@pytest.mark.parametrize(
    "url", ["rediss+sentinel://h/m?ssl_cert_reqs=none", "rediss-sentinel://h?ssl_cert_reqs=none#m"]
)
def test_tls_to_the_sentinels_and_the_master(url: str) -> None:
    parsed = parse_sentinel_url(url)
    assert parsed.tls
    master, sentinels = parsed.arguments({"ssl_ca_certs": "/etc/ca.pem"})
    assert master["ssl"] is True
    assert master["ssl_cert_reqs"] == "none"
    assert sentinels == {"ssl": True, "ssl_cert_reqs": "none", "ssl_ca_certs": "/etc/ca.pem"}


def test_arguments_merge_from_url_keywords_the_url_wins() -> None:
    parsed = parse_sentinel_url(
        "redis+sentinel://:pw@h/m/1?socket_timeout=0.5&sentinel_password=sp&min_other_sentinels=2"
    )
    master, sentinels = parsed.arguments(
        {
            "socket_timeout": 9.0,
            "socket_connect_timeout": 3.0,
            "decode_responses": True,
            "sentinel_kwargs": {"socket_connect_timeout": 1.0, "username": "watcher"},
        }
    )
    assert master == {
        "socket_timeout": 0.5,  # the URL's
        "socket_connect_timeout": 3.0,
        "decode_responses": True,
        "password": "pw",
        "db": 1,
        "min_other_sentinels": 2,
    }
    # the master's socket_* options, as redis-py's Sentinel copies them, then their own
    assert sentinels == {
        "socket_timeout": 0.5,
        "socket_connect_timeout": 1.0,
        "username": "watcher",
        "password": "sp",
    }


BAD = [
    ("redis+sentinel://h", "no service (master) name"),
    ("redis+sentinel://h/", "no service (master) name"),
    ("redis-sentinel://h", "no service (master) name"),
    ("redis-sentinel://h/mymaster", "the service goes after '#'"),
    ("redis+sentinel://h/m/x", "bad database number 'x'"),
    ("redis+sentinel://h/m/-1", "bad database number '-1'"),
    ("redis+sentinel://h/m/1/2", "too many path segments"),
    ("redis+sentinel://h//m", "an empty path segment"),
    ("redis+sentinel:///m", "an empty sentinel address"),
    ("redis+sentinel://h1,,h2/m", "an empty sentinel address"),
    ("redis+sentinel://h1,/m", "an empty sentinel address"),
    ("redis+sentinel://h:0/m", "bad port '0'"),
    ("redis+sentinel://h:65536/m", "bad port '65536'"),
    ("redis+sentinel://h:x/m", "bad port 'x'"),
    ("redis+sentinel://h:/m", "bad port ''"),
    ("redis+sentinel://:26379/m", "no host"),
    ("redis+sentinel://::1/m", "put an IPv6 address in brackets"),
    ("redis+sentinel://[::1/m", "unclosed '['"),
    ("redis+sentinel://[::1]x/m", "after ']'"),
    ("redis+sentinel://[]:1/m", "no host"),
    ("redis+sentinel://h/m?socket_timeout=soon", "bad value for option 'socket_timeout'"),
    ("redis+sentinel://h/m?sentinel_socket_timeout=x", "'sentinel_socket_timeout'"),
    ("redis+sentinel://h/m?socket_timeout=", "option 'socket_timeout' has no value"),
    ("redis+sentinel://h/m?db=1&db=2", "option 'db' given twice"),
    ("redis+sentinel://h/m?host=other", "'host' is not an option"),
    ("redis+sentinel://h/m?sentinel_=1", "'sentinel_' is not an option"),
    ("redis+sentinel://h/m?min_other_sentinels=many", "bad min_other_sentinels 'many'"),
    ("redis-sentinel://h?timeout=soon#m", "bad timeout 'soon'"),
    ("redis-sentinel://h?timeout=0s#m", "bad timeout '0s'"),
    ("redis://h/m", "not a Sentinel URL scheme"),
]


@pytest.mark.parametrize(("url", "what"), BAD)
def test_a_bad_url_says_what_is_wrong(url: str, what: str) -> None:
    with pytest.raises(InvalidArgumentError, match="bad Sentinel URL") as info:
        parse_sentinel_url(url)
    assert what in str(info.value)


@pytest.mark.parametrize(("url", "what"), BAD)
def test_a_bad_url_never_shows_its_password(url: str, what: str) -> None:
    scheme, _, rest = url.partition("://")
    with_password = f"{scheme}://user:{ESCAPED}@{rest}"
    with_password += ("&" if "?" in with_password.partition("#")[0] else "?") + (
        f"sentinel_password={ESCAPED}"
    )
    if "#" in url:  # keep the fragment last
        head, _, fragment = url.partition("#")
        scheme, _, rest = head.partition("://")
        sep = "&" if "?" in rest else "?"
        with_password = (
            f"{scheme}://user:{ESCAPED}@{rest}{sep}sentinel_password={ESCAPED}#{fragment}"
        )
    with pytest.raises(InvalidArgumentError) as info:
        parse_sentinel_url(with_password)
    message = str(info.value)
    for secret in (SECRET, ESCAPED, "s3cr"):
        assert secret not in message
    assert "user:***@" in message


def test_masked_url_and_url_secrets() -> None:
    url = f"redis+sentinel://app:{ESCAPED}@h1,h2/m/0?sentinel_password=sp%21&socket_timeout=1"
    assert masked_url(url) == (
        "redis+sentinel://app:***@h1,h2/m/0?sentinel_password=***&socket_timeout=1"
    )
    assert set(url_secrets(url)) >= {ESCAPED, SECRET, "sp%21", "sp!"}
    lettuce = f"redis-sentinel://{ESCAPED}@h#m"
    assert masked_url(lettuce) == "redis-sentinel://***@h#m"
    assert SECRET in url_secrets(lettuce)
    # plain redis-py URLs too (the CLI scrubs every URL it was given)
    assert url_secrets("redis://:pw%21@h:6379/0") == ["pw%21", "pw!"]
    assert url_secrets("redis://user@h:6379/0") == []  # a user, no password
    assert masked_url("redis://u:pw@h/0?password=x") == "redis://u:***@h/0?password=***"


@pytest.mark.parametrize("url", ["u:pw@h:6379/0", ":pw@h", "pw@h/0"])
def test_a_url_without_a_scheme_shows_no_password(url: str) -> None:
    """A URL written without ``redis://`` is refused without echoing its password."""
    assert masked_url(url) == "***@" + url.partition("@")[2]
    for make in (redlease.Client.from_url, redlease.AsyncClient.from_url):
        with pytest.raises(InvalidArgumentError) as info:
            make(url)
        assert "pw" not in str(info.value)
        assert "***@h" in str(info.value)


def test_sentinel_master_builds_a_master_for_client_without_connecting() -> None:
    master, sentinels = sentinel_master(
        f"redis+sentinel://:{ESCAPED}@127.0.0.1:1,[::1]:2/mymaster/3?sentinel_socket_timeout=0.1",
        {"socket_timeout": 2.0, "decode_responses": True},
    )
    try:
        pool = master.connection_pool
        assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
        assert pool.service_name == "mymaster"
        kwargs = pool.connection_kwargs
        assert (kwargs["password"], kwargs["db"], kwargs["socket_timeout"]) == (SECRET, 3, 2.0)
        assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 2]
        assert all(
            s.connection_pool.connection_kwargs["socket_timeout"] == 0.1
            and s.connection_pool.connection_kwargs.get("password") is None
            for s in sentinels
        )
        assert describe(master) == "sentinel mymaster at 127.0.0.1:1,[::1]:2"
    finally:
        master.close()
        for s in sentinels:
            s.close()


def test_client_from_a_sentinel_url_shows_no_password() -> None:
    url = f"redis+sentinel://:{ESCAPED}@127.0.0.1:1/mymaster"
    with redlease.Client.from_url(url) as client:
        assert isinstance(client.redis, redis.Redis)
        assert client.address == "sentinel mymaster at 127.0.0.1:1"
        assert "mymaster" in repr(client)
        assert SECRET not in repr(client) and ESCAPED not in repr(client)
    with pytest.raises(InvalidArgumentError, match="cluster=True"):
        redlease.Client.from_url(url, cluster=True)
    with pytest.raises(InvalidArgumentError, match="no service") as info:
        redlease.Client.from_url(f"redis+sentinel://:{ESCAPED}@127.0.0.1:1")
    assert SECRET not in str(info.value)


async def test_async_client_from_a_sentinel_url_shows_no_password() -> None:
    import redis.asyncio.sentinel

    url = f"rediss-sentinel://{ESCAPED}@127.0.0.1:1?timeout=2s#mymaster"
    async with redlease.AsyncClient.from_url(url) as client:
        assert isinstance(client.redis, redis.asyncio.Redis)
        pool = client.redis.connection_pool
        assert isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool)
        assert issubclass(
            pool.connection_class, redis.asyncio.sentinel.SentinelManagedSSLConnection
        )
        assert pool.connection_kwargs["password"] == SECRET
        assert client.address == "sentinel mymaster at 127.0.0.1:1"
        assert SECRET not in repr(client) and ESCAPED not in repr(client)
    with pytest.raises(InvalidArgumentError, match="cluster=True"):
        redlease.AsyncClient.from_url(url, cluster=True)


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("redis://:pw@127.0.0.1:1/0", {"watchdog_timout": 30}),
        ("unix:///tmp/redlease-none.sock", {"socket_timout": 1}),
        ("redis+sentinel://:pw@127.0.0.1:1/mymaster", {"decode_response": True}),
        ("redis://:pw@127.0.0.1:1/0", {"ssl_cert_reqs": "none"}),  # TLS option without rediss
        ("redis://:pw@127.0.0.1:1/0", {"cluster": True, "read_from_replica": True}),
        ("redis://:pw@127.0.0.1:1/0", {"cluster": True, "socket_timout": 1}),
    ],
)
def test_from_url_refuses_an_unknown_option_at_once(url: str, option: dict[str, Any]) -> None:
    """An option no one takes is an ``InvalidArgumentError`` naming it when the client is
    made, not redis-py's raw ``TypeError`` at the first lock, nor (a sync cluster client)
    dropped without a word; nothing is connected (the port is closed)."""
    key = next(k for k in option if k != "cluster")
    for make in (redlease.Client.from_url, redlease.AsyncClient.from_url):
        with pytest.raises(InvalidArgumentError, match=repr(key)) as info:
            make(url, **option)
        assert "pw" not in str(info.value)


def test_a_client_option_on_a_sentinel_url_is_named_as_such() -> None:
    """``single_connection_client`` is an option of redis-py's client, not of its connections:
    a Sentinel URL's client cannot take it, and the error says so (not "a misspelling")."""
    url = "redis+sentinel://:pw@127.0.0.1:1/mymaster"
    for make in (redlease.Client.from_url, redlease.AsyncClient.from_url):
        with pytest.raises(InvalidArgumentError, match="client itself") as info:
            make(url, single_connection_client=True)
        assert "'single_connection_client'" in str(info.value)
        assert "misspelling" not in str(info.value) and "pw" not in str(info.value)


def test_from_url_takes_a_cluster_clients_options() -> None:
    """A cluster client's own options (and its nodes' client options) are not refused: the
    sync client then fails only at connecting (the port is closed), the asyncio one connects
    at its first command."""
    options: dict[str, Any] = {
        "dynamic_startup_nodes": False,
        "require_full_coverage": False,
        "socket_timeout": 2,
        "max_connections": 5,
        "client_name": "app",
    }
    url = "redis://:pw@127.0.0.1:1/0"
    with pytest.raises(redlease.ServerUnavailableError):
        redlease.Client.from_url(url, cluster=True, **options)
    asyncio.run(redlease.AsyncClient.from_url(url, cluster=True, **options).aclose())


def test_from_url_takes_redis_pys_options() -> None:
    options: dict[str, Any] = {
        "socket_timeout": 2,
        "max_connections": 5,
        "decode_responses": True,
        "health_check_interval": 10,
        "client_name": "app",
        "retry_on_timeout": True,
    }
    for url, extra in (
        ("redis://:pw@127.0.0.1:1/0", {"single_connection_client": False}),
        ("rediss://:pw@127.0.0.1:1/0", {"ssl_cert_reqs": "none"}),
        ("redis+sentinel://:pw@127.0.0.1:1/mymaster", {}),
    ):
        redlease.Client.from_url(url, **options, **extra).close()
        asyncio.run(redlease.AsyncClient.from_url(url, **options, **extra).aclose())
