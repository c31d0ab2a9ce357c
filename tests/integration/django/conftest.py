"""Django configured for this folder only, from the small project in ``site/`` (its settings
module, read as values: no ``DJANGO_SETTINGS_MODULE`` is set for the rest of the suite), on
an sqlite file of this process's own; each test points ``REDLEASE`` at a private server with
``override_settings``. One server binary: the protocol is tested on every binary elsewhere."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
import redis
from django.conf import settings

from redlease.testing import RedisServer, find_server

SITE = Path(__file__).resolve().parent / "site"
if str(SITE) not in sys.path:
    sys.path.insert(0, str(SITE))

if not settings.configured:
    from redlease_site import settings as site

    values = {key: getattr(site, key) for key in dir(site) if key.isupper()}
    database = Path(tempfile.mkdtemp(prefix="redlease-django-")) / "db.sqlite3"
    values["DATABASES"] = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)},
        # the private PostgreSQL of test_fencing.py: its port is set when it has started
        "postgres": {"ENGINE": "django.db.backends.postgresql", "NAME": "postgres",
                     "USER": "postgres", "HOST": "127.0.0.1", "PORT": ""},
    }  # fmt: skip
    settings.configure(**values)
    django.setup()


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(find_server()) as srv:
        yield srv


@pytest.fixture(scope="session")
def tables() -> None:
    from django.core.management import call_command

    call_command("migrate", run_syncdb=True, verbosity=0)


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(server.url, socket_timeout=10) as connection:
        yield connection


@pytest.fixture
def configured(server: RedisServer) -> Iterator[str]:
    """``REDLEASE = {"URL": <the private server>}`` for this test."""
    from django.test import override_settings

    with override_settings(REDLEASE={"URL": server.url}):
        yield server.url
