"""``redlease status`` and ``list`` show who holds a lock: a real ``redlease run`` process's
host, pid, process name and command (its passwords masked), in text and JSON."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redlease.testing import RedisServer

from .helpers import call_cli, eventually, finish, run_cli, start_cli


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def test_status_and_list_show_the_holder_process(url: str, name: str, r: redis.Redis) -> None:
    command = [
        sys.executable,
        "-c",
        "import time; time.sleep(120)",
        "redis://:hunter2@db.example:6379/0",
        "-phunter3",
        "--password=hunter4",
    ]
    holder = start_cli("run", "--url", url, name, "--", *command)
    try:
        eventually(lambda: r.exists(name) == 1, what="lock taken", proc=holder)
        process = comm(holder.pid)
        host = socket.gethostname()

        status = call_cli("status", "--url", url, name)
        listed = call_cli("list", "--url", url, f"{name}*")
        for result in (status, listed):
            assert result.returncode == 0, result.stderr
            line = result.stdout.splitlines()[1]
            assert line.startswith(f"{name}: held by ")
            assert f"[{host} pid {holder.pid} {process}: " in line
            assert "'redis://:***@db.example:6379/0' -p*** --password=***" in line
            assert "hunter" not in result.stdout + result.stderr

        views = [
            json.loads(call_cli("status", "--url", url, "--json", name).stdout)[0],
            json.loads(call_cli("list", "--url", url, "--json", f"{name}*").stdout)[0],
        ]
        assert views[0].keys() == views[1].keys()  # the same record shape
        for view in views:
            (owner,) = view["holders"]
            info = view["holder_info"][owner]
            assert info["host"] == host
            assert info["pid"] == holder.pid
            assert info["process"] == process
            assert info["info"].startswith(sys.executable)
            assert "hunter" not in json.dumps(view)
        released = call_cli("release", "--force", "--yes", "--url", url, name)
        assert released.returncode == 0, released.stderr
        assert f"[{host} pid {holder.pid} {process}: " in released.stdout  # who was cut off
    finally:
        holder.terminate()
        finish(holder)


SECRET = "s3cret'pw"
"""The server's password: a quote in it, so that ``shlex`` writes it escaped in the command."""


@pytest.fixture(scope="module")
def password_server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        admin = redis.Redis.from_url(srv.url)
        admin.config_set("requirepass", SECRET)
        admin.close()
        yield srv


def test_the_urls_password_is_masked_anywhere_in_the_command(password_server: RedisServer) -> None:
    """The command may repeat the URL's password where no rule sees one (in a ``sh -c``
    script, a positional argument): the client masks its own password wherever it is."""
    url = f"redis://:s3cret%27pw@127.0.0.1:{password_server.port}/0"
    r = redis.Redis(port=password_server.port, password=SECRET)
    name = "review:masked"
    script = f"import time; time.sleep(120)  # redis-cli -a {SECRET}"
    command = [sys.executable, "-c", script, SECRET, "--no-auth-warning", "kept"]
    holder = start_cli("run", "--url", url, name, "--", *command)
    try:
        eventually(lambda: r.exists(name) == 1, what="lock taken", proc=holder)
        shown = f"{sys.executable} -c 'import time; time.sleep(120)  # redis-cli -a ***' '***'"
        shown += " --no-auth-warning kept"
        texts = [call_cli("status", "--url", url, name), call_cli("list", "--url", url)]
        views = [
            call_cli("status", "--url", url, "--json", name),
            call_cli("list", "--url", url, "--json"),
        ]
        records = [r.get(key) or b"" for key in r.scan_iter("redlease:client:*")]
        released = call_cli("release", "--force", "--yes", "--url", url, name)
        for result in [*texts, *views, released]:
            assert result.returncode == 0, result.stderr
            assert "s3cret" not in result.stdout + result.stderr
        for result in [*texts, released]:
            assert f": {shown}]" in result.stdout
        for result in views:
            (info,) = json.loads(result.stdout)[0]["holder_info"].values()
            assert info["info"] == shown
        assert records
        assert not [record for record in records if b"s3cret" in record]
    finally:
        holder.terminate()
        finish(holder)
        r.close()


def test_commands_that_only_look_write_no_holder_record() -> None:
    """``status``, ``list`` and ``release`` hold nothing: they leave no record of their own
    (a monitor running ``status`` every minute would keep 90 of them alive), while a
    ``redlease run`` that holds a lock keeps one."""
    with RedisServer() as srv:
        r = redis.Redis.from_url(srv.url)
        try:
            name = "looks:only"
            for args in (
                ("status", name),
                ("list", "looks:*"),
                ("status", "--json", name),
                ("release", "--force", "--yes", name),
            ):
                result = call_cli(args[0], "--url", srv.url, *args[1:])
                assert result.returncode in (0, 1), result.stderr
            assert list(r.scan_iter("redlease:client:*")) == []
            ran = run_cli("run", "--url", srv.url, name, "--", sys.executable, "-c", "")
            assert ran.returncode == 0, ran.stderr
            assert len(list(r.scan_iter("redlease:client:*"))) == 1
        finally:
            r.close()
