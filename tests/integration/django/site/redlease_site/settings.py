"""A small Django project for redlease.contrib.django's tests: the server comes from the
environment (``REDLEASE_TEST_URL``; ``REDLEASE_TEST_CACHE``: ``django-redis`` or ``django``
to reach it through a cache alias instead)."""

import os
from typing import Any

SECRET_KEY = "redlease-tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "redlease.contrib.django",
    "redlease_shop",
]
ROOT_URLCONF = "redlease_site.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("REDLEASE_TEST_DB", ":memory:"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

URL = os.environ.get("REDLEASE_TEST_URL", "redis://127.0.0.1:1/0")
BACKENDS = {
    "django-redis": "django_redis.cache.RedisCache",
    "django": "django.core.cache.backends.redis.RedisCache",
}
CACHE = os.environ.get("REDLEASE_TEST_CACHE", "")
if CACHE:
    CACHES = {"default": {"BACKEND": BACKENDS[CACHE], "LOCATION": URL}}
    REDLEASE: dict[str, Any] = {"CACHE": "default"}
else:
    REDLEASE = {"URL": URL}
REDLEASE["KEY_PREFIX"] = os.environ.get("REDLEASE_TEST_PREFIX", "")
if os.environ.get("REDLEASE_TEST_LISTENERS"):
    REDLEASE["LISTENERS"] = ["redlease_site.listeners.count"]
