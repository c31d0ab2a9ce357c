"""Fenced writes to SQL through Django's ORM.

A row keeps, in its fence field, the highest fencing token that wrote it; a write carries the
writer's token and changes the row only if that token is at least the one kept (the rule of
``Client.fenced_set``), in the same statement, with no extra round trip::

    UPDATE shop_stock SET qty = 8, fence = <token> WHERE id = 42 AND fence <= <token>

- ``FenceField`` (a ``BigIntegerField``, default 0, not editable in forms): the fence
  column, ``fence = FenceField()`` in the model, added by ``makemigrations`` like any field
  (``AddField`` fills the rows that exist with 0).
- ``fenced_update(Stock.objects.filter(pk=42), token=..., values={...})``: the fenced
  ``UPDATE``; with no ``values`` it only claims the rows for the token (read after it, in a
  read-modify-write). ``StaleTokenError`` when no row was written.
- ``fenced_upsert(Stock, {"id": 43, "qty": 5}, token=...)``: a row that may not exist yet.
- ``async_fenced_update`` and ``async_fenced_upsert``: the same with ``await``.

Write a fenced model's rows with these, not ``save()``: a ``save()`` does not check the fence.
The rules are in the how-to page "Fencing a database write" (docs/fencing-database.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import _missing_extra

try:
    from django.db import models, transaction
    from django.db.models import Max, QuerySet
except ModuleNotFoundError as exc:  # the framework is an extra
    raise _missing_extra(exc, "django.fencing", "django") from exc

from ...errors import ArgumentTypeError, InvalidArgumentError, StaleTokenError

__all__ = [
    "FenceField",
    "async_fenced_update",
    "async_fenced_upsert",
    "fenced_update",
    "fenced_upsert",
]


class FenceField(models.BigIntegerField):  # type: ignore[misc]
    """The fence column: a ``BigIntegerField`` with ``default=0`` (no token wrote the row yet;
    every fencing token is above it) and ``editable=False`` (not in forms nor the admin)::

        class Stock(models.Model):
            qty = models.IntegerField()
            fence = FenceField()

    Its migration is an ``AddField`` (``CreateModel`` for a new model) with
    ``redlease.contrib.django.fencing.FenceField()``; the rows that exist get 0.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", 0)
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        name, _, args, kwargs = super().deconstruct()
        if kwargs.get("default") == 0:
            del kwargs["default"]
        if kwargs.get("editable") is False:
            del kwargs["editable"]
        else:
            kwargs["editable"] = True
        return name, "redlease.contrib.django.fencing.FenceField", args, kwargs


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


def _queryset(queryset: object) -> QuerySet[Any]:
    if not isinstance(queryset, QuerySet):
        raise ArgumentTypeError(
            f"expected a QuerySet (Stock.objects.filter(pk=42)), got {queryset!r}"
        )
    return queryset


def _fields(model: type[Any], values: Mapping[str, Any] | None, fence: str) -> dict[str, Any]:
    try:
        field = model._meta.get_field(fence)
    except Exception:
        field = None
    if field is None or not isinstance(field, models.IntegerField):
        raise InvalidArgumentError(
            f"model {model._meta.label} has no integer fence field {fence!r}: add one "
            "(FenceField, FencedModel) or name it with fence="
        )
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ArgumentTypeError(f"values must be a mapping of field to value, got {values!r}")
    if fence in values:
        raise InvalidArgumentError(
            f"values set the fence field {fence!r}: the helper sets it to the token"
        )
    return dict(values)


def _refused(model: type[Any], token: int, seen: int | None, what: str) -> StaleTokenError:
    table = model._meta.db_table
    if seen is None:
        message = (
            f"{what} of {table} with token {token}: no row matched, nothing written "
            "(a fenced update changes rows that exist: create one with fenced_upsert)"
        )
    else:
        message = (
            f"{what} of {table} refused: a newer token ({seen}) than this holder's "
            f"({token}) wrote the row; nothing written, the lock is no longer this holder's"
        )
    return StaleTokenError(message, resource=table, token=token, seen=seen or 0)


def fenced_update(
    queryset: QuerySet[Any],
    *,
    token: int,
    values: Mapping[str, Any] | None = None,
    fence: str = "fence",
) -> int:
    """Update the rows of ``queryset``, setting ``values`` and the fence field to ``token``,
    only where the fence is at most ``token``: one ``UPDATE``
    (``queryset.filter(fence__lte=token).update(...)``).

    With no ``values`` it only sets the fence: it claims the rows for ``token``, so that every
    older token is refused from then on. Do that before reading in a read-modify-write (as
    ``Client.fenced_get`` does for a Redis key), inside the ``transaction.atomic()`` of the
    write.

    Args:
        queryset: The rows (``Stock.objects.filter(pk=42)``).
        token: The fencing token of the caller's hold (``lease.fencing_token``,
            ``term.token``, ``run.fencing_token``).
        values: The fields to set (values or expressions such as ``F("qty") - 1``);
            ``None``: only the fence.
        fence: The fence field's name (one per lock: a row guarded by two locks has two).

    Returns:
        The number of rows written (at least 1).

    Raises:
        StaleTokenError: no row was written: a newer token wrote the rows (``seen``), or no
            row matched (``seen`` 0). Nothing was written.
    """
    rows = _queryset(queryset)
    checked = _token(token)
    named = _fields(rows.model, values, fence)
    written: int = rows.filter(**{f"{fence}__lte": checked}).update(**named, **{fence: checked})
    if written == 0:
        seen = rows.aggregate(seen=Max(fence))["seen"]
        raise _refused(rows.model, checked, seen, "fenced update")
    return written


async def async_fenced_update(
    queryset: QuerySet[Any],
    *,
    token: int,
    values: Mapping[str, Any] | None = None,
    fence: str = "fence",
) -> int:
    """``fenced_update`` with ``await`` (``aupdate``).

    Args:
        queryset: The rows.
        token: The fencing token of the caller's hold.
        values: The fields to set; ``None``: only the fence (a claim).
        fence: The fence field's name.

    Returns:
        The number of rows written (at least 1).

    Raises:
        StaleTokenError: no row was written (a newer token wrote the rows, or none matched).
    """
    rows = _queryset(queryset)
    checked = _token(token)
    named = _fields(rows.model, values, fence)
    written: int = await rows.filter(**{f"{fence}__lte": checked}).aupdate(
        **named, **{fence: checked}
    )
    if written == 0:
        seen = (await rows.aaggregate(seen=Max(fence)))["seen"]
        raise _refused(rows.model, checked, seen, "fenced update")
    return written


def _upsert_parts(
    model: object, values: Mapping[str, Any], token: object, fence: str, conflict: Any
) -> tuple[type[Any], int, dict[str, Any], dict[str, Any], dict[str, Any]]:
    if not (isinstance(model, type) and issubclass(model, models.Model)):
        raise ArgumentTypeError(f"expected a model class, got {model!r}")
    meta: Any = model._meta  # type: ignore[attr-defined]
    checked = _token(token)
    if not isinstance(values, Mapping):
        raise ArgumentTypeError(f"values must be a mapping of field to value, got {values!r}")
    named = _fields(model, values, fence)
    keys: Sequence[str] = (meta.pk.name,) if conflict is None else tuple(conflict)
    if "pk" in named and meta.pk.name in keys:
        named[meta.pk.name] = named.pop("pk")
    missing = [key for key in keys if key not in named]
    if not keys or missing:
        raise InvalidArgumentError(
            f"values must hold the conflict fields {list(keys)} of {meta.label}"
            + (f" (missing: {missing})" if missing else "")
        )
    lookup = {key: named[key] for key in keys}
    rest = {key: value for key, value in named.items() if key not in keys}
    return model, checked, named, lookup, rest


def fenced_upsert(
    model: type[Any],
    values: Mapping[str, Any],
    *,
    token: int,
    fence: str = "fence",
    conflict: Sequence[str] | None = None,
    using: str | None = None,
) -> None:
    """Create the row ``values`` with the fence set to ``token``, or, if it exists, update it
    only where its fence is at most ``token``.

    Two statements in one transaction, on every database: an insert that ignores a
    duplicate (``bulk_create(ignore_conflicts=True)``), then ``fenced_update`` of the row.
    Of a new holder's insert and a stale holder's insert racing, the second is ignored and
    its update refused if its token is the older.

    Args:
        model: The model class, with a fence field.
        values: The row's fields, its key included (``{"id": 43, "qty": 5}``).
        token: The fencing token of the caller's hold.
        fence: The fence field's name.
        conflict: The unique fields the row is found by (default: the primary key).
        using: The database alias (default: the model's, from the routers).

    Raises:
        StaleTokenError: the row exists and a newer token wrote it; nothing was written.
    """
    model, checked, named, lookup, rest = _upsert_parts(model, values, token, fence, conflict)
    manager = model._default_manager.db_manager(using)
    with transaction.atomic(using=manager.db):
        manager.bulk_create([model(**named, **{fence: checked})], ignore_conflicts=True)
        fenced_update(manager.filter(**lookup), token=checked, values=rest, fence=fence)


async def async_fenced_upsert(
    model: type[Any],
    values: Mapping[str, Any],
    *,
    token: int,
    fence: str = "fence",
    conflict: Sequence[str] | None = None,
    using: str | None = None,
) -> None:
    """``fenced_upsert`` with ``await`` (``abulk_create``, then ``async_fenced_update``; not
    in one transaction, which Django's async API has not: each statement is safe alone).

    Args:
        model: The model class, with a fence field.
        values: The row's fields, its key included.
        token: The fencing token of the caller's hold.
        fence: The fence field's name.
        conflict: The unique fields the row is found by (default: the primary key).
        using: The database alias.

    Raises:
        StaleTokenError: the row exists and a newer token wrote it; nothing was written.
    """
    model, checked, named, lookup, rest = _upsert_parts(model, values, token, fence, conflict)
    manager = model._default_manager.db_manager(using)
    await manager.abulk_create([model(**named, **{fence: checked})], ignore_conflicts=True)
    await async_fenced_update(manager.filter(**lookup), token=checked, values=rest, fence=fence)
