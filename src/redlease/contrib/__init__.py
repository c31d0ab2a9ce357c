"""Integrations of redlease with frameworks, each in a module of its own that imports its
framework (``redlease.contrib.celery``); ``import redlease`` imports none of them."""

from __future__ import annotations


def _missing_extra(error: ModuleNotFoundError, module: str, extra: str) -> ModuleNotFoundError:
    """The error of ``import redlease.contrib.<module>`` without its framework: which extra
    installs it (``pip install 'redlease[<extra>]'``), the missing module named."""
    missing = (error.name or "").partition(".")[0] or "its framework"
    return ModuleNotFoundError(
        f"redlease.contrib.{module} needs {missing}, which is not installed:"
        f" pip install 'redlease[{extra}]'",
        name=error.name,
    )
