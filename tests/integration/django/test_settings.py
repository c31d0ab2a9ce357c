"""``settings.REDLEASE``: by URL or through a cache alias's Redis connection (django-redis's
and Django's own ``RedisCache``), sync and async, on a real server; every mistake is an
``ImproperlyConfigured`` that says what is wrong (never with the password); one client per
process, and a forked child (a gunicorn or uwsgi worker) makes its own."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
import redis
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from redlease import AsyncClient, Client
from redlease.contrib.django import async_lock, get_async_client, get_client, lock
from redlease.contrib.django.apps import check_settings
from redlease.testing import RedisServer

from ..helpers import run_forked

BACKENDS = {
    "django-redis": "django_redis.cache.RedisCache",
    "django": "django.core.cache.backends.redis.RedisCache",
}


def _cache_settings(url: str, backend: str, **redlease: Any) -> dict[str, Any]:
    return {
        "CACHES": {"default": {"BACKEND": BACKENDS[backend], "LOCATION": url}},
        "REDLEASE": {"CACHE": "default", **redlease},
    }


def test_by_url(server: RedisServer, raw: redis.Redis, name: str) -> None:
    with override_settings(REDLEASE={"URL": server.url, "OPTIONS": {"watchdog_timeout": 7}}):
        with lock(name) as lease:
            assert raw.exists(name) and 0 < raw.pttl(name) <= 7000
            assert lease.fencing_token is not None
        assert not raw.exists(name)
        assert get_client() is get_client()
        assert check_settings() == []


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_through_a_cache_alias(
    server: RedisServer, raw: redis.Redis, name: str, backend: str
) -> None:
    with override_settings(**_cache_settings(server.url, backend, KEY_PREFIX="app:")):
        client = get_client()
        cache: Any = caches["default"]
        if backend == "django-redis":
            from django_redis import get_redis_connection

            mine = get_redis_connection("default")
        else:
            mine = cache._cache.get_client(write=True)
        # the cache's own connection pool: no second pool to the server
        assert client.redis.connection_pool is mine.connection_pool
        with lock(name):
            assert raw.exists(f"app:{name}")
            cache.set(f"{name}:cached", 1)  # the cache itself still works beside it
            assert cache.get(f"{name}:cached") == 1
        assert not raw.exists(f"app:{name}")
        assert check_settings() == []


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_async_through_a_cache_alias(
    server: RedisServer, raw: redis.Redis, name: str, backend: str
) -> None:
    with override_settings(**_cache_settings(server.url, backend)):
        client = get_async_client()
        assert isinstance(client, AsyncClient) and client is get_async_client()
        async with async_lock(name):
            assert raw.exists(name)
        assert not raw.exists(name)


def test_mistakes_are_improperly_configured(server: RedisServer) -> None:
    secret = "s3cret-pw"
    url = f"redis://:{secret}@127.0.0.1:{server.port}/0"
    # (setting, message): manage.py check sees each, the shape and a URL setting's values
    cases: list[tuple[Any, str]] = [
        (None, "setting is missing"),
        ("redis://x", "must be a dict"),
        ({}, "give one of URL and CACHE"),
        ({"URL": url, "CACHE": "default"}, "give one of URL and CACHE"),
        ({"URL": url, "PREFIX": "x"}, "unknown key(s) PREFIX"),
        ({"URL": 42}, "URL must be"),
        ({"CACHE": "nope"}, "not a cache alias"),
        ({"URL": url, "ON_BUSY": 200.5}, "ON_BUSY"),
        ({"URL": url, "OPTIONS": {"watchdog_timeout": -1}}, "watchdog_timeout"),
        ({"URL": url, "OPTIONS": {"watchdog_timout": 30}}, "watchdog_timout"),
        ({"URL": f"http://:{secret}@example.com/"}, "URL/OPTIONS"),
        ({"URL": f"default:{secret}@example.com:6379/0"}, "URL/OPTIONS"),
    ]
    for value, expected in cases:
        with override_settings(REDLEASE=value):
            with pytest.raises(ImproperlyConfigured, match=re.escape(expected)) as e:
                get_client()
            assert secret not in str(e.value)
            errors = check_settings()
            assert [error.id for error in errors] == ["redlease.E001"]
            assert all(secret not in error.msg for error in errors)
    locmem = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    locmem_settings = override_settings(CACHES=locmem, REDLEASE={"CACHE": "default"})
    with locmem_settings, pytest.raises(ImproperlyConfigured, match="not a Redis cache"):
        get_client()
    redis_cache = _cache_settings(url, "django-redis", OPTIONS={"socket_timeout": 1})
    options = pytest.raises(ImproperlyConfigured, match="cannot be used with CACHE")
    with override_settings(**redis_cache), options:
        get_client()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("backend", [None, *BACKENDS])
def test_a_forked_worker_makes_its_own_client(
    server: RedisServer, raw: redis.Redis, name: str, backend: str | None
) -> None:
    """As gunicorn's or uwsgi's workers, forked from a master that used the client: the
    child's client is its own (its own id, its own connections), the parent's is untouched."""
    values = (
        {"REDLEASE": {"URL": server.url}}
        if backend is None
        else _cache_settings(server.url, backend)
    )
    with override_settings(**values):
        parent = get_client()
        with lock(name):  # the parent holds a lock, its watchdog and connections busy
            parent_id, parent_pid = parent.id, os.getpid()

            def child() -> bool:
                mine = get_client()
                if mine is parent or mine.id == parent_id:
                    return False
                other = lock(f"{name}:child")
                if not other.acquire(timeout=5):
                    return False
                busy = lock(name).acquire(blocking=False)  # the parent's hold is not ours
                other.release()
                return not busy and os.getpid() != parent_pid

            assert run_forked(child) == 0
            assert raw.exists(name)
        assert not raw.exists(name)
        assert get_client() is parent
        assert isinstance(parent, Client)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (None, "Set REDLEASE = {'URL'"),
        ({"URL": "redis://127.0.0.1:1/0", "ON_BUSY": 200.5}, "ON_BUSY is what a busy @exclusive"),
        ({"URL": "redis://127.0.0.1:1/0", "OPTIONS": {"watchdog_timout": 30}}, "OPTIONS are"),
        ({"URL": "redis://127.0.0.1:1/0", "OPTIONS": []}, "OPTIONS are keyword arguments"),
        ({"URL": "redis://127.0.0.1:1/0", "KEY_PREFIX": 3}, "KEY_PREFIX is a str"),
        ({"URL": "redis://127.0.0.1:1/0", "PREFIX": "x"}, "The keys of REDLEASE are"),
        ({"URL": "http://example.com/"}, "Check the URL"),
        ({"URL": "redis://127.0.0.1:1/0", "LISTENERS": ["no.such.listener"]}, "LISTENERS is"),
        ({"URL": "redis://127.0.0.1:1/0", "LISTENERS": "x.y"}, "LISTENERS is a list"),
    ],
)
def test_check_hint_fits_the_error(value: Any, hint: str) -> None:
    """``manage.py check``'s hint for ``redlease.E001`` is about what is wrong: it was the
    URL example whatever the error (an ``ON_BUSY`` or ``OPTIONS`` mistake included)."""
    with override_settings(REDLEASE=value):
        (error,) = check_settings()
    assert error.id == "redlease.E001"
    assert error.hint.startswith(hint), error.hint
    if value is not None and "URL" in value and value["URL"].startswith("redis:"):
        assert "Set REDLEASE" not in error.hint
