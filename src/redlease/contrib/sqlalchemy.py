"""Fenced writes to SQL through SQLAlchemy (Core and ORM, sync and asyncio).

Install with ``pip install 'redlease[sqlalchemy]'``. A row keeps, in its fence column, the
highest fencing token that wrote it; a write carries the writer's token and changes the row only
if that token is at least the one kept (the rule of ``Client.fenced_set``), in the same
statement, with no extra round trip::

    UPDATE stock SET qty = :qty, fence = :token WHERE id = :id AND fence <= :token

- ``FenceMixin`` (a declarative mixin) or ``fence_column()`` (a ``Table`` column): the fence
  column, a ``BIGINT NOT NULL DEFAULT 0``.
- ``fenced_update(session_or_connection, Stock, Stock.id == 42, token=..., values={...})``:
  the fenced ``UPDATE``; with no ``values`` it only claims the rows for the token (read
  after it, in a read-modify-write). ``StaleTokenError`` when no row was written.
- ``fenced_upsert(session_or_connection, Stock, {"id": 43, "qty": 5}, token=...)``: a row that
  may not exist yet, in one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (PostgreSQL,
  SQLite).
- ``async_fenced_update`` and ``async_fenced_upsert``: the same on an ``AsyncSession`` or an
  ``AsyncConnection``.

The rules (a new row, several locks, which tokens, what to do on ``StaleTokenError``) are in
the how-to page "Fencing a database write" (docs/fencing-database.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from . import _missing_extra

try:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Mapped, Session, mapped_column
except ModuleNotFoundError as exc:  # the toolkit is an extra
    raise _missing_extra(exc, "sqlalchemy", "sqlalchemy") from exc

from ..errors import ArgumentTypeError, InvalidArgumentError, StaleTokenError

__all__ = [
    "FenceMixin",
    "async_fenced_update",
    "async_fenced_upsert",
    "fence_column",
    "fenced_update",
    "fenced_upsert",
]

Executor = Union[Session, sa.Connection]  # noqa: UP007  (a runtime alias, 3.10)
"""Where a sync helper runs its statement: an ORM ``Session`` or a Core ``Connection``."""
AsyncExecutor = Union[AsyncSession, AsyncConnection]  # noqa: UP007
"""Where an asyncio helper runs its statement: an ``AsyncSession`` or an ``AsyncConnection``."""

_UPSERT_DIALECTS = ("postgresql", "sqlite")


def fence_column(name: str = "fence") -> sa.Column[int]:
    """The fence column of a Core ``Table``: ``BIGINT NOT NULL DEFAULT 0`` (0: no token wrote
    the row yet; every fencing token is above it).

    Args:
        name: The column's name; a row guarded by two locks has one fence column per lock.
    """
    return sa.Column(name, sa.BigInteger, nullable=False, default=0, server_default="0")


class FenceMixin:
    """A declarative mixin that gives a mapped class its fence column ``fence``
    (``BIGINT NOT NULL DEFAULT 0``)::

        class Stock(FenceMixin, Base):
            __tablename__ = "stock"
            id: Mapped[int] = mapped_column(primary_key=True)
            qty: Mapped[int]

    Write the row with ``fenced_update``/``fenced_upsert``, not by changing attributes and
    flushing: a flush's ``UPDATE`` does not check the fence.
    """

    fence: Mapped[int] = mapped_column(sa.BigInteger, nullable=False, default=0, server_default="0")
    """The highest fencing token that wrote this row (0: none yet)."""


def _token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int):
        hint = " (is the lock held? lock.fencing_token is None when it is not)"
        raise ArgumentTypeError(
            f"token must be a fencing token (an int), got {token!r}"
            + (hint if token is None else "")
        )
    if token < 1:
        raise InvalidArgumentError(f"token must be a fencing token (>= 1), got {token}")
    return token


def _table(target: object) -> tuple[sa.Table, sa.orm.Mapper[Any] | None]:
    """The table of ``target`` (a ``Table`` or a mapped class) and its mapper, if mapped."""
    if isinstance(target, sa.Table):
        return target, None
    mapper = sa.inspect(target, raiseerr=False)
    if isinstance(mapper, sa.orm.Mapper) and isinstance(mapper.local_table, sa.Table):
        return mapper.local_table, mapper
    raise ArgumentTypeError(f"expected a Table or a mapped class, got {target!r}")


def _fence(table: sa.Table, fence: str) -> sa.Column[Any]:
    if not isinstance(fence, str) or fence not in table.c:
        raise InvalidArgumentError(
            f"table {table.name!r} has no fence column {fence!r}: add one "
            "(FenceMixin, fence_column()) or name it with fence="
        )
    return table.c[fence]


def _columns(
    table: sa.Table, mapper: sa.orm.Mapper[Any] | None, values: Mapping[str, Any] | None, fence: str
) -> dict[str, Any]:
    """``values`` keyed by column name (a mapped class's keys are its attribute names)."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ArgumentTypeError(f"values must be a mapping of column to value, got {values!r}")
    named: dict[str, Any] = {}
    for key, value in values.items():
        if mapper is not None and key in mapper.columns:
            column = mapper.columns[key]
        elif key in table.c:
            column = table.c[key]
        else:
            raise InvalidArgumentError(f"table {table.name!r} has no column {key!r}")
        if column.name == fence:
            raise InvalidArgumentError(
                f"values set the fence column {fence!r}: the helper sets it to the token"
            )
        named[column.name] = value
    return named


def _update(
    target: object,
    where: Sequence[Any],
    token: object,
    values: Mapping[str, Any] | None,
    fence: str,
) -> tuple[sa.Update, sa.Select[Any], sa.Table, int]:
    """The fenced ``UPDATE`` and, for its refusal, the ``SELECT`` of the highest fence."""
    checked = _token(token)
    table, mapper = _table(target)
    column = _fence(table, fence)
    named = _columns(table, mapper, values, fence)
    statement = (
        sa.update(table)
        .where(*where, column <= checked)
        .values({**named, fence: checked})
        .execution_options(synchronize_session=False)
    )
    return statement, sa.select(sa.func.max(column)).where(*where), table, checked


def _upsert(
    dialect: str,
    target: object,
    values: Mapping[str, Any],
    token: object,
    fence: str,
    conflict: Sequence[str] | None,
) -> tuple[Any, sa.Select[Any], sa.Table, int]:
    """The fenced ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` and the ``SELECT`` of the
    row's fence (for a refusal)."""
    checked = _token(token)
    table, mapper = _table(target)
    column = _fence(table, fence)
    named = _columns(table, mapper, values, fence)
    keys = [c.name for c in table.primary_key] if conflict is None else list(conflict)
    missing = [key for key in keys if key not in named]
    if not keys or missing:
        raise InvalidArgumentError(
            f"values must hold the conflict columns {keys} of table {table.name!r}"
            + (f" (missing: {missing})" if missing else "")
        )
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    else:
        raise InvalidArgumentError(
            f"fenced_upsert needs INSERT ... ON CONFLICT DO UPDATE ... WHERE "
            f"({', '.join(_UPSERT_DIALECTS)}), not {dialect}: insert the row with fence 0 "
            "where it is missing (ignoring a duplicate), then fenced_update it"
        )
    inserted = insert(table).values({**named, fence: checked})
    statement = inserted.on_conflict_do_update(
        index_elements=keys,
        set_={name: inserted.excluded[name] for name in [*named, fence] if name not in keys},
        where=column <= inserted.excluded[fence],
    ).returning(column)  # a row back when written (a driver may not count an upsert's rows)
    row = sa.select(column).where(*(table.c[key] == named[key] for key in keys))
    return statement, row, table, checked


def _refused(table: sa.Table, token: int, seen: int | None, what: str) -> StaleTokenError:
    if seen is None:
        message = (
            f"{what} of table {table.name!r} with token {token}: no row matched, nothing "
            "written (a fenced update changes rows that exist: create one with fenced_upsert)"
        )
    else:
        message = (
            f"{what} of table {table.name!r} refused: a newer token ({seen}) than this "
            f"holder's ({token}) wrote the row; nothing written, the lock is no longer this "
            "holder's"
        )
    return StaleTokenError(message, resource=table.name, token=token, seen=seen or 0)


def _dialect(executor: object, target: object) -> str:
    if isinstance(executor, (sa.Connection, AsyncConnection)):
        return executor.dialect.name
    if isinstance(executor, (Session, AsyncSession)):
        table, mapper = _table(target)  # a session may bind each class or table elsewhere
        return executor.get_bind(mapper=mapper, clause=table).dialect.name
    raise ArgumentTypeError(
        f"expected a Session, Connection, AsyncSession or AsyncConnection, got {executor!r}"
    )


def _sync(executor: object) -> Executor:
    if not isinstance(executor, (Session, sa.Connection)):
        kind = "async_fenced_*" if isinstance(executor, (AsyncSession, AsyncConnection)) else ""
        raise ArgumentTypeError(
            f"expected a Session or a Connection, got {executor!r}"
            + (f" (use the {kind} helpers with await)" if kind else "")
        )
    return executor


def _async(executor: object) -> AsyncExecutor:
    if not isinstance(executor, (AsyncSession, AsyncConnection)):
        raise ArgumentTypeError(f"expected an AsyncSession or an AsyncConnection, got {executor!r}")
    return executor


def fenced_update(
    executor: Executor,
    target: Any,
    *where: Any,
    token: int,
    values: Mapping[str, Any] | None = None,
    fence: str = "fence",
) -> int:
    """Update the rows of ``target`` that match ``where``, setting ``values`` and the fence
    column to ``token``, only where the fence is at most ``token``: one ``UPDATE``.

    With no ``values`` it only sets the fence: it claims the rows for ``token``, so that every
    older token is refused from then on. Do that before reading in a read-modify-write (as
    ``Client.fenced_get`` does for a Redis key), in the transaction of the write.

    Runs in the caller's transaction (a ``Session``'s or a ``Connection``'s): commit it as
    usual. ORM objects already loaded are not refreshed.

    Args:
        executor: A ``Session`` or a ``Connection``.
        target: A mapped class or a ``Table``, with a fence column.
        *where: The row conditions (``Stock.id == 42``).
        token: The fencing token of the caller's hold (``lease.fencing_token``,
            ``term.token``, ``run.fencing_token``).
        values: The columns to set (keys: attribute names of a mapped class, column names
            of a table); ``None``: only the fence.
        fence: The fence column's name (one per lock: a row guarded by two locks has two).

    Returns:
        The number of rows written (at least 1).

    Raises:
        StaleTokenError: no row was written: a newer token wrote the rows (``seen``), or no
            row matched ``where`` (``seen`` 0). Nothing was written.
    """
    runner = _sync(executor)
    statement, highest, table, checked = _update(target, where, token, values, fence)
    written: int = runner.execute(statement).rowcount  # type: ignore[attr-defined]
    if written == 0:
        raise _refused(table, checked, runner.execute(highest).scalar(), "fenced update")
    return written


async def async_fenced_update(
    executor: AsyncExecutor,
    target: Any,
    *where: Any,
    token: int,
    values: Mapping[str, Any] | None = None,
    fence: str = "fence",
) -> int:
    """``fenced_update`` on an ``AsyncSession`` or an ``AsyncConnection``.

    Args:
        executor: An ``AsyncSession`` or an ``AsyncConnection``.
        target: A mapped class or a ``Table``, with a fence column.
        *where: The row conditions (``Stock.id == 42``).
        token: The fencing token of the caller's hold.
        values: The columns to set; ``None``: only the fence (a claim).
        fence: The fence column's name.

    Returns:
        The number of rows written (at least 1).

    Raises:
        StaleTokenError: no row was written (a newer token wrote the rows, or none matched).
    """
    runner = _async(executor)
    statement, highest, table, checked = _update(target, where, token, values, fence)
    written: int = (await runner.execute(statement)).rowcount  # type: ignore[attr-defined]
    if written == 0:
        seen = (await runner.execute(highest)).scalar()
        raise _refused(table, checked, seen, "fenced update")
    return written


def fenced_upsert(
    executor: Executor,
    target: Any,
    values: Mapping[str, Any],
    *,
    token: int,
    fence: str = "fence",
    conflict: Sequence[str] | None = None,
) -> None:
    """Insert the row ``values`` with the fence set to ``token``, or, if the row exists,
    update it only where its fence is at most ``token``: one ``INSERT ... ON CONFLICT DO
    UPDATE ... WHERE`` (PostgreSQL and SQLite).

    Of a new holder's insert and a stale holder's insert racing, whichever comes second is
    an update, refused if its token is the older.

    Args:
        executor: A ``Session`` or a ``Connection``.
        target: A mapped class or a ``Table``, with a fence column.
        values: The row, its key included.
        token: The fencing token of the caller's hold.
        fence: The fence column's name.
        conflict: The columns of the unique key the row is found by (default: the primary key).

    Raises:
        StaleTokenError: the row exists and a newer token wrote it; nothing was written.
        InvalidArgumentError: another database (no ``ON CONFLICT ... WHERE``), or ``values``
            without the key.
    """
    runner = _sync(executor)
    statement, row, table, checked = _upsert(
        _dialect(runner, target), target, values, token, fence, conflict
    )
    if runner.execute(statement).first() is None:
        raise _refused(table, checked, runner.execute(row).scalar(), "fenced upsert")


async def async_fenced_upsert(
    executor: AsyncExecutor,
    target: Any,
    values: Mapping[str, Any],
    *,
    token: int,
    fence: str = "fence",
    conflict: Sequence[str] | None = None,
) -> None:
    """``fenced_upsert`` on an ``AsyncSession`` or an ``AsyncConnection``.

    Args:
        executor: An ``AsyncSession`` or an ``AsyncConnection``.
        target: A mapped class or a ``Table``, with a fence column.
        values: The row, its key included.
        token: The fencing token of the caller's hold.
        fence: The fence column's name.
        conflict: The columns of the unique key the row is found by (default: the primary key).

    Raises:
        StaleTokenError: the row exists and a newer token wrote it; nothing was written.
        InvalidArgumentError: another database, or ``values`` without the key.
    """
    runner = _async(executor)
    statement, row, table, checked = _upsert(
        _dialect(runner, target), target, values, token, fence, conflict
    )
    if (await runner.execute(statement)).first() is None:
        seen = (await runner.execute(row)).scalar()
        raise _refused(table, checked, seen, "fenced upsert")
