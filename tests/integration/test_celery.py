"""``redlease.contrib.celery`` against a real Celery worker: prefork, 4 processes, the Redis
broker and result backend on a private server, started as a subprocess from
``celery_app.py`` (this directory) and stopped by its PID whatever happens.

What each test proves:
- 8 simultaneous ``delay()`` of one key run it once (stage ``run``: 7 are skipped at the
  worker; stage ``enqueue``: 7 return the first one's ``AsyncResult`` and nothing is sent);
- ``on_busy``: ``raise`` fails the duplicate with ``LockTimeoutError`` (its type and attributes
  reach the caller), ``retry`` runs it after the first, never beside it;
- Celery's retries keep the key from one try to the next (``retries="keep"``), or leave it
  free meanwhile (``"retake"``);
- a worker process killed with SIGKILL mid-task frees the key within one lease (2 s here);
- with ``acks_late``, a run killed mid-task is redelivered and its redelivery does the work
  (never lost, never twice, never beside another run); a second delivery of a task that
  still runs neither runs nor stores a result; a skipped run fails with
  ``TaskSkippedError`` (never a success returning ``None``);
- a forced release of a run's hold: its result is kept and the loss logged (``on_lost="log"``,
  the default), or it fails with ``LeaseLostError`` (``on_lost="raise"``);
- redlease's errors raised in a task reach the caller whole (pickled results), and with the
  JSON result backend keep their type and message;
- options are checked when the task is made; direct calls are excluded too; ``import
  redlease`` imports no Celery.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

import redlease
from redlease import InvalidArgumentError, LockTimeoutError, QuorumError, StaleTokenError
from redlease.contrib.celery import ExclusiveTask, TaskSkippedError, client_for, redlease_url
from redlease.testing import RedisServer, find_server

from . import celery_app
from .celery_app import LEASE

HERE = Path(__file__).resolve().parent
PREFIX = "redlease:celery:"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


class Worker:
    """``celery worker -P prefork -c 4`` in a session of its own, stopped by its PID."""

    def __init__(self, url: str, log_path: Path) -> None:
        self.url = url
        self.log_path = log_path
        self.ready_key = f"worker-ready:{uuid.uuid4().hex}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env.update(
            REDLEASE_TEST_URL=self.url,
            REDLEASE_TEST_READY=self.ready_key,
            PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
        )
        command = [
            sys.executable, "-m", "celery", "-A", "celery_app", "worker",
            "-P", "prefork", "-c", "4", "-n", f"redlease-test-{os.getpid()}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO",
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=HERE,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its pool's processes are in its group
            )
        raw = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + START_TIMEOUT
        while raw.get(self.ready_key) is None:
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited at start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the worker was not ready in time:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Cold shutdown (SIGQUIT), then SIGKILL to its group if it is still there."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGQUIT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the group of the session it leads
        process.wait(STOP_TIMEOUT)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(find_server()) as srv:
        yield srv


@pytest.fixture(scope="module")
def worker(server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    celery_app.configure(server.url)
    process = Worker(server.url, tmp_path_factory.mktemp("celery") / "worker.log")
    try:
        process.start()
        yield process
    finally:
        process.stop()


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(server.url) as connection:
        yield connection


@pytest.fixture
def name() -> str:
    return uuid.uuid4().hex[:12]


def runs(raw: redis.Redis, name: str) -> list[dict[str, Any]]:
    return [json.loads(item) for item in raw.lrange(f"{name}:runs", 0, -1)]


def wait_for(condition: Callable[[], Any], worker: Worker, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s; the worker's log:\n{worker.log_tail()}")
        time.sleep(0.02)


def outcome(result: Any) -> Any:
    """A task's result, or the type of the error it ended with."""
    try:
        return result.get(timeout=20)
    except Exception as exc:
        return type(exc)


def delay_at_once(task: Any, count: int, *args: Any) -> list[Any]:
    """``count`` threads call ``task.delay(*args)`` at the same moment."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def send(i: int) -> None:
        barrier.wait(10)
        results[i] = task.delay(*args)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(r is not None for r in results), "a delay() did not return"
    return results


# --- with the worker ----------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["run", "enqueue"])
def test_eight_simultaneous_delays_of_one_key_run_once(worker, raw, name, stage):
    task = celery_app.run_skip if stage == "run" else celery_app.enqueue_skip
    results = delay_at_once(task, 8, name, 30)
    wait_for(lambda: len(runs(raw, name)) == 1, worker)
    if stage == "run":  # 7 reached a worker process and were skipped while the first ran
        wait_for(lambda: sum(r.ready() for r in results) == 7, worker)
    else:  # one task was sent; the 7 others are its AsyncResult
        assert len({r.id for r in results}) == 1
    raw.rpush(f"{name}:go", 1)
    outcomes = [outcome(r) for r in results]
    recorded = runs(raw, name)
    duplicates = len(recorded) - 1
    print(f"stage {stage}: 8 simultaneous delay() of one key, duplicates run: {duplicates}")
    assert duplicates == 0 and not recorded[0]["overlap"]
    skipped = 7 if stage == "run" else 0  # a skipped run is an error of its own, not None
    assert (outcomes.count("ran"), outcomes.count(TaskSkippedError)) == (8 - skipped, skipped)
    if stage == "run":
        with pytest.raises(TaskSkippedError) as raised:
            next(r for r in results if r.state == "FAILURE").get(timeout=20)
        assert raised.value.name == f"{PREFIX}skip:{name}"
        assert isinstance(raised.value, LockTimeoutError)  # what on_busy="raise" raises too
        assert "raised expected: TaskSkippedError" in worker.log_tail(400)  # INFO, no trace
    assert isinstance(recorded[0]["token"], int) and recorded[0]["token"] > 0

    # the key is free again: the next delay() is a task of its own, and runs
    again = task.delay(name, 0.01)
    assert again.id not in {r.id for r in results}
    assert again.get(timeout=20) == "ran"
    assert raw.keys(f"{PREFIX}*{name}:*-task") == []  # no task-id record left behind


def test_on_busy_raise_reaches_the_caller_with_its_type(worker, raw, name):
    first = celery_app.run_raise.delay(name, 30)
    wait_for(lambda: len(runs(raw, name)) == 1, worker)
    duplicate = celery_app.run_raise.delay(name, 30)
    with pytest.raises(LockTimeoutError) as raised:
        duplicate.get(timeout=20)
    assert raised.value.name == f"{PREFIX}raise:{name}"
    assert "busy" in str(raised.value)
    raw.rpush(f"{name}:go", 1)
    assert first.get(timeout=20) == "ran"
    assert len(runs(raw, name)) == 1


def test_timeout_waits_before_the_default_skip(worker, raw, name):
    """``exclusive={"timeout": 20}`` waits up to 20 s for a busy key, then skips (the default
    ``on_busy``), as ``timeout`` means everywhere in redlease; it was ignored unless
    ``on_busy="wait"``, and the duplicate skipped at once."""
    first = celery_app.skip_after_timeout.delay(name, 30)
    wait_for(lambda: len(runs(raw, name)) == 1, worker)
    duplicate = celery_app.skip_after_timeout.delay(name, 0.01)
    with redlease.Client.from_url(worker.url) as client:
        lock = client.lock(f"{PREFIX}skip-after:{name}")
        wait_for(lambda: lock.statistics().waiters == 1 or duplicate.ready(), worker)
    assert not duplicate.ready(), outcome(duplicate)  # waiting, not skipped
    raw.rpush(f"{name}:go", 1)
    assert first.get(timeout=20) == "ran"
    assert duplicate.get(timeout=20) == "ran"
    recorded = runs(raw, name)
    assert len(recorded) == 2 and not any(r["overlap"] for r in recorded)


def test_listeners_reach_each_prefork_process(worker, raw, name):
    """``app.conf.redlease_listeners`` is added to the client each prefork
    process makes after the fork: the run's hold is counted there, in the pool process."""
    assert celery_app.run_skip.delay(name, 0.01).get(timeout=20) == "ran"
    lock = f"{PREFIX}skip:{name}"
    wait_for(lambda: raw.get(f"events:released:{lock}") is not None, worker)
    assert int(raw.get(f"events:acquired:{lock}")) == 1
    (pid,) = {int(p) for p in raw.smembers(f"events:pids:{lock}")}
    assert pid == runs(raw, name)[0]["pid"] != worker.process.pid  # a pool process


def test_on_busy_retry_runs_after_the_first_never_beside_it(worker, raw, name):
    first = celery_app.run_retry.delay(name, 30)
    wait_for(lambda: len(runs(raw, name)) == 1, worker)
    duplicate = celery_app.run_retry.delay(name, 0.01)
    wait_for(lambda: duplicate.state == "RETRY", worker)  # busy: retried, not run
    assert len(runs(raw, name)) == 1
    raw.rpush(f"{name}:go", 1)
    assert first.get(timeout=20) == "ran"
    assert duplicate.get(timeout=20) == "ran"
    before, after = runs(raw, name)
    assert not before["overlap"] and not after["overlap"]
    assert after["task"] == duplicate.id and after["retries"] >= 1
    assert after["token"] > before["token"]  # a later hold, a greater fencing token


def test_on_busy_wait_runs_as_soon_as_the_first_ends(worker, raw, name):
    first = celery_app.run_wait.delay(name, 30)
    wait_for(lambda: len(runs(raw, name)) == 1, worker)
    duplicate = celery_app.run_wait.delay(name, 0.01)
    raw.rpush(f"{name}:go", 1)
    assert first.get(timeout=20) == "ran"
    assert duplicate.get(timeout=20) == "ran"
    before, after = runs(raw, name)
    assert after["task"] == duplicate.id and after["retries"] == 0  # waited, not retried
    assert not after["overlap"] and after["token"] > before["token"]


def test_celery_retries_keep_the_key(worker, raw, name):
    """The first try retries itself (2.5 s countdown): a duplicate sent once that try has
    ended finds the key reserved for the retry and is skipped; the retry then runs."""
    first = celery_app.retries_keep.delay(name, 2.5)
    wait_for(lambda: first.state == "RETRY", worker)  # its first try has ended
    duplicate = celery_app.retries_keep.delay(name, 2.5)
    with pytest.raises(TaskSkippedError):  # skipped: the key is kept for the retry
        duplicate.get(timeout=20)
    assert first.get(timeout=20) == "ran"
    assert [t.decode() for t in raw.lrange(f"{name}:tries", 0, -1)] == [first.id]
    (retried,) = runs(raw, name)
    assert retried["task"] == first.id and retried["retries"] == 1


def test_celery_retries_retake_the_key(worker, raw, name):
    """With ``retries="retake"`` the key is free during the countdown: the duplicate's first
    try runs then."""
    first = celery_app.retries_retake.delay(name, 2.5)
    wait_for(lambda: first.state == "RETRY", worker)
    duplicate = celery_app.retries_retake.delay(name, 2.5)
    wait_for(lambda: raw.llen(f"{name}:tries") == 2, worker)
    assert [t.decode() for t in raw.lrange(f"{name}:tries", 0, -1)] == [first.id, duplicate.id]
    outcomes = {outcome(first), outcome(duplicate)}
    assert "ran" in outcomes  # (the later retry may find the earlier running: skipped)
    assert outcomes <= {"ran", TaskSkippedError}
    assert not any(run["overlap"] for run in runs(raw, name))


@pytest.mark.parametrize("stage", ["run", "enqueue"])
def test_sigkill_mid_task_frees_the_key_within_one_lease(worker, raw, server, name, stage):
    task = celery_app.run_skip if stage == "run" else celery_app.enqueue_skip
    killed = task.delay(name, 60)
    wait_for(lambda: len(runs(raw, name)) == 1, worker)
    os.kill(runs(raw, name)[0]["pid"], signal.SIGKILL)  # a pool process, mid-task
    killed_at = time.monotonic()
    raw.set(f"{name}:active", 0)  # (its run never counted itself out)
    if stage == "run":
        with redlease.Client.from_url(server.url) as client:
            lock = client.lock(f"{PREFIX}skip:{name}")
            assert lock.acquire(timeout=10)
            freed = time.monotonic() - killed_at
            lock.release()
        successor = task.delay(name, 0.01)
    else:  # a delay() returns the killed task until its hold ends, then sends a new one
        deadline = time.monotonic() + 10
        successor = task.delay(name, 0.01)
        while successor.id == killed.id and time.monotonic() < deadline:
            time.sleep(0.02)
            successor = task.delay(name, 0.01)
        freed = time.monotonic() - killed_at
        assert successor.id != killed.id
    print(f"stage {stage}: key free {freed:.2f} s after SIGKILL (lease {LEASE} s)")
    assert freed <= LEASE + 1.5, freed
    assert successor.get(timeout=20) == "ran"


TASKS = 6
KILLS = 3


def test_acks_late_redelivery_after_sigkill_does_the_work_exactly_once(worker, raw, name):
    """The at-least-once recipe (``acks_late``, ``reject_on_worker_lost``): ``TASKS`` tasks of
    keys of their own; the pool process running each of the first ``KILLS`` is SIGKILLed
    mid-task (by its PID), and Celery redelivers its message at once, while the dead run's
    hold is still on the server. The redelivery (same task id) waits for that hold to run
    out and does the work: every task's work is done exactly once, never two runs of a key
    at once, and each task's result is its own."""
    names = [f"{name}-{i}" for i in range(TASKS)]
    results = [celery_app.acks_late.delay(n, 60) for n in names]
    killed: set[int] = set()
    let_go: set[int] = set()

    def step() -> bool:
        """Kill the first run of each of the first KILLS tasks; let every other run end."""
        for i, key in enumerate(names):
            recorded = runs(raw, key)
            if not recorded or i in let_go:
                continue
            if i < KILLS and i not in killed:
                raw.decr(f"{key}:active")  # it never counts itself out (decremented before
                os.kill(recorded[0]["pid"], signal.SIGKILL)  # the kill: no redelivery can
                killed.add(i)  # start before it)
            elif i not in killed or len(recorded) > 1 or results[i].ready():
                raw.rpush(f"{key}:go", 1)
                let_go.add(i)
        return len(let_go) == TASKS

    wait_for(step, worker, timeout=120)
    outcomes = []
    for result in results:
        try:
            outcomes.append(result.get(timeout=60))
        except Exception as exc:  # (reported below, with the counts)
            outcomes.append(repr(exc))
    done = [[json.loads(d)["task"] for d in raw.lrange(f"{n}:done", 0, -1)] for n in names]
    lost = sum(not d for d in done)
    twice = sum(len(d) > 1 for d in done)
    overlaps = sum(run["overlap"] for n in names for run in runs(raw, n))
    print(
        f"acks_late, {TASKS} tasks, {KILLS} SIGKILLs mid-task: work lost {lost}, "
        f"done twice {twice}, runs beside another {overlaps}; results {outcomes}"
    )
    assert (lost, twice, overlaps) == (0, 0, 0)
    assert outcomes == ["ran"] * TASKS
    for i, (key, result) in enumerate(zip(names, results, strict=True)):
        assert done[i] == [result.id]
        recorded = runs(raw, key)
        assert [r["task"] for r in recorded] == [result.id] * (2 if i < KILLS else 1)
        if i < KILLS:  # the redelivery held the key after the dead run's hold
            assert recorded[1]["token"] > recorded[0]["token"]
            assert recorded[1]["pid"] != recorded[0]["pid"]


def test_a_second_delivery_of_a_running_task_neither_runs_nor_reports(worker, raw, name):
    """A message delivered again while its first delivery still runs (the broker's
    visibility timeout ran out on a long task): the second delivery waits one lease, finds
    the key still held by the first (alive, renewing it), and ends without running and
    without storing a result, which stays the running one's."""
    first = celery_app.acks_late.apply_async((name, 60))
    wait_for(lambda: runs(raw, name), worker)
    celery_app.acks_late.apply_async((name, 60), task_id=first.id)

    def ignored() -> bool:
        return first.ready() or f"[{first.id}]: a delivery of it already" in worker.log_tail(400)

    wait_for(ignored, worker, timeout=60)
    assert not first.ready()  # no result stored by the second delivery
    raw.rpush(f"{name}:go", 1)
    assert first.get(timeout=20) == "ran"
    (run,) = runs(raw, name)
    assert run["task"] == first.id and not run["overlap"]
    assert [json.loads(d)["task"] for d in raw.lrange(f"{name}:done", 0, -1)] == [first.id]


@pytest.mark.parametrize("on_lost", ["log", "raise"])
def test_a_forced_release_while_a_task_runs(worker, raw, server, name, on_lost):
    """An operator force-releases the hold of a running task, which then finishes its work:
    with ``on_lost="log"`` (the default) its result stands and the loss is logged; with
    ``"raise"`` it fails with ``LeaseLostError`` (cause ``forced``). Either way the worker's
    client tells its listeners (``lease_lost``, what ``redlease.metrics`` counts)."""
    task = celery_app.lost_log if on_lost == "log" else celery_app.lost_raise
    lock_name = f"{PREFIX}lost:{name}"
    result = task.delay(name, 30)
    wait_for(lambda: runs(raw, name), worker)
    with redlease.Client.from_url(server.url) as admin:
        assert admin.lock(lock_name).force_release()
    wait_for(lambda: raw.lrange(f"{lock_name}:events", 0, -1), worker)  # heard
    (event,) = raw.lrange(f"{lock_name}:events", 0, -1)
    # forced, or unknown when the force came before the holder listened for it (its first
    # quarter second): then its watchdog found the hold gone
    kind, cause = event.decode().split()
    assert kind == "lease_lost" and cause in ("forced", "unknown")
    raw.rpush(f"{name}:go", 1)  # the task ends its work now
    if on_lost == "log":
        assert result.get(timeout=20) == "ran"
        wait_for(lambda: f"[{result.id}]: its hold of" in worker.log_tail(400), worker)
        line = next(x for x in worker.log_tail(400).splitlines() if f"[{result.id}]: its" in x)
        assert "WARNING" in line and f"cause {cause}" in line and "result is kept" in line
    else:
        with pytest.raises(redlease.LeaseLostError) as raised:
            result.get(timeout=20)
        assert raised.value.cause == cause and raised.value.name == lock_name
    assert len(raw.lrange(f"{lock_name}:events", 0, -1)) == 1  # told once


@pytest.mark.parametrize("kind", ["stale", "quorum"])
def test_redleases_errors_reach_the_caller_whole(worker, kind):
    result = celery_app.fails.delay(kind)
    if kind == "stale":
        with pytest.raises(StaleTokenError) as stale:
            result.get(timeout=20)
        assert (stale.value.resource, stale.value.token, stale.value.seen) == ("balance:7", 3, 9)
        return
    with pytest.raises(QuorumError) as quorum:
        result.get(timeout=20)
    error = quorum.value
    assert (error.name, error.owner, error.quorum) == ("orders:42", "someone", 2)
    assert error.outcomes == {"a:1": "granted", "b:2": "unavailable"}
    assert isinstance(error.errors["b:2"], redlease.ServerUnavailableError)
    assert error.errors["b:2"].address == "b:2"


# --- without a worker ---------------------------------------------------------------------


def public_errors() -> list[type[BaseException]]:
    found = {getattr(redlease, n) for n in redlease.__all__}
    return sorted(
        (c for c in found if isinstance(c, type) and issubclass(c, BaseException)),
        key=lambda c: c.__name__,
    )


@pytest.mark.parametrize("cls", public_errors(), ids=lambda c: c.__name__)
def test_json_result_backend_keeps_the_type_and_message(cls):
    """Celery's default result serializer (JSON) sends ``args`` only and rebuilds
    ``cls(*args)``: every redlease error comes back as itself, with its message."""
    backend = celery_app.app.backend
    sent = cls("it went wrong")
    back = backend.exception_to_python(backend.prepare_exception(sent, "json"))
    assert type(back) is cls and str(back) == "it went wrong"


def test_options_are_checked_when_the_task_is_made():
    app = Celery("checks", set_as_current=False)
    for exclusive, message in [
        ({"key": "user:{nobody}"}, "no parameter named"),
        ({"key": "user:{}"}, "not positions"),
        ({"on_busy": "explode"}, "one of skip, raise, retry, wait"),
        ({"stage": "later"}, "one of run, enqueue"),
        ({"retries": "sometimes"}, "one of keep, retake"),
        ({"timeout": -1}, "too small"),
        ({"queued_for": 0}, "too small"),
        ({"tiemout": 5}, "unknown option 'tiemout'; the options are"),
        ({"on_lost": "ignore"}, "on_lost='ignore'; one of log, raise"),
    ]:

        @app.task(base=ExclusiveTask, exclusive=exclusive, name=f"check.{len(message)}")
        def task(user_id: int) -> None: ...

        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            task.name  # noqa: B018  (the task is made on first use)


def test_keys(server):
    app = Celery("keys", set_as_current=False)

    @app.task(base=ExclusiveTask, name="keys.plain")
    def plain(user_id: int, full: bool = False) -> None: ...

    @app.task(base=ExclusiveTask, name="keys.named", exclusive={"key": "sync:{user_id}"})
    def named(user_id: int, full: bool = False) -> None: ...

    @app.task(base=ExclusiveTask, name="keys.made", exclusive={"key": lambda u, **_: f"u{u}"})
    def made(user_id: int, full: bool = False) -> None: ...

    # the default: the task name and every argument by name, however the call passed them
    assert plain.exclusive_key((7,), {}) == 'keys.plain:{"full":false,"user_id":7}'
    assert plain.exclusive_key((), {"user_id": 7, "full": False}) == plain.exclusive_key((7,), {})
    assert plain.exclusive_key((7,), {}) != plain.exclusive_key((8,), {})
    assert len(plain.exclusive_key(("x" * 500,), {})) < 100  # hashed past 200 characters
    assert named.exclusive_key((7,), {"full": True}) == "sync:7"
    assert made.exclusive_key((7,), {}) == "u7"


def test_direct_calls_are_excluded_too(server, name):
    app = Celery("direct", set_as_current=False, broker=server.url)
    app.conf.redlease_client_options = {"watchdog_timeout": 5}

    @app.task(base=ExclusiveTask, bind=True, name="direct.skip", exclusive={"key": "d:{n}"})
    def skip(self: Any, n: str) -> int:
        return int(self.request.redlease_token)

    raising = {"key": "d:{n}", "on_busy": "raise"}

    @app.task(base=ExclusiveTask, name="direct.raise", exclusive=raising)
    def fail(n: str) -> str:
        return "ran"

    assert skip(name) > 0  # free: runs, with its fencing token
    with redlease.Client.from_url(server.url) as other:
        lock = other.lock(f"{PREFIX}d:{name}")
        assert lock.acquire(timeout=5)
        try:
            with pytest.raises(TaskSkippedError):  # busy: skipped
                skip(name)
            with pytest.raises(LockTimeoutError):
                fail(name)
        finally:
            lock.release()
    assert fail(name) == "ran"

    @app.task(
        base=ExclusiveTask,
        name="direct.wait",
        exclusive={"key": "d:{n}", "on_busy": "wait", "timeout": 0.3},
    )
    def wait(n: str) -> str:
        return "ran"

    held, end = threading.Event(), threading.Event()

    def hold() -> None:  # another thread holds the key until ``end``
        with redlease.Client.from_url(server.url) as other, other.lock(f"{PREFIX}d:{name}"):
            held.set()
            end.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        with pytest.raises(LockTimeoutError):
            wait(name)  # waited its 0.3 s
        assert time.monotonic() - started >= 0.3
        threading.Timer(0.1, end.set).start()
        assert wait(name) == "ran"  # woken when the holder let go
    finally:
        end.set()
        holder.join(10)
    assert client_for(app) is client_for(app)  # one client per process
    client_for(app).close()


def test_redlease_url_may_be_any_url_from_url_takes():
    """A Sentinel URL in ``redlease_url`` is the client's (only the broker URL fallback must
    be a plain Redis one)."""
    sentinel = "redis+sentinel://:pw@127.0.0.1:1/mymaster"
    app = Celery("sentinel-app", broker="amqp://guest@127.0.0.1//")
    app.conf.redlease_url = sentinel
    assert redlease_url(app) == sentinel
    client_for(app).close()
    bare = Celery("amqp-app", broker="amqp://guest@127.0.0.1//")
    with pytest.raises(InvalidArgumentError, match="redlease_url"):
        redlease_url(bare)


def test_importing_redlease_imports_no_celery():
    code = "import sys, redlease, redlease.errors; assert 'celery' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
