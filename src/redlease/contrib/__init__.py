"""Integrations of redlease with frameworks, each in a module of its own that imports its
framework (``redlease.contrib.celery``); ``import redlease`` imports none of them."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidArgumentError
from ..events import Listener


def _missing_extra(error: ModuleNotFoundError, module: str, extra: str) -> ModuleNotFoundError:
    """The error of ``import redlease.contrib.<module>`` without its framework: which extra
    installs it (``pip install 'redlease[<extra>]'``), the missing module named."""
    missing = (error.name or "").partition(".")[0] or "its framework"
    return ModuleNotFoundError(
        f"redlease.contrib.{module} needs {missing}, which is not installed:"
        f" pip install 'redlease[{extra}]'",
        name=error.name,
    )


def _listeners(where: str, value: Any) -> tuple[Listener, ...]:
    """The listeners an integration adds to every client it makes (per process, per event
    loop): a list whose items are callables taking a ``LockEvent`` (a ``PrometheusMetrics``
    instance is one) or dotted paths to one (``"myapp.metrics.redlease_metrics"``, imported
    here). An ``InvalidArgumentError`` names what is wrong."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgumentError(
            f"{where} must be a list of listeners (callables or dotted paths), not {value!r}"
        )
    found: list[Listener] = []
    for item in value:
        listener = item
        if isinstance(item, str):
            module, _, attribute = item.replace(":", ".").rpartition(".")
            try:
                listener = getattr(importlib.import_module(module), attribute)
            except (ImportError, AttributeError, ValueError) as exc:
                raise InvalidArgumentError(f"{where}: cannot import {item!r}: {exc}") from None
        if not callable(listener):
            raise InvalidArgumentError(
                f"{where}: {item!r} is not a listener (a callable taking a LockEvent)"
            )
        found.append(listener)
    return tuple(found)
