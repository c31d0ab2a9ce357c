"""Fenced writes through Django's ORM (redlease.contrib.django.fencing) on SQLite and on a real
PostgreSQL (the ``postgres`` database alias of conftest.py), with tokens from real holds of a
lock on a private Redis server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from django.db import connections, transaction
from redlease_shop.models import Counter, Stock

from redlease import ArgumentTypeError, Client, InvalidArgumentError, StaleTokenError
from redlease.contrib.django.fencing import (
    FenceField,
    async_fenced_update,
    async_fenced_upsert,
    fenced_update,
    fenced_upsert,
)
from redlease.testing import PostgresServer

from ..sql_fencing import ROUNDS, WORKERS, run_read_modify_write


@pytest.fixture(params=["default", "postgres"], ids=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tables: None) -> Iterator[str]:
    """The database alias, its ``Stock`` table emptied."""
    alias = request.param
    if alias == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres")
        connection = connections[alias]
        if connection.settings_dict["PORT"] != str(server.port):
            connection.close()
            connection.settings_dict["PORT"] = str(server.port)
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass('redlease_shop_stock')")
            exists = cursor.fetchone()[0] is not None
        if not exists:
            with connection.schema_editor() as editor:
                editor.create_model(Stock)
    Stock.objects.using(alias).all().delete()
    yield alias
    connections[alias].close()


def _row(db: str, pk: int) -> tuple[int, int]:
    row = Stock.objects.using(db).get(pk=pk)
    return row.qty, row.fence


def test_the_field_and_its_migration() -> None:
    field = Stock._meta.get_field("fence")
    assert isinstance(field, FenceField) and field.default == 0 and not field.editable
    name, path, args, kwargs = field.deconstruct()
    # what makemigrations writes: AddField(..., field=FenceField()), the rows that exist get 0
    assert (name, path, args, kwargs) == (
        "fence", "redlease.contrib.django.fencing.FenceField", [], {}
    )  # fmt: skip
    assert FenceField(editable=True).deconstruct()[3] == {"editable": True}


def test_a_stale_holders_write_is_refused(db, configured, name):
    with Client.from_url(configured) as process_a, Client.from_url(configured) as process_b:
        lock_a = process_a.lock(name)
        assert lock_a.acquire(lease=0.5)
        token_a = lock_a.fencing_token
        assert token_a is not None
        fenced_upsert(Stock, {"id": 1, "qty": 10}, token=token_a, using=db)
        # A pauses past its lease: B gets the lock (when A's lease ran out) and writes
        with process_b.lock(name).hold(timeout=30) as lease_b:
            rows = Stock.objects.using(db).filter(pk=1)
            assert fenced_update(rows, token=lease_b.fencing_token, values={"qty": 9}) == 1
        assert lease_b.fencing_token > token_a
        with pytest.raises(StaleTokenError) as err:
            fenced_update(Stock.objects.using(db).filter(pk=1), token=token_a, values={"qty": 9})
        assert (err.value.token, err.value.seen) == (token_a, lease_b.fencing_token)
        assert err.value.resource == "redlease_shop_stock"
        with pytest.raises(StaleTokenError):  # nor may it create the row again
            fenced_upsert(Stock, {"id": 1, "qty": 0}, token=token_a, using=db)
        assert _row(db, 1) == (9, lease_b.fencing_token)


def test_the_same_holder_writes_many_times_with_its_token(db, configured, name):
    from django.db.models import F

    with Client.from_url(configured) as client:
        lock = client.lock(name)
        with lock.hold(timeout=5) as lease:
            token = lease.fencing_token
            fenced_upsert(Stock, {"id": 2, "qty": 0}, token=token, using=db)
            rows = Stock.objects.using(db).filter(pk=2)
            for _ in range(3):
                fenced_update(rows, token=token, values={"qty": F("qty") + 1})
            with lock.hold(timeout=5) as inner:  # a re-entry keeps the token
                assert fenced_update(rows, token=inner.fencing_token,
                                     values={"qty": F("qty") + 1}) == 1  # fmt: skip
            fenced_upsert(Stock, {"id": 2, "qty": 10}, token=token, using=db)
        assert _row(db, 2) == (10, token)


def test_an_insert_racing_a_stale_insert(db, configured, name):
    with Client.from_url(configured) as client:
        with client.lock(name).hold(timeout=5) as older:
            pass
        with client.lock(name).hold(timeout=5) as newer:
            pass
    fenced_upsert(Stock, {"id": 3, "qty": 30}, token=newer.fencing_token, using=db)
    with pytest.raises(StaleTokenError):
        fenced_upsert(Stock, {"id": 3, "qty": 99}, token=older.fencing_token, using=db)
    assert _row(db, 3) == (30, newer.fencing_token)
    fenced_upsert(Stock, {"pk": 4, "qty": 99}, token=older.fencing_token, using=db)
    fenced_upsert(Stock, {"pk": 4, "qty": 40}, token=newer.fencing_token, using=db)
    assert _row(db, 4) == (40, newer.fencing_token)


def test_concurrent_read_modify_write_loses_no_update(db, configured, name):
    Stock.objects.using(db).create(id=5, qty=0)
    rows = Stock.objects.using(db).filter(pk=5)

    def claim_and_read(token: int) -> int:
        with transaction.atomic(using=db):
            fenced_update(rows, token=token)
            return int(rows.get().qty)

    def write(token: int, value: int) -> None:
        with transaction.atomic(using=db):
            fenced_update(rows, token=token, values={"qty": value})

    def fence_of_row() -> int:
        return int(rows.get().fence)

    def closing(function):  # a worker thread's own connection, closed after each call
        def run(*args):
            try:
                return function(*args)
            finally:
                connections[db].close()

        return run

    with Client.from_url(configured) as client:
        tally = run_read_modify_write(
            client,
            name,
            claim_and_read=closing(claim_and_read),
            write=closing(write),
            fence_of_row=closing(fence_of_row),
        )
    value = rows.get().qty
    assert tally.accepted + tally.refused == WORKERS * ROUNDS
    assert tally.overlaps >= 1, "no holder was paused while a newer one took the row"
    assert value == tally.accepted, f"{tally.accepted - value} updates lost"
    assert tally.refused >= tally.overlaps


def test_asyncio(db, configured, name):
    async def main() -> tuple[int, int]:
        from redlease import AsyncClient

        async with AsyncClient.from_url(configured) as client:
            async with client.lock(name).hold(timeout=5) as older:
                await async_fenced_upsert(Stock, {"id": 6, "qty": 1}, token=older.fencing_token,
                                          using=db)  # fmt: skip
            async with client.lock(name).hold(timeout=5) as newer:
                rows = Stock.objects.using(db).filter(pk=6)
                await async_fenced_update(rows, token=newer.fencing_token, values={"qty": 2})
                await async_fenced_update(rows, token=newer.fencing_token, values={"qty": 3})
            with pytest.raises(StaleTokenError):
                await async_fenced_update(rows, token=older.fencing_token, values={"qty": 0})
            with pytest.raises(StaleTokenError):
                await async_fenced_upsert(Stock, {"id": 6, "qty": 0}, token=older.fencing_token,
                                          using=db)  # fmt: skip
            return newer.fencing_token, older.fencing_token

    newer, _ = asyncio.run(main())
    assert _row(db, 6) == (3, newer)


def test_bad_input_is_named(db):
    rows = Stock.objects.using(db).filter(pk=1)
    with pytest.raises(ArgumentTypeError, match="is the lock held"):
        fenced_update(rows, token=None)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="expected a QuerySet"):
        fenced_update(Stock, token=5)
    with pytest.raises(InvalidArgumentError, match="no integer fence field 'fence'"):
        fenced_update(Counter.objects.using(db).all(), token=5)
    with pytest.raises(InvalidArgumentError, match="sets it to the token"):
        fenced_update(rows, token=5, values={"fence": 9})
    with pytest.raises(InvalidArgumentError, match="missing"):
        fenced_upsert(Stock, {"qty": 1}, token=5, using=db)
    with pytest.raises(StaleTokenError, match="no row matched"):
        fenced_update(Stock.objects.using(db).filter(pk=404), token=5, values={"qty": 1})


def test_a_fenced_update_is_one_statement(db):
    """No extra round trip: an accepted update is the one statement sent."""
    from django.test.utils import CaptureQueriesContext

    fenced_upsert(Stock, {"id": 8, "qty": 1}, token=5, using=db)
    with CaptureQueriesContext(connections[db]) as queries:
        fenced_update(Stock.objects.using(db).filter(pk=8), token=5, values={"qty": 2})
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["UPDATE"]
    assert '"fence" <=' in queries.captured_queries[0]["sql"]
