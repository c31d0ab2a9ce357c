"""The wait has one name in the public API (issue 32): ``timeout`` (seconds; ``0`` one try,
``None`` as long as it takes). This walks ``redlease.__all__`` (classes and their public
methods) and the integrations' public callables, and fails on a parameter named as another
library names the wait. Deliberate exceptions, each with its reason:

- ``acquire(blocking=...)``: ``threading.Lock.acquire``'s word, meaning "wait at all", not
  how long;
- the CLI's ``--wait``/``-w``: flock(1)'s option, which ``redlease run`` mirrors.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

import redlease

OTHER_WAIT_WORDS = {"wait", "wait_timeout", "blocking_timeout", "max_wait", "wait_seconds"}


def _integrations() -> Iterator[tuple[str, Any]]:
    for module in ("django", "fastapi", "celery"):
        try:
            mod = __import__(f"redlease.contrib.{module}", fromlist=["__all__"])
        except ModuleNotFoundError:  # its framework is not installed
            continue
        for name in mod.__all__:
            yield f"redlease.contrib.{module}.{name}", getattr(mod, name)


def _public() -> Iterator[tuple[str, Any]]:
    for name in redlease.__all__:
        obj = getattr(redlease, name)
        if dataclasses.is_dataclass(obj):
            # a value the API hands back (``Lease``, ``LockEvent``, the statistics) is read,
            # not called: its fields are what happened (``LockEvent.wait``: the seconds an
            # acquire took), not a wait to ask for
            continue
        yield name, obj
        if inspect.isclass(obj):
            for member, fn in inspect.getmembers(obj):
                if not member.startswith("_") and callable(fn):
                    yield f"{name}.{member}", fn
    yield from _integrations()


def _parameters(obj: Any) -> list[str]:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return []


def test_no_parameter_names_the_wait_otherwise() -> None:
    found = [
        f"{where}({param}=)"
        for where, obj in _public()
        if callable(obj)
        for param in _parameters(obj)
        if param in OTHER_WAIT_WORDS
    ]
    assert found == [], f"the wait is timeout= everywhere: {found}"


@pytest.mark.parametrize(
    "where",
    [
        "redlease.Client.exclusive",
        "redlease.AsyncClient.exclusive",
        "redlease.exclusive",
        "redlease.contrib.django.exclusive",
        "redlease.contrib.fastapi.exclusive",
    ],
)
def test_every_locking_entry_point_takes_timeout(where: str) -> None:
    module, _, name = where.rpartition(".")
    try:
        obj: Any = __import__(module, fromlist=[name])
    except ModuleNotFoundError:
        owner, _, cls = module.rpartition(".")
        obj = getattr(__import__(owner, fromlist=[cls]), cls)
    except ImportError:  # pragma: no cover
        pytest.skip(f"{module} is not installed")
    assert "timeout" in _parameters(getattr(obj, name))


def test_celery_exclusive_takes_timeout() -> None:
    celery = pytest.importorskip("redlease.contrib.celery")
    assert "timeout" in celery.OPTIONS
    assert not OTHER_WAIT_WORDS & set(celery.OPTIONS)
