"""``redlease status``, ``list``, ``release --force`` and ``bench`` run as a user runs them."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import redlease
from redlease import Client
from redlease.testing import RedisServer, free_port

from .helpers import assert_one_line, call_cli, cli_env, eventually, finish, run_cli, start_cli


@pytest.fixture
def holder(url: str) -> Iterator[Client]:
    """A client holding locks with explicit leases (no watchdog thread needed)."""
    with Client.from_url(url) as client:
        yield client


@pytest.fixture
def prefix() -> str:
    return f"cli:{uuid.uuid4().hex[:8]}:"


def hold(client: Client, name: str, lease: float = 60) -> None:
    assert client.lock(name).acquire(lease=lease)


def owner_of(client: Client, holders: dict[str, int]) -> str:
    (owner,) = holders
    assert owner.startswith(f"{client.id}:")
    return owner


# --- status ---------------------------------------------------------------------------------


def test_status_json(url: str, name: str, holder: Client) -> None:
    hold(holder, name)
    free = f"{name}:free"
    result = call_cli("status", "--url", url, "--json", name, free)
    assert result.returncode == 0, result.stderr
    held_view, free_view = json.loads(result.stdout)
    assert set(held_view) == {
        "name",
        "locked",
        "ttl",
        "holders",
        "kept_by",
        "fencing_token",
        "waiters",
        "server",
        "holder_info",
    }
    assert held_view["kept_by"] is None
    (info,) = held_view["holder_info"].values()
    assert info["pid"] == os.getpid() and info["host"] and info["process"]
    token = holder.lock(name).statistics().fencing_token
    assert token is not None and held_view["fencing_token"] == token > 0
    assert held_view["waiters"] == 0
    assert held_view["name"] == name
    assert held_view["locked"] is True
    assert 0 < held_view["ttl"] <= 60
    assert held_view["holders"][owner_of(holder, held_view["holders"])] == 1
    server = free_view.pop("server")
    assert free_view.pop("holder_info") == {}
    assert free_view == {
        "name": free,
        "locked": False,
        "ttl": None,
        "holders": {},
        "kept_by": None,
        "fencing_token": None,
        "waiters": 0,
    }
    assert server == held_view["server"]
    assert server == {
        "address": url.split("//")[1].split("/")[0],
        "maxmemory_policy": "noeviction",
        "maxmemory": 0,
        "evictable": False,
    }


def test_status_text_shows_holder_hold_count_and_ttl(url: str, name: str, holder: Client) -> None:
    hold(holder, name)
    hold(holder, name)  # re-entered: 2 holds
    result = call_cli("status", "--url", url, name, f"{name}:free")
    assert result.returncode == 0, result.stderr
    server_line, held_line, free_line = result.stdout.splitlines()
    assert server_line.endswith(
        "maxmemory-policy noeviction, maxmemory 0 (no limit): lock keys are never evicted"
    )
    assert held_line.startswith(f"{name}: held by {holder.id}:")
    assert "(2 holds)" in held_line and "ttl " in held_line and "fencing token " in held_line
    assert free_line == f"{name}:free: free"


def test_status_of_a_key_that_is_not_a_lock(url: str, name: str, r: redis.Redis) -> None:
    r.set(f"{name}:string", "x")
    r.hset(f"{name}:hash", "email", "a@example.com")
    result = call_cli(
        "status", "--url", url, "--json", f"{name}:string", f"{name}:hash", f"{name}:free"
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 2
    assert "string key, not a lock" in errors[0]
    assert "not a lock" in errors[1]
    assert [v["name"] for v in json.loads(result.stdout)] == [f"{name}:free"]


def test_status_url_from_environment(url: str, name: str) -> None:
    result = run_cli("status", name, env=cli_env(REDLEASE_URL=url))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[1:] == [f"{name}: free"]


def test_status_without_url_is_exit_2(name: str) -> None:
    result = run_cli("status", name)
    assert result.returncode == 2
    assert "REDLEASE_URL" in assert_one_line(result.stderr, starts="redlease: error: ")


@pytest.mark.parametrize(
    ("policy", "maxmemory", "shown"),
    [
        ("volatile-lru", "100mb", "maxmemory 100mb: lock keys can be evicted"),
        ("allkeys-lfu", "100mb", "maxmemory 100mb: lock keys can be evicted"),
        ("allkeys-lru", "0", "maxmemory 0 (no limit): lock keys are not evicted while"),
    ],
)
def test_status_shows_the_eviction_policy(
    name: str, policy: str, maxmemory: str, shown: str
) -> None:
    args = ("--maxmemory", maxmemory, "--maxmemory-policy", policy)
    with RedisServer(extra_args=args) as server:
        result = call_cli("status", "--url", server.url, name)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""  # shown, not warned about
        first = result.stdout.splitlines()[0]
        assert first.startswith(f"server 127.0.0.1:{server.port}: maxmemory-policy {policy}")
        assert first.endswith(shown) or shown in first
        listed = call_cli("list", "--url", server.url, "--json", "nothing:*")
        assert json.loads(listed.stdout) == []
        (view,) = json.loads(call_cli("status", "--url", server.url, "--json", name).stdout)
        assert view["server"]["maxmemory_policy"] == policy
        assert view["server"]["evictable"] is (maxmemory != "0")


def test_status_by_a_user_who_may_not_read_the_policy(name: str) -> None:
    with RedisServer() as server:
        with redis.Redis.from_url(server.url) as admin:
            admin.execute_command(
                "ACL", "SETUSER", "ops", "on", ">pw", "~*", "&*", "+@all", "-config", "-info"
            )  # fmt: skip
        url = f"redis://ops:pw@127.0.0.1:{server.port}/0"
        result = call_cli("status", "--url", url, name)
        assert result.returncode == 0, result.stderr
        first, line = result.stdout.splitlines()
        assert "eviction policy unknown" in first and line == f"{name}: free"
        (view,) = json.loads(call_cli("status", "--url", url, "--json", name).stdout)
        assert view["server"]["maxmemory_policy"] is None
        assert view["server"]["evictable"] is None


def test_run_warns_in_one_line_about_an_evicting_server(name: str, tmp_path: Path) -> None:
    args = ("--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl")
    with RedisServer(extra_args=args) as server:
        result = run_cli("run", "--url", server.url, name, "--", sys.executable, "-c", "")
    assert result.returncode == 0, result.stderr
    line = assert_one_line(result.stderr, starts="redlease: warning: ")
    assert "volatile-ttl" in line and "noeviction" in line
    assert "--eviction ignore silences this" in line  # the command line's words
    assert "Client(" not in line
    with RedisServer(extra_args=args) as server:
        quiet = run_cli(
            "run", "--url", server.url, "--eviction", "ignore", name, "--", sys.executable, "-c", ""
        )
        assert (quiet.returncode, quiet.stderr) == (0, "")  # a cron job that mails nobody
        refused = run_cli(
            "run", "--url", server.url, "--eviction", "refuse", name, "--",
            sys.executable, "-c", "open('ran', 'w')", cwd=tmp_path,
        )  # fmt: skip
        assert refused.returncode == 1
        assert not (tmp_path / "ran").exists()  # COMMAND never started
        line = assert_one_line(refused.stderr, starts="redlease: error: ")
        assert "EvictionPolicyError" in line and "volatile-ttl" in line
        assert line.endswith("or run with --eviction warn.")


# --- list -----------------------------------------------------------------------------------


def test_list_finds_held_locks_only(url: str, prefix: str, holder: Client, r: redis.Redis) -> None:
    hold(holder, f"{prefix}lock")
    r.set(f"{prefix}string", "x")
    r.hset(f"{prefix}hash", mapping={"name": "x", "email": "y"})
    r.hset(f"{prefix}fake", "not-a-uuid:1", 1)
    result = call_cli("list", "--url", url, "--json", f"{prefix}*")
    assert result.returncode == 0, result.stderr
    views = json.loads(result.stdout)
    assert [v["name"] for v in views] == [f"{prefix}lock"]
    assert views[0]["locked"] is True
    owner_of(holder, views[0]["holders"])

    text = call_cli("list", "--url", url, f"{prefix}*")
    assert text.returncode == 0, text.stderr
    server_line, lock_line = text.stdout.splitlines()
    assert server_line.startswith("server ") and "noeviction" in server_line
    assert lock_line.startswith(f"{prefix}lock: held by {holder.id}:")


def test_list_limit(url: str, prefix: str, holder: Client) -> None:
    for i in range(3):
        hold(holder, f"{prefix}{i}")
    result = call_cli("list", "--url", url, "--json", "--limit", "2", f"{prefix}*")
    assert result.returncode == 0, result.stderr
    views = json.loads(result.stdout)
    assert len(views) == 2
    assert all(v["server"]["maxmemory_policy"] == "noeviction" for v in views)
    assert "--limit 2" in assert_one_line(result.stderr)


def test_list_nothing(url: str, prefix: str) -> None:
    result = call_cli("list", "--url", url, "--json", f"{prefix}*")
    assert result.returncode == 0
    assert json.loads(result.stdout) == []


# --- release --force ------------------------------------------------------------------------


def test_force_release_wakes_a_waiter(url: str, name: str, holder: Client, r: redis.Redis) -> None:
    hold(holder, name)  # a 60 s lease: the waiter gets in well before only if woken
    waiter = start_cli("run", "--url", url, "--wait", "30", name, "--", sys.executable, "-c", "")
    try:
        channel = f"redisson_lock__channel:{{{name}}}"
        eventually(
            lambda: dict(r.pubsub_numsub(channel))[channel.encode()] > 0,
            what="waiter waiting",
            proc=waiter,
        )
        result = call_cli("release", "--force", "--yes", "--url", url, name)
        assert result.returncode == 0, result.stderr
        assert f"released lock {name}" in result.stdout
    finally:
        status, _, err = finish(waiter, timeout=20)
    assert status == 0, err
    assert r.exists(name) == 0


def test_force_release_of_a_free_lock_is_exit_1(url: str, name: str) -> None:
    result = run_cli("release", "--force", "--yes", "--url", url, name)
    assert result.returncode == 1
    assert "not held" in assert_one_line(result.stderr, starts="redlease: error: ")


def test_force_release_needs_yes_without_a_terminal(
    url: str, name: str, holder: Client, r: redis.Redis
) -> None:
    hold(holder, name)
    result = run_cli("release", "--force", "--url", url, name)  # stdin is /dev/null
    assert result.returncode == 2
    assert "--yes" in assert_one_line(result.stderr, starts="redlease: error: ")
    assert r.exists(name) == 1


def test_force_release_needs_force(url: str, name: str) -> None:
    result = run_cli("release", "--yes", "--url", url, name)
    assert result.returncode == 2
    assert "--force" in assert_one_line(result.stderr)


def test_force_release_leaves_other_keys_alone(url: str, name: str, r: redis.Redis) -> None:
    r.set(name, "precious")
    result = call_cli("release", "--force", "--yes", "--url", url, name)
    assert result.returncode == 1
    assert "not a lock" in assert_one_line(result.stderr)
    assert r.get(name) == b"precious"


# --- a kept lock (release(keep_for=), run --at-least) ---------------------------------------

OWNER = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[0-9]+")


def run_kept(url: str, name: str) -> None:
    """A cron job's run that keeps its lock taken 60 s after it was taken (``--at-least``)."""
    result = run_cli(
        "run", "--url", url, "--wait", "0", "--at-least", "60", name, "--", sys.executable, "-c", ""
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_status_and_list_show_a_kept_lock(url: str, prefix: str) -> None:
    """A lock kept after its run (nobody holds it, nobody can take it) is shown as kept, by
    the owner whose release kept it (and who that was), with the time left; ``status`` exited
    1 ("not a lock") and ``list`` left it out before."""
    name = f"{prefix}job"
    run_kept(url, name)
    result = call_cli("status", "--url", url, "--json", name)
    assert result.returncode == 0, result.stderr
    (view,) = json.loads(result.stdout)
    owner = view["kept_by"]
    assert OWNER.fullmatch(owner), view
    assert view["locked"] is True and view["holders"] == {}
    assert 0 < view["ttl"] <= 60  # kept for what is left of its 60 s
    assert view["fencing_token"] > 0
    assert view["holder_info"][owner]["pid"] > 0 and view["holder_info"][owner]["host"]

    text = call_cli("status", "--url", url, name)
    assert text.returncode == 0, text.stderr
    line = text.stdout.splitlines()[1]
    assert line.startswith(f"{name}: kept after its release by {owner} [")
    assert ", ttl " in line and "fencing token " in line

    listed = call_cli("list", "--url", url, "--json", f"{prefix}*")
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)
    assert (item["name"], item["locked"], item["holders"], item["kept_by"]) == (
        name, True, {}, owner,
    )  # fmt: skip
    assert 0 < item["ttl"] <= 60 and owner in item["holder_info"]
    listed_text = call_cli("list", "--url", url, f"{prefix}*")
    assert listed_text.returncode == 0, listed_text.stderr
    assert listed_text.stdout.splitlines()[1].startswith(
        f"{name}: kept after its release by {owner}"
    )


def test_force_release_frees_a_kept_lock_and_wakes_a_waiter(
    url: str, name: str, r: redis.Redis
) -> None:
    """``release --force`` clears a kept lock (it exited 1, "not a lock", before): a run
    waiting for it runs, and the output says whose kept lock it was."""
    run_kept(url, name)
    waiter = start_cli("run", "--url", url, "--wait", "30", name, "--", sys.executable, "-c", "")
    try:
        channel = f"redisson_lock__channel:{{{name}}}"
        eventually(
            lambda: dict(r.pubsub_numsub(channel))[channel.encode()] > 0,
            what="waiter waiting",
            proc=waiter,
        )
        result = call_cli("release", "--force", "--yes", "--url", url, name)
        assert result.returncode == 0, result.stderr
        assert OWNER.search(result.stdout)
        assert result.stdout.startswith(f"released lock {name} (it was kept after its release by ")
    finally:
        status, _, err = finish(waiter, timeout=20)
    assert status == 0, err  # the waiting run got the lock and ran
    assert r.exists(name) == 0


# --- servers, URLs and passwords ------------------------------------------------------------


@pytest.fixture(scope="module")
def password_server() -> Iterator[RedisServer]:
    """A server that requires the password ``s3cret``."""
    with RedisServer() as srv:
        admin = redis.Redis.from_url(srv.url)
        admin.config_set("requirepass", "s3cret")
        admin.close()
        yield srv


@pytest.mark.parametrize("password", ["s3cret", "wrong-s3cret"])
@pytest.mark.parametrize(
    "command", [["status", "x"], ["list"], ["release", "--force", "--yes", "x"]]
)
def test_password_is_never_printed(
    password_server: RedisServer, password: str, command: list[str]
) -> None:
    secret_url = f"redis://:{password}@127.0.0.1:{password_server.port}/0"
    result = run_cli(*command, "--url", secret_url)
    assert password not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    if password == "wrong-s3cret":
        assert result.returncode == 1
        assert "authentication failed" in assert_one_line(result.stderr)


@pytest.mark.parametrize(
    "command", [["status", "x"], ["list"], ["release", "--force", "--yes", "x"]]
)
def test_server_down_is_one_line_exit_1(command: list[str]) -> None:
    down = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    result = run_cli(*command, "--url", down)
    assert result.returncode == 1
    assert "cannot reach" in assert_one_line(result.stderr, starts="redlease: error: ")
    assert "s3cret" not in result.stdout + result.stderr


def test_unknown_option_does_not_echo_a_password() -> None:
    result = run_cli("list", "--uri=redis://:s3cret@127.0.0.1:1")
    assert result.returncode == 2
    assert "s3cret" not in assert_one_line(result.stderr)


# --- bench ----------------------------------------------------------------------------------


def test_bench_runs_from_outside_the_source_checkout(url: str, tmp_path: Path) -> None:
    """The installed command works without benchmarks/: the package copied alone into a
    directory of its own, run from there, on the server given by --url."""
    site = tmp_path / "site"
    shutil.copytree(
        Path(redlease.__file__).parent, site / "redlease", ignore=shutil.ignore_patterns("*.pyc")
    )
    env = cli_env(PYTHONPATH=str(site))
    result = subprocess.run(
        [sys.executable, "-m", "redlease", "bench", "--url", url, "--seconds", "0.3", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["server"] == url.split("//")[1].split("/")[0]
    assert figures["ping_ms"] > 0
    for kind in ("uncontended", "contended"):
        assert figures[kind]["cycles"] > 0
        assert figures[kind]["acquire_ms"]["p50"] > 0
    text = run_cli("bench", "--url", url, "--seconds", "0.2", "--threads", "1", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "acquire+release/s" in text.stdout and "PING" in text.stdout


def test_bench_refuses_bad_options() -> None:
    result = run_cli("bench", "--threads", "0")
    assert result.returncode == 2
    assert "--threads" in assert_one_line(result.stderr, starts="redlease bench: error: ")


@pytest.mark.parametrize(("answer", "status"), [("y\n", 0), ("n\n", 1), ("", 1)])
def test_force_release_asks_on_a_terminal(
    url: str, name: str, holder: Client, r: redis.Redis, answer: str, status: int
) -> None:
    hold(holder, name)
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "redlease", "release", "--force", "--url", url, name],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        os.close(terminal)
        terminal = -1
        if answer:
            os.write(controller, answer.encode())
        else:
            os.write(controller, b"\x04")  # Ctrl-D: end of input
        code, out, err = finish(proc, timeout=30)
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert code == status, err
    assert "force-release" in err and "[y/N]" in err
    assert r.exists(name) == (0 if status == 0 else 1)
    if status == 0:
        assert f"released lock {name}" in out


@pytest.mark.parametrize(
    ("denied", "verb", "user_hash", "command"),
    [
        ("-@scripting", "status", False, "evalsha"),
        ("-@scripting", "run", False, "evalsha"),
        ("-type", "status", False, "type"),
        ("-hscan", "status", True, "hscan"),
        ("-hscan", "run", True, "hscan"),
    ],
)
def test_a_limited_user_is_told_which_command_it_lacks(
    cli_server: RedisServer,
    r: redis.Redis,
    denied: str,
    verb: str,
    user_hash: bool,
    command: str,
) -> None:
    """``status`` and ``run`` as a user without scripting, TYPE or HSCAN (which the lock
    script runs on a hash that may be a user's): one line naming the command, exit 1; never
    "not a lock" nor "unavailable", and nothing written or deleted."""
    user = f"limited{uuid.uuid4().hex[:8]}"
    r.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all", denied)
    name = f"limited-{uuid.uuid4().hex[:8]}"
    if user_hash:
        r.hset(name, "field", "value")
    url = f"redis://{user}:pw@127.0.0.1:{cli_server.port}"
    try:
        if verb == "run":  # a process of its own; status in this one (call_cli)
            done = run_cli("run", "--url", url, "--wait", "1", name, "--", "true")
        else:
            done = call_cli(verb, "--url", url, name)
        assert done.returncode == 1, done
        assert_one_line(done.stderr)
        assert "PermissionDeniedError" in done.stderr
        assert f"to run the '{command}' command" in done.stderr
        assert user in done.stderr
        assert r.hgetall(name) == ({b"field": b"value"} if user_hash else {})
    finally:
        r.execute_command("ACL", "DELUSER", user)
        r.delete(name)
