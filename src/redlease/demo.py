"""``redlease demo``: the classic stock-deduction race, first without a lock, then with one.

Several worker *processes*, each with its own client, sell items from one Redis stock key with
a read-modify-write (GET stock; if > 0: pause 1 ms, SET stock-1, INCR sold). Without a lock
the workers overwrite each other's SET and sell items that never existed; with a redlease lock
around each sale they sell exactly the stock. The report prints one machine-checkable line per
round (``with lock: sold=100 stock=0 expected=100 seconds=0.52``).

Every worker loop is bounded by an iteration count and a wall-time limit, so the demo ends even
against a misbehaving server.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.context
import multiprocessing.queues
import multiprocessing.synchronize
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TextIO, cast

import redis
import redis.exceptions

from ._redis.urls import is_sentinel_url, sentinel_master
from ._sync.client import Client

__all__ = ["DemoError", "RoundResult", "run_demo"]

KEY_PREFIX = "redlease:demo:"
PAUSE = 0.001
"""Seconds between the GET and the SET of a sale: widens the race window so it shows."""
ROUND_TIME_LIMIT = 30.0
"""Wall-time limit of each worker in a round, counted from the common start."""
STARTUP_TIMEOUT = 60.0
"""How long the workers (and the demo) wait for every worker process to be ready."""
CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 10.0


class DemoError(RuntimeError):
    """The demo could not run (server unreachable, a worker failed); the message is one line."""


@dataclass(frozen=True)
class DemoKeys:
    """The keys of one demo run: unique per run, so concurrent demos on a server do not mix."""

    stock: str
    sold: str
    lock: str

    @classmethod
    def new(cls) -> DemoKeys:
        base = f"{KEY_PREFIX}{os.urandom(4).hex()}:"
        return cls(stock=base + "stock", sold=base + "sold", lock=base + "lock")

    def all(self) -> tuple[str, str, str]:
        return (self.stock, self.sold, self.lock)


@dataclass(frozen=True)
class WorkerJob:
    """What one worker process is told to do (pickled to the spawned process)."""

    url: str
    keys: DemoKeys
    locked: bool
    max_iterations: int
    time_limit: float


@dataclass(frozen=True)
class WorkerResult:
    """What one worker reports back: its sales, why it stopped, or the error that stopped it."""

    sold: int
    iterations: int
    stopped_by: str
    error: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RoundResult:
    """One round as read back from Redis after all workers finished."""

    locked: bool
    workers: int
    expected: int
    sold: int
    stock: int
    seconds: float
    limits_hit: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "with lock" if self.locked else "no lock"

    @property
    def exact(self) -> bool:
        return self.sold == self.expected and self.stock == 0

    @property
    def consistent(self) -> bool:
        """Every sale took exactly one item off the stock (no oversell, no lost update)."""
        return self.sold + self.stock == self.expected

    def line(self) -> str:
        return (
            f"{self.label}: sold={self.sold} stock={self.stock} expected={self.expected}"
            f" seconds={self.seconds:.2f}"
        )


def _redis(url: str) -> redis.Redis:
    timeouts = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": COMMAND_TIMEOUT}
    if is_sentinel_url(url):
        return sentinel_master(url, timeouts)[0]
    return redis.Redis.from_url(url, **timeouts)


def _sell_one(r: redis.Redis, keys: DemoKeys) -> bool:
    """One unprotected read-modify-write sale; ``False`` when the stock is gone."""
    raw = cast("bytes | None", r.get(keys.stock))
    stock = int(raw) if raw is not None else 0
    if stock <= 0:
        return False
    time.sleep(PAUSE)
    r.set(keys.stock, stock - 1)
    r.incr(keys.sold)
    return True


def _sell(
    job: WorkerJob, client: Client, cancel: multiprocessing.synchronize.Event
) -> WorkerResult:
    """Sell until the stock is gone, within the iteration and wall-time limits."""
    r = client.redis
    lock = client.lock(job.keys.lock)
    sold = iterations = 0
    deadline = time.monotonic() + job.time_limit
    while True:
        if iterations >= job.max_iterations:
            return WorkerResult(sold, iterations, "iteration limit")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return WorkerResult(sold, iterations, "time limit")
        if cancel.is_set():
            return WorkerResult(sold, iterations, "cancelled")
        iterations += 1
        if job.locked:
            if not lock.acquire(timeout=remaining):
                return WorkerResult(sold, iterations, "time limit")
            try:
                more = _sell_one(r, job.keys)
            finally:
                lock.release()
        else:
            more = _sell_one(r, job.keys)
        if not more:
            return WorkerResult(sold, iterations, "sold out")
        sold += 1


def _one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception and of the one it happened while handling."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None:
        text += f" (while handling {type(cause).__name__}: {cause})"
    return " ".join(text.split())


class _Collector(logging.Handler):
    """Keeps redlease's warnings and background-thread crashes in a worker as one-line texts,
    instead of the tracebacks logging's last-resort handler and threading would print."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {_one_line(record.exc_info[1])}"
        self.lines.append(text)

    def thread_died(self, args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "a thread"
        what = _one_line(args.exc_value) if args.exc_value is not None else args.exc_type.__name__
        self.lines.append(f"background thread {name} died: {what}")


def _worker(
    job: WorkerJob,
    go: multiprocessing.synchronize.Event,
    cancel: multiprocessing.synchronize.Event,
    messages: multiprocessing.queues.Queue[WorkerResult | None],
) -> None:
    """A worker process: connect, say ready (``None``), wait for ``go``, sell, report.

    Sends exactly one ``WorkerResult``, as soon as the selling ends (so closing the client is
    not timed). Never raises: a traceback from a worker would garble the report, so errors go
    back as text.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    collector = _Collector()
    logger = logging.getLogger("redlease")
    logger.addHandler(collector)
    logger.propagate = False
    threading.excepthook = collector.thread_died
    sent = False
    try:
        with Client.from_url(
            job.url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=COMMAND_TIMEOUT
        ) as client:
            client.redis.ping()
            messages.put(None)
            if not go.wait(timeout=STARTUP_TIMEOUT) or cancel.is_set():
                result = WorkerResult(0, 0, "cancelled")
            else:
                result = _sell(job, client, cancel)
            messages.put(replace(result, warnings=tuple(collector.lines)))
            sent = True
    except Exception as exc:
        if not sent:
            warnings = tuple(collector.lines)
            messages.put(WorkerResult(0, 0, "error", _one_line(exc), warnings))


class _Round:
    """The worker processes of one round and their message queue; stops them on ``close``."""

    def __init__(self, ctx: multiprocessing.context.SpawnContext, jobs: list[WorkerJob]) -> None:
        self.go = ctx.Event()
        self.cancel = ctx.Event()
        self.messages: multiprocessing.queues.Queue[WorkerResult | None] = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_worker,
                args=(job, self.go, self.cancel, self.messages),
                name=f"redlease-demo-{i}",
                daemon=True,
            )
            for i, job in enumerate(jobs)
        ]
        self.results: list[WorkerResult] = []

    def start(self) -> None:
        for p in self.procs:
            p.start()

    def wait_ready(self) -> bool:
        """Wait until every worker is connected; ``False`` when one reported a failure."""
        ready = 0
        while ready < len(self.procs):
            message = self._next(STARTUP_TIMEOUT, "start")
            if message is None:
                ready += 1
            else:
                self.results.append(message)
                return False
        return True

    def wait_done(self) -> list[WorkerResult]:
        """Every worker's result, or a ``DemoError`` when they do not all report in time."""
        while len(self.results) < len(self.procs):
            message = self._next(ROUND_TIME_LIMIT + 10, "finish")
            if message is not None:
                self.results.append(message)
        return self.results

    def _next(self, timeout: float, what: str) -> WorkerResult | None:
        """The next message; a ``DemoError`` when none comes in ``timeout`` or all workers died
        (a worker that dies without reporting, e.g. killed, would otherwise stall the demo)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.messages.get(timeout=0.2)
            except queue.Empty:
                pass
            if time.monotonic() >= deadline:
                raise DemoError(f"the workers did not {what} within {timeout:.0f} s")
            if not any(p.is_alive() for p in self.procs):
                try:  # a last message may still be in the pipe
                    return self.messages.get(timeout=1.0)
                except queue.Empty:
                    codes = sorted({str(p.exitcode) for p in self.procs})
                    raise DemoError(
                        f"the worker processes exited early (exit codes {', '.join(codes)})"
                    ) from None

    def close(self) -> None:
        """Cancel, then join the workers this round started, terminating any that hang."""
        self.cancel.set()
        self.go.set()
        for p in self.procs:
            if p.pid is None:
                continue
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        self.messages.close()
        self.messages.join_thread()


def _run_round(
    ctx: multiprocessing.context.SpawnContext,
    admin: redis.Redis,
    url: str,
    keys: DemoKeys,
    *,
    locked: bool,
    workers: int,
    stock: int,
) -> RoundResult:
    """Reset the keys, start ``workers`` processes together, time them to the end."""
    admin.delete(*keys.all())
    admin.set(keys.stock, stock)
    admin.set(keys.sold, 0)
    job = WorkerJob(url, keys, locked, max_iterations=10 * stock + 100, time_limit=ROUND_TIME_LIMIT)
    round_ = _Round(ctx, [job] * workers)
    try:
        round_.start()
        started = 0.0
        if round_.wait_ready():
            started = time.perf_counter()
            round_.go.set()
        else:
            round_.cancel.set()
            round_.go.set()
        with _progress(admin, keys, stock, "locked" if locked else "unlocked"):
            outcome = round_.wait_done()
        seconds = time.perf_counter() - started
    finally:
        round_.close()
    warnings = tuple(dict.fromkeys(w for r in outcome for w in r.warnings))
    errors = [r.error for r in outcome if r.error]
    if errors:
        also = f" [worker log: {warnings[0]}]" if warnings else ""
        raise DemoError(f"a worker failed: {errors[0]}{also}")
    return RoundResult(
        locked=locked,
        workers=workers,
        expected=stock,
        sold=int(cast("bytes | None", admin.get(keys.sold)) or 0),
        stock=int(cast("bytes | None", admin.get(keys.stock)) or 0),
        seconds=seconds,
        limits_hit=tuple(sorted({r.stopped_by for r in outcome} - {"sold out"})),
        warnings=warnings,
    )


@contextlib.contextmanager
def _progress(admin: redis.Redis, keys: DemoKeys, stock: int, label: str) -> Iterator[None]:
    """A progress bar of items sold while a round runs, when stderr is a terminal and tqdm
    (``pip install 'redlease[demo]'``) is installed; nothing otherwise."""
    try:
        tqdm = importlib.import_module("tqdm").tqdm  # optional: the demo extra
    except ImportError:
        tqdm = None
    if tqdm is None or not sys.stderr.isatty():
        yield
        return
    done = threading.Event()
    bar = tqdm(total=stock, desc=f"  {label}", unit="sale", leave=False, file=sys.stderr)

    def poll() -> None:
        while not done.wait(0.05):
            with contextlib.suppress(redis.RedisError, ValueError):
                bar.n = int(cast("bytes | None", admin.get(keys.sold)) or 0)
                bar.refresh()

    poller = threading.Thread(target=poll, name="redlease-demo-progress", daemon=True)
    poller.start()
    try:
        yield
    finally:
        done.set()
        poller.join(5)
        bar.close()


def _server_description(admin: redis.Redis) -> str:
    """``redis 7.2.4`` or ``valkey 8.1.8``, from INFO; ``unknown server`` when INFO is refused."""
    try:
        info = cast("dict[str, object]", admin.info("server"))
    except redis.exceptions.ResponseError:
        return "unknown server"
    flavor = str(info.get("server_name") or "redis")
    version = info.get(f"{flavor}_version") or info.get("redis_version") or "?"
    return f"{flavor} {version}"


def _check_server(admin: redis.Redis, address: str) -> str:
    """Ping the server once so a wrong URL fails with one clear line before any worker starts."""
    try:
        admin.ping()
        return _server_description(admin)
    except redis.exceptions.AuthenticationError as exc:
        raise DemoError(
            f"authentication failed at {address} (check the password in --url): {exc}"
        ) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise DemoError(f"cannot reach a Redis server at {address}: {exc}") from None
    except redis.exceptions.RedisError as exc:
        raise DemoError(f"the server at {address} refused the demo: {exc}") from None


def _describe_unlocked(r: RoundResult) -> str:
    if r.sold > r.expected:
        return (
            f"oversold: {r.sold} sales of {r.expected} items, {r.sold - r.expected} that never"
            " existed (lost updates: workers overwrote each other's SET)"
        )
    if r.consistent:
        return "came out right this time: the race did not show (it is a race)"
    return f"inconsistent: {r.sold} sold + {r.stock} left != {r.expected}"


def _describe_locked(r: RoundResult) -> str:
    if r.exact:
        return f"exact: {r.sold} sold, stock 0, every item sold once"
    if r.consistent:
        return f"consistent but unfinished: {r.sold} sold, {r.stock} left"
    return f"WRONG: {r.sold} sold + {r.stock} left != {r.expected}"


def _verdict(unlocked: RoundResult, locked: RoundResult) -> str:
    if not locked.consistent:
        return f"verdict: FAILED - the locked round sold {locked.sold} of {locked.expected} items"
    if not locked.exact:
        return (
            "verdict: the locked round stayed consistent but stopped at its limit"
            f" ({', '.join(locked.limits_hit)}); try a smaller --stock"
        )
    times = f"{locked.seconds:.2f} s with the lock, {unlocked.seconds:.2f} s without"
    if unlocked.sold > unlocked.expected:
        return (
            f"verdict: without a lock {unlocked.workers} workers sold {unlocked.sold} of"
            f" {unlocked.expected} items; with redlease exactly {locked.sold} ({times})"
        )
    hint = "" if unlocked.workers > 1 else " (one worker cannot race; try --workers 4)"
    return (
        f"verdict: the race did not show this time{hint}; with redlease exactly"
        f" {locked.sold} of {locked.expected} items were sold ({times})"
    )


def run_demo(
    url: str,
    address: str,
    where: str,
    *,
    workers: int,
    stock: int,
    out: TextIO,
    warn: Callable[[str], None],
) -> int:
    """Run both rounds against the server at ``url`` and print the report to ``out``.

    ``address`` (host:port, never a password) and ``where`` (how the server was chosen) are only
    printed; ``warn`` gets what the workers logged (one line each). Returns 0 when the locked
    round is correct, 1 when it is not.
    """
    admin = _redis(url)
    keys = DemoKeys.new()
    try:
        server = _check_server(admin, address)

        def say(text: str = "") -> None:
            print(text, file=out, flush=True)

        say(
            f"redlease demo: {workers} worker process{'es' if workers > 1 else ''}"
            f" sell {stock} items from one Redis stock key"
        )
        say(f"  each sale: GET stock; if > 0: pause {PAUSE * 1000:g} ms, SET stock-1, INCR sold")
        say(f"server: {address} ({server}, {where})")
        ctx = multiprocessing.get_context("spawn")  # fresh processes: no inherited sockets
        say()
        say("round 1: no lock")
        unlocked = _run_round(ctx, admin, url, keys, locked=False, workers=workers, stock=stock)
        say(f"  {unlocked.line()}")
        say(f"  -> {_describe_unlocked(unlocked)}")
        say("round 2: redlease lock around each sale")
        locked = _run_round(ctx, admin, url, keys, locked=True, workers=workers, stock=stock)
        say(f"  {locked.line()}")
        say(f"  -> {_describe_locked(locked)}")
        for line in dict.fromkeys(unlocked.warnings + locked.warnings):
            warn(f"worker: {line}")
        for r in (unlocked, locked):
            if r.limits_hit:
                say(f"  note: {r.label} round stopped at its {' and '.join(r.limits_hit)}")
        say()
        say(_verdict(unlocked, locked))
        return 0 if locked.consistent else 1
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise DemoError(f"lost the Redis server at {address}: {exc}") from None
    finally:
        with contextlib.suppress(redis.exceptions.RedisError):  # server gone: nothing to clean
            admin.delete(*keys.all())
        admin.close()
