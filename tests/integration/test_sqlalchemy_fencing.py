"""Fenced writes through SQLAlchemy (Core and ORM, sync and asyncio) on a real PostgreSQL and
on SQLite, with tokens from real holds of a lock on a private Redis server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from redlease import (
    ArgumentTypeError,
    AsyncClient,
    Client,
    InvalidArgumentError,
    StaleTokenError,
)
from redlease.contrib.sqlalchemy import (
    FenceMixin,
    async_fenced_update,
    async_fenced_upsert,
    fence_column,
    fenced_update,
    fenced_upsert,
)
from redlease.testing import PostgresServer, RedisServer, find_server

from .sql_fencing import PAUSED_ROUNDS, ROUNDS, WORKERS, run_read_modify_write


class Base(DeclarativeBase):
    pass


class Stock(FenceMixin, Base):
    __tablename__ = "stock"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    qty: Mapped[int]


metadata = sa.MetaData()
counters = sa.Table(
    "counters",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("value", sa.Integer, nullable=False),
    fence_column(),
)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with RedisServer(find_server()) as server:
        yield server.url


@pytest.fixture(params=["sqlite", "postgresql"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The database's (sync, asyncio) SQLAlchemy URLs, its tables made afresh."""
    if request.param == "sqlite":
        path = tmp_path / "fencing.sqlite3"
        sync_url, async_url = f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        sync_url, async_url = server.url_for("psycopg"), server.url_for("asyncpg")
    engine = sa.create_engine(sync_url)
    for meta in (Base.metadata, metadata):
        meta.drop_all(engine)
        meta.create_all(engine)
    engine.dispose()
    yield sync_url, async_url


@pytest.fixture
def engine(urls: tuple[str, str]) -> Iterator[sa.Engine]:
    engine = sa.create_engine(urls[0])
    yield engine
    engine.dispose()


def _qty(engine: sa.Engine, item: int) -> tuple[int, int]:
    with Session(engine) as session:
        row = session.get(Stock, item)
        assert row is not None
        return row.qty, row.fence


def test_a_stale_holders_write_is_refused(engine, redis_url, name):
    with Client.from_url(redis_url) as process_a, Client.from_url(redis_url) as process_b:
        lock_a = process_a.lock(name)
        assert lock_a.acquire(lease=0.5)
        token_a = lock_a.fencing_token
        assert token_a is not None
        with Session(engine) as session, session.begin():
            fenced_upsert(session, Stock, {"id": 1, "qty": 10}, token=token_a)
        # A pauses past its lease: B gets the lock (when A's lease ran out) and writes
        with process_b.lock(name).hold(timeout=30) as lease_b, Session(engine) as session:
            session.begin()
            fenced_update(session, Stock, Stock.id == 1, token=lease_b.fencing_token,
                          values={"qty": Stock.qty - 1})  # fmt: skip
            session.commit()
        assert lease_b.fencing_token > token_a
        # A wakes up and writes what it computed before the pause
        with Session(engine) as session, session.begin(), pytest.raises(StaleTokenError) as err:
            fenced_update(session, Stock, Stock.id == 1, token=token_a, values={"qty": 9})
        assert (err.value.token, err.value.seen) == (token_a, lease_b.fencing_token)
        assert err.value.resource == "stock"
        assert _qty(engine, 1) == (9, lease_b.fencing_token)  # B's write, A's refused
        # the Core form (a Table, a Connection) refuses it too
        with engine.begin() as connection, pytest.raises(StaleTokenError):
            fenced_update(connection, Stock.__table__, Stock.id == 1, token=token_a)
        assert _qty(engine, 1) == (9, lease_b.fencing_token)


def test_the_same_holder_writes_many_times_with_its_token(engine, redis_url, name):
    with Client.from_url(redis_url) as client:
        lock = client.lock(name)
        with lock.hold(timeout=5) as lease:
            token = lease.fencing_token
            with engine.begin() as connection:
                fenced_upsert(connection, Stock, {"id": 2, "qty": 0}, token=token)
            for _ in range(3):
                with Session(engine) as session, session.begin():
                    fenced_update(session, Stock, Stock.id == 2, token=token,
                                  values={"qty": Stock.qty + 1})  # fmt: skip
            with lock.hold(timeout=5) as inner:  # a re-entry keeps the token
                assert inner.fencing_token == token
                with Session(engine) as session, session.begin():
                    assert fenced_update(session, Stock, Stock.id == 2, token=token,
                                         values={"qty": Stock.qty + 1}) == 1  # fmt: skip
        assert _qty(engine, 2) == (4, token)


def test_an_insert_racing_a_stale_insert(engine, redis_url, name):
    with Client.from_url(redis_url) as client:
        with client.lock(name).hold(timeout=5) as older:
            pass
        with client.lock(name).hold(timeout=5) as newer:
            pass
    # the newer holder inserts first: the stale insert meets the row and is refused
    with Session(engine) as session, session.begin():
        fenced_upsert(session, Stock, {"id": 3, "qty": 30}, token=newer.fencing_token)
    with Session(engine) as session, session.begin(), pytest.raises(StaleTokenError) as err:
        fenced_upsert(session, Stock, {"id": 3, "qty": 99}, token=older.fencing_token)
    assert err.value.seen == newer.fencing_token
    assert _qty(engine, 3) == (30, newer.fencing_token)
    # the stale holder inserts first: the newer holder's insert updates its row
    with Session(engine) as session, session.begin():
        fenced_upsert(session, Stock, {"id": 4, "qty": 99}, token=older.fencing_token)
        fenced_upsert(session, Stock, {"id": 4, "qty": 40}, token=newer.fencing_token)
    assert _qty(engine, 4) == (40, newer.fencing_token)


def test_concurrent_read_modify_write_loses_no_update(engine, redis_url, name):
    with engine.begin() as connection:
        connection.execute(sa.insert(counters).values(id=1, value=0, fence=0))

    def claim_and_read(token: int) -> int:
        with engine.begin() as connection:
            fenced_update(connection, counters, counters.c.id == 1, token=token)
            return int(connection.scalar(sa.select(counters.c.value).where(counters.c.id == 1)))

    def write(token: int, value: int) -> None:
        with engine.begin() as connection:
            fenced_update(connection, counters, counters.c.id == 1, token=token,
                          values={"value": value})  # fmt: skip

    def fence_of_row() -> int:
        with engine.connect() as connection:
            return int(connection.scalar(sa.select(counters.c.fence)))

    with Client.from_url(redis_url) as client:
        tally = run_read_modify_write(
            client, name, claim_and_read=claim_and_read, write=write, fence_of_row=fence_of_row
        )
    with engine.connect() as connection:
        value = connection.scalar(sa.select(counters.c.value))
    assert tally.accepted + tally.refused == WORKERS * ROUNDS
    assert tally.overlaps >= 1, "no holder was paused while a newer one took the row"
    assert value == tally.accepted, f"{tally.accepted - value} updates lost"
    assert tally.refused >= tally.overlaps  # every paused holder overtaken was refused
    assert len(PAUSED_ROUNDS) < ROUNDS


async def test_asyncio_session_and_connection(urls, redis_url, name):
    engine = create_async_engine(urls[1])
    try:
        async with AsyncClient.from_url(redis_url) as process_a:
            lock_a = process_a.lock(name)
            assert await lock_a.acquire(lease=0.5)
            token_a = lock_a.fencing_token
            assert token_a is not None
            async with AsyncSession(engine) as session, session.begin():
                await async_fenced_upsert(session, Stock, {"id": 5, "qty": 10}, token=token_a)
                for _ in range(2):  # the same holder, several writes
                    await async_fenced_update(session, Stock, Stock.id == 5, token=token_a,
                                              values={"qty": Stock.qty - 1})  # fmt: skip
            async with (
                AsyncClient.from_url(redis_url) as process_b,
                process_b.lock(name).hold(timeout=30) as lease_b,
                engine.begin() as connection,
            ):
                await async_fenced_update(
                    connection, Stock, Stock.id == 5, token=lease_b.fencing_token,
                    values={"qty": Stock.qty - 1},
                )  # fmt: skip
            async with AsyncSession(engine) as session, session.begin():
                with pytest.raises(StaleTokenError) as err:
                    await async_fenced_update(
                        session, Stock, Stock.id == 5, token=token_a, values={"qty": 0}
                    )
                assert err.value.seen == lease_b.fencing_token
                with pytest.raises(StaleTokenError):
                    await async_fenced_upsert(session, Stock, {"id": 5, "qty": 0}, token=token_a)
            async with AsyncSession(engine) as session:
                row = await session.get(Stock, 5)
                assert row is not None
                assert (row.qty, row.fence) == (7, lease_b.fencing_token)
    finally:
        await engine.dispose()


def test_bad_input_is_named(engine):
    with Session(engine) as session:
        with pytest.raises(ArgumentTypeError, match="is the lock held"):
            fenced_update(session, Stock, Stock.id == 1, token=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="token must be a fencing token"):
            fenced_update(session, Stock, Stock.id == 1, token=0)
        plain = sa.Table("plain", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
        with pytest.raises(InvalidArgumentError, match="no fence column 'fence'"):
            fenced_update(session, plain, plain.c.id == 1, token=5)
        with pytest.raises(InvalidArgumentError, match="sets it to the token"):
            fenced_update(session, Stock, Stock.id == 1, token=5, values={"fence": 9})
        with pytest.raises(InvalidArgumentError, match="no column 'nope'"):
            fenced_update(session, Stock, Stock.id == 1, token=5, values={"nope": 1})
        with pytest.raises(InvalidArgumentError, match="missing: \\['id'\\]"):
            fenced_upsert(session, Stock, {"qty": 1}, token=5)
        with pytest.raises(StaleTokenError, match="no row matched"):
            fenced_update(session, Stock, Stock.id == 404, token=5, values={"qty": 1})


def test_a_fenced_write_is_one_statement(engine):
    """No extra round trip: an accepted update or upsert is the one statement sent."""
    statements: list[str] = []
    with Session(engine) as session, session.begin():
        fenced_upsert(session, Stock, {"id": 7, "qty": 1}, token=5)
        sa.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        fenced_update(session, Stock, Stock.id == 7, token=5, values={"qty": 2})
        fenced_upsert(session, Stock, {"id": 7, "qty": 3}, token=6)
    assert [s.split()[0] for s in statements] == ["UPDATE", "INSERT"], statements
    assert "fence <=" in statements[0] and "ON CONFLICT" in statements[1]
