"""``python manage.py redlease status|list|release`` run as real subprocesses of the small
project in ``site/``, on a private server reached by URL or through a django-redis cache;
the lock names are the app's (``KEY_PREFIX`` added); a password is never printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import redlease
from redlease import Client
from redlease.testing import RedisServer

SITE = Path(__file__).resolve().parent / "site"
SOURCE = Path(redlease.__file__).resolve().parents[1]
TIMEOUT = 60


def site_env(url: str, cache: str = "", prefix: str = "", **more: str) -> dict[str, str]:
    """The environment of a process of the test project: its server, this redlease."""
    env = dict(os.environ)
    env.update(
        REDLEASE_TEST_URL=url,
        REDLEASE_TEST_CACHE=cache,
        REDLEASE_TEST_PREFIX=prefix,
        PYTHONPATH=os.pathsep.join([str(SITE), str(SOURCE), env.get("PYTHONPATH", "")]),
        **more,
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def manage(
    url: str, *args: str, cache: str = "", prefix: str = "", **more: str
) -> subprocess.CompletedProcess[str]:
    env = site_env(url, cache, prefix, **more)
    return subprocess.run(
        [sys.executable, "manage.py", "redlease", *args],
        cwd=SITE,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_status_list_release(server: RedisServer, raw: redis.Redis, name: str) -> None:
    with Client.from_url(server.url) as client:
        lock = client.lock(f"app:{name}")
        assert lock.acquire()
        token = lock.fencing_token

        done = manage(server.url, "status", name, "--json", prefix="app:")
        assert done.returncode == 0, done.stderr
        (view,) = json.loads(done.stdout)
        assert view["name"] == f"app:{name}" and view["locked"] is True
        assert view["fencing_token"] == token and list(view["holders"].values()) == [1]

        done = manage(server.url, "list", f"{name[:-2]}*", prefix="app:")
        assert done.returncode == 0, done.stderr
        assert f"app:{name}: held by" in done.stdout

        # no --yes and no terminal: refused (as the command line refuses it), nothing done
        done = manage(server.url, "release", "--force", name, prefix="app:")
        assert done.returncode == 2
        assert "without confirmation" in done.stderr and raw.exists(f"app:{name}")

        done = manage(server.url, "release", "--force", "--no-input", name, prefix="app:")
        assert done.returncode == 0, done.stderr
        assert f"released lock app:{name}" in done.stdout
        assert not raw.exists(f"app:{name}")

        done = manage(server.url, "status", name, prefix="app:")
        assert done.returncode == 0  # after the server's line (its eviction policy)
        assert done.stdout.splitlines()[-1] == f"app:{name}: free"


@pytest.mark.parametrize("cache", ["django-redis", "django"])
def test_through_a_cache_alias(server: RedisServer, name: str, cache: str) -> None:
    with Client.from_url(server.url) as client, client.lock(name):
        done = manage(server.url, "status", name, cache=cache)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1].startswith(f"{name}: held by {client.id}:")


def test_errors_are_one_line_and_never_show_the_password(
    server: RedisServer, raw: redis.Redis, name: str
) -> None:
    raw.set(name, "a string, not a lock")
    done = manage(server.url, "status", name)
    assert done.returncode == 1
    assert done.stderr.strip() == f"CommandError: '{name}' is a string key, not a lock"

    done = manage(server.url, "release", name)  # --force is required
    assert done.returncode != 0 and "--force" in done.stderr

    done = manage("", "status", name)  # REDLEASE = {"URL": ""}
    assert done.returncode == 1
    assert done.stderr.strip() == "CommandError: REDLEASE: URL must be a Redis URL string" + (
        " (redis://, rediss://, unix://, redis+sentinel://)"
    )

    secret = "n0t-the-password"
    wrong = f"redis://:{secret}@127.0.0.1:{server.port}/0"
    done = manage(wrong, "status", name)
    assert done.returncode == 1, done.stderr
    assert "CommandError" in done.stderr and secret not in done.stderr + done.stdout
