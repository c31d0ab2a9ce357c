"""The Django app: ``INSTALLED_APPS = [..., "redlease.contrib.django"]`` gives the
``redlease`` management command and checks ``settings.REDLEASE`` (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class RedleaseConfig(AppConfig):  # type: ignore[misc]
    name = "redlease.contrib.django"
    label = "redlease"
    verbose_name = "redlease"

    def ready(self) -> None:
        checks.register(check_settings, checks.Tags.caches)


def check_settings(app_configs: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """``settings.REDLEASE`` as ``manage.py check`` (and ``runserver``, ``migrate``) report it:
    ``redlease.E001`` when it is missing or wrong: its shape, and with ``URL`` the URL and the
    ``OPTIONS`` too (a client is made and closed unused, as ``Client.from_url`` does no I/O;
    not with ``cluster=True``, whose client reads the cluster's layout when made). Nothing is
    connected to."""
    from ._clients import URL_HINT, make_unused, read_config

    try:
        config = read_config()
        if config.url is not None and not config.options.get("cluster"):
            make_unused(config)
    except ImproperlyConfigured as exc:  # its hint fits it: the URL's, ON_BUSY's, OPTIONS'...
        return [checks.Error(str(exc), hint=getattr(exc, "hint", URL_HINT), id="redlease.E001")]
    return []
