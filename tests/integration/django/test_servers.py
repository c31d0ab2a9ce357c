"""The project under real servers.

- ``gunicorn --preload -w 2``: the master takes a lock at import (so it has a client, its
  connections and its watchdog thread before it forks); each worker makes a client of its own
  (not the master's id, not its sockets), and 40 concurrent requests doing a read-modify-write
  of one sqlite row through ``@exclusive`` lose no update.
- docs/django.md's ``model_lock`` recipe, as written there (``redlease_site.recipes``), under
  ``gunicorn -w 2 --threads 4``: 200 concurrent payments of one order lose none.
- ``uvicorn`` (ASGI): async views share one ``AsyncClient`` (the server's event loop), 40
  concurrent read-modify-writes through ``@exclusive`` lose no update, a busy lock answers 409."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from redlease import Client
from redlease.testing import RedisServer, free_port

from .test_command import SITE, site_env

START_TIMEOUT = 60.0
REQUESTS = 40
RECIPE_REQUESTS = 200


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@contextlib.contextmanager
def _serving(
    command: list[str], app: str, env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python <command> -b 127.0.0.1:<port> <app>`` in the test project, answering on
    ``/whoami``; stopped by its PID (SIGTERM, then SIGKILL)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    bind = ["--bind", f"127.0.0.1:{port}"] if "gunicorn" in command else ["--port", str(port)]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, *command, *bind, app],
            cwd=SITE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert process.poll() is None, log.read_text()
            try:
                status, _ = _get(f"{base}/whoami")
            except OSError:
                status = 0
            if status == 200:
                break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield base, process
    finally:
        process.terminate()  # gunicorn's master stops its workers
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_gunicorn_workers_make_their_own_clients(server: RedisServer, tmp_path: Path) -> None:
    pytest.importorskip("gunicorn")
    database = tmp_path / "site.sqlite3"
    master_lock = f"master:{uuid.uuid4().hex[:12]}"
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--run-syncdb", "-v", "0"],
        cwd=SITE,
        env=site_env(server.url, REDLEASE_TEST_DB=str(database)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    with sqlite3.connect(database) as db:
        db.execute("INSERT INTO redlease_shop_counter (id, value) VALUES (1, 0)")

    env = site_env(
        server.url, REDLEASE_TEST_DB=str(database), REDLEASE_TEST_MASTER_LOCK=master_lock
    )
    command = ["-m", "gunicorn", "--preload", "-w", "2", "--threads", "4"]
    command += ["--graceful-timeout", "5"]
    with _serving(command, "redlease_site.wsgi:application", env, tmp_path) as (base, process):
        with Client.from_url(server.url) as client:
            holders = client.lock(master_lock).statistics().holders
        (master_owner,) = holders  # the master holds it, renewed by its own watchdog
        master_id = master_owner.rsplit(":", 1)[0]

        with ThreadPoolExecutor(8) as pool:
            counted = list(pool.map(lambda _: _get(f"{base}/count/1"), range(REQUESTS)))
            seen = list(pool.map(lambda _: _get(f"{base}/whoami"), range(20)))
        assert [status for status, _ in counted] == [200] * REQUESTS
        with sqlite3.connect(database) as db:
            (value,) = db.execute("SELECT value FROM redlease_shop_counter WHERE id = 1").fetchone()
        assert value == REQUESTS  # no update lost across the workers

        workers: dict[int, set[str]] = {}
        for status, body in seen:
            assert status == 200
            answer = json.loads(body)
            workers.setdefault(answer["pid"], set()).add(answer["client"])
        assert process.pid not in workers  # answered by the workers, not the master
        for clients in workers.values():
            assert len(clients) == 1  # one client per worker process
            assert master_id not in clients  # never the master's
        ids = [next(iter(c)) for c in workers.values()]
        assert len(set(ids)) == len(ids)
        assert all(len(i) == len(master_id) for i in ids)  # ids of one kind: compared fairly


def test_model_lock_recipe_loses_no_update_under_gunicorn(
    server: RedisServer, tmp_path: Path
) -> None:
    """The recipe fetched the row, then locked: filled in that way it lost 167 of 200
    updates; it reads the row inside the lock now."""
    pytest.importorskip("gunicorn")
    database = tmp_path / "site.sqlite3"
    env = site_env(server.url, REDLEASE_TEST_DB=str(database))
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--run-syncdb", "-v", "0"],
        cwd=SITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    with sqlite3.connect(database) as db:
        db.execute("INSERT INTO redlease_shop_order (id, total) VALUES (1, 0)")
    command = ["-m", "gunicorn", "-w", "2", "--threads", "4", "--graceful-timeout", "5"]
    app = "redlease_site.wsgi:application"
    with _serving(command, app, env, tmp_path) as (base, _), ThreadPoolExecutor(16) as pool:
        paid = list(pool.map(lambda _: _get(f"{base}/recipes/pay/1"), range(RECIPE_REQUESTS)))
    assert [status for status, _ in paid] == [200] * RECIPE_REQUESTS, paid[:3]
    with sqlite3.connect(database) as db:
        (total,) = db.execute("SELECT total FROM redlease_shop_order WHERE id = 1").fetchone()
    assert total == RECIPE_REQUESTS  # 0 lost updates


def test_listeners_setting_reaches_every_worker_under_gunicorn_preload(
    server: RedisServer, tmp_path: Path
) -> None:
    """``REDLEASE["LISTENERS"]`` (a dotted path) is added to every client made from the
    setting: under ``gunicorn --preload`` the master's, made before the fork, and each
    worker's own, made after it; a listener added in the master reached no worker's."""
    pytest.importorskip("gunicorn")
    database = tmp_path / "site.sqlite3"
    pk = uuid.uuid4().int % 10**9
    master_lock = f"master:{uuid.uuid4().hex[:12]}"
    env = site_env(
        server.url,
        REDLEASE_TEST_DB=str(database),
        REDLEASE_TEST_MASTER_LOCK=master_lock,
        REDLEASE_TEST_LISTENERS="1",
    )
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--run-syncdb", "-v", "0"],
        cwd=SITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    with sqlite3.connect(database) as db:
        db.execute("INSERT INTO redlease_shop_counter (id, value) VALUES (?, 0)", (pk,))
    command = ["-m", "gunicorn", "--preload", "-w", "2", "--threads", "4"]
    command += ["--graceful-timeout", "5"]
    app = "redlease_site.wsgi:application"
    with _serving(command, app, env, tmp_path) as (base, process), ThreadPoolExecutor(8) as pool:
        counted = list(pool.map(lambda _: _get(f"{base}/count/{pk}"), range(REQUESTS)))
        master_pid = process.pid
    assert [status for status, _ in counted] == [200] * REQUESTS
    with Client.from_url(server.url) as client:
        r = client.redis
        name = f"counter:{pk}"
        assert int(r.get(f"events:acquired:{name}") or 0) == REQUESTS
        assert int(r.get(f"events:released:{name}") or 0) == REQUESTS
        pids = {int(p) for p in r.smembers(f"events:pids:{name}")}
        assert pids and master_pid not in pids  # the workers' own clients
        assert int(r.get(f"events:acquired:{master_lock}") or 0) == 1  # the master's too


def test_uvicorn_async_views(server: RedisServer, tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    pk = uuid.uuid4().int % 10**9
    command = ["-m", "uvicorn", "--host", "127.0.0.1", "--no-access-log"]
    env = site_env(server.url)
    with _serving(command, "redlease_site.asgi:application", env, tmp_path) as (base, _):
        with ThreadPoolExecutor(16) as pool:
            counted = list(pool.map(lambda _: _get(f"{base}/async/count/{pk}"), range(REQUESTS)))
            seen = list(pool.map(lambda _: _get(f"{base}/async/whoami"), range(20)))
        assert [status for status, _ in counted] == [200] * REQUESTS
        values = sorted(json.loads(body)["value"] for _, body in counted)
        assert values == list(range(1, REQUESTS + 1))  # no update lost, none counted twice
        clients = {json.loads(body)["client"] for status, body in seen if status == 200}
        assert len(clients) == 1  # one AsyncClient for the server's event loop
        with Client.from_url(server.url) as client, client.lock(f"async:{pk}"):
            status, _ = _get(f"{base}/async/hold/{pk}")
        assert status == 409
