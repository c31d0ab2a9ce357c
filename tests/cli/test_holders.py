"""``redlease status`` and ``list`` show who holds a lock: a real ``redlease run`` process's
host, pid, process name and command (its passwords masked), in text and JSON."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import redis

from .helpers import eventually, finish, run_cli, start_cli


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

        status = run_cli("status", "--url", url, name)
        listed = run_cli("list", "--url", url, f"{name}*")
        for result in (status, listed):
            assert result.returncode == 0, result.stderr
            line = result.stdout.splitlines()[1]
            assert line.startswith(f"{name}: held by ")
            assert f"[{host} pid {holder.pid} {process}: " in line
            assert "'redis://:***@db.example:6379/0' -p*** --password=***" in line
            assert "hunter" not in result.stdout + result.stderr

        views = [
            json.loads(run_cli("status", "--url", url, "--json", name).stdout)[0],
            json.loads(run_cli("list", "--url", url, "--json", f"{name}*").stdout)[0],
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
        released = run_cli("release", "--force", "--yes", "--url", url, name)
        assert released.returncode == 0, released.stderr
        assert f"[{host} pid {holder.pid} {process}: " in released.stdout  # who was cut off
    finally:
        holder.terminate()
        finish(holder)
