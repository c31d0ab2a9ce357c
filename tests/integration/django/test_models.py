"""``model_lock``: one row's lock, named ``<app_label>.<model_name>:<pk>``, on a real model
in sqlite; an unsaved instance is refused with a clear error."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from django.test import override_settings
from redlease_shop.models import Counter, SpecialCounter

from redlease import InvalidArgumentError
from redlease.contrib.django import async_model_lock, model_lock, model_lock_name
from redlease.testing import RedisServer


def test_model_lock_names_the_row(configured: str, tables: None, raw: redis.Redis) -> None:
    row = Counter.objects.create()
    name = f"redlease_shop.counter:{row.pk}"
    assert model_lock_name(row) == name == model_lock_name(Counter, row.pk)
    proxy = SpecialCounter.objects.get(pk=row.pk)
    assert model_lock_name(proxy) == name  # a proxy's rows are the concrete model's
    with model_lock(row) as held:
        assert raw.exists(name)
        # another thread (a request, a worker) finds the same row's lock taken
        other = ThreadPoolExecutor(1).submit(lambda: model_lock(proxy).acquire(blocking=False))
        assert other.result(30) is False
        assert held.fencing_token is not None
    assert not raw.exists(name)


def test_key_prefix(server: RedisServer, tables: None, raw: redis.Redis) -> None:
    row = Counter.objects.create()
    settings = override_settings(REDLEASE={"URL": server.url, "KEY_PREFIX": "shop:"})
    with settings, model_lock(row, lease=5):
        assert 0 < raw.pttl(f"shop:redlease_shop.counter:{row.pk}") <= 5000


def test_unsaved_instance_is_refused(configured: str, tables: None) -> None:
    with pytest.raises(InvalidArgumentError, match="not saved yet"):
        model_lock(Counter())
    with pytest.raises(InvalidArgumentError, match="not saved yet"):
        model_lock(Counter(pk=12345))  # a primary key, but no row yet
    with pytest.raises(InvalidArgumentError, match="give the primary key"):
        model_lock(Counter)
    with pytest.raises(InvalidArgumentError, match="takes a saved model instance"):
        model_lock("redlease_shop.counter")


async def test_async_model_lock(configured: str, tables: None, raw: redis.Redis) -> None:
    row = await Counter.objects.acreate()
    async with async_model_lock(row):
        assert raw.exists(f"redlease_shop.counter:{row.pk}")
    assert not raw.exists(f"redlease_shop.counter:{row.pk}")
