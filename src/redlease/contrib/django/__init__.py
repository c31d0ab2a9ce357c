"""redlease for Django: locks configured from settings, for views, commands and model rows.

Install with ``pip install 'redlease[django]'``, add ``"redlease.contrib.django"`` to
``INSTALLED_APPS`` (for ``python manage.py redlease status|list|release``) and configure::

    REDLEASE = {"URL": "redis://localhost:6379/0", "OPTIONS": {"watchdog_timeout": 30}}
    REDLEASE = {"CACHE": "default"}  # the Redis connection of a django-redis or RedisCache cache

- ``lock(name, **options)``: a ``redlease.Lock`` of this process's client;
  ``async_lock(...)`` an ``AsyncLock`` of the running event loop's client.
- ``exclusive(name, timeout=0, lease=None, on_busy=409, on_lost="log")``: a view (sync or
  async), a command's ``handle`` or a function run holding the lock, its name formatted from
  the call's arguments (formerly ``locked``, a deprecated alias).
- ``model_lock(instance)``: the lock of one saved row, named ``<app_label>.<model_name>:<pk>``.
- ``get_client()`` / ``get_async_client()``: the clients themselves. One ``Client`` per
  process, made on first use (a gunicorn or uwsgi worker makes its own after the fork); one
  ``AsyncClient`` per event loop, closed when the loop ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _missing_extra

try:
    from django.db.models import Model
except ModuleNotFoundError as exc:  # the framework is an extra
    raise _missing_extra(exc, "django", "django") from exc

from ... import AsyncLock, InvalidArgumentError, LeaseLostError, Lock, Seconds
from ._clients import get_async_client, get_client
from ._views import exclusive

__all__ = [
    "async_lock",
    "async_model_lock",
    "exclusive",
    "get_async_client",
    "get_client",
    "lock",
    "model_lock",
    "model_lock_name",
]


def _name(name: str) -> str:
    from ._clients import config

    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"lock name must be a non-empty str, not {name!r}")
    return config().key_prefix + name


def lock(
    name: str,
    *,
    lease: Seconds | None = None,
    on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    replicas: int | None = None,
) -> Lock:
    """The lock ``name`` (after ``REDLEASE["KEY_PREFIX"]``) of this process's client: the
    arguments of ``Client.lock``."""
    return get_client().lock(
        _name(name), lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
    )


def async_lock(
    name: str,
    *,
    lease: Seconds | None = None,
    on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    replicas: int | None = None,
) -> AsyncLock:
    """The lock ``name`` of the running event loop's client (``async with async_lock(...)``)."""
    return get_async_client().lock(
        _name(name), lease=lease, on_lease_lost=on_lease_lost, replicas=replicas
    )


def model_lock_name(instance: Model | type[Model], pk: Any = None) -> str:
    """``<app_label>.<model_name>:<pk>`` (the concrete model: a proxy locks its rows too),
    without ``KEY_PREFIX``. ``instance``: a saved instance, or a model class and ``pk``."""
    model: Any
    if isinstance(instance, type) and issubclass(instance, Model):
        model, key = instance, pk
        if key is None:
            raise InvalidArgumentError(
                f"model_lock({model._meta.label}, pk): give the primary key of the row to lock"
            )
    elif isinstance(instance, Model):
        if pk is not None:
            raise InvalidArgumentError("model_lock(instance): pk is for a model class only")
        model, key = type(instance), instance.pk
        if key is None or instance._state.adding:
            raise InvalidArgumentError(
                f"model_lock(): this {model._meta.label} is not saved yet (no row, so no"
                " primary key to name its lock after): save it first, or lock a name of your"
                " own with lock()"
            )
    else:
        raise InvalidArgumentError(
            f"model_lock() takes a saved model instance (or a model class and pk), not"
            f" {type(instance).__name__}"
        )
    meta = model._meta.concrete_model._meta
    return f"{meta.label_lower}:{key}"


def model_lock(
    instance: Model | type[Model],
    pk: Any = None,
    *,
    lease: Seconds | None = None,
    on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    replicas: int | None = None,
) -> Lock:
    """The lock of one row: ``with model_lock(order): ...`` (see ``model_lock_name``); the
    other arguments as for ``lock``. Raises ``InvalidArgumentError`` for an unsaved instance."""
    return lock(
        model_lock_name(instance, pk),
        lease=lease,
        on_lease_lost=on_lease_lost,
        replicas=replicas,
    )


def async_model_lock(
    instance: Model | type[Model],
    pk: Any = None,
    *,
    lease: Seconds | None = None,
    on_lease_lost: Callable[[LeaseLostError], None] | None = None,
    replicas: int | None = None,
) -> AsyncLock:
    """``model_lock`` for async code: the row's lock on the running event loop's client."""
    return async_lock(
        model_lock_name(instance, pk),
        lease=lease,
        on_lease_lost=on_lease_lost,
        replicas=replicas,
    )


def __getattr__(name: str) -> Any:
    if name == "locked":  # the decorator's former name (``Lock.locked()`` is the query)
        raise AttributeError(
            "redlease.contrib.django.locked was renamed redlease.contrib.django.exclusive"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
