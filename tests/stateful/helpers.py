"""Building blocks of the stateful tests: owners (a client each, over a ``TcpProxy`` of its own
to one private server), sync or asyncio, and the faults a rule may inject on an owner's link.

A state machine drives owners from the test thread: ``owner.run(lambda: sem.acquire())`` works
on both sides (an asyncio owner's coroutine runs on a loop in a thread of its own, so that its
watchdog and subscriber tasks keep running between steps); ``owner.start(...)`` runs a call in
the background and returns a ``concurrent.futures.Future``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib.util
import inspect
import itertools
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import redis
from hypothesis import settings as Settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

import redlease
from redlease._core import latch as latch_core
from redlease._core import lease_semaphore, scripts, waiting
from redlease._core import semaphore as semaphore_core
from redlease._shared import state as _owners
from redlease.testing import RedisServer, ServerBinary, TcpProxy

CALL_TIMEOUT = 30.0
"""Every call of an owner returns within this (else the test fails: a hung call)."""

ALL_SCRIPTS = (
    *scripts.ALL,
    *semaphore_core.SCRIPTS,
    *lease_semaphore.SCRIPTS,
    waiting.SEMAPHORE_LEAVE,
    *latch_core.SCRIPTS,
)


def sha_of(script: scripts.Script) -> bytes:
    """What ``TcpProxy.drop_next_reply`` matches to swallow the replies of ``script``."""
    return script.sha.encode()


def unique_name(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


_spare_ports: list[int] = []
"""Ports of closed proxies, used again: a failing machine is run hundreds of times while
Hypothesis shrinks it, and ``free_port`` never hands out a port twice in a process."""


def _proxy(server: RedisServer) -> TcpProxy:
    while _spare_ports:
        try:
            return TcpProxy(("127.0.0.1", server.port), port=_spare_ports.pop()).start()
        except OSError:
            continue  # taken meanwhile
    return TcpProxy(("127.0.0.1", server.port)).start()


class LoopThread:
    """An event loop running in a thread of its own, for asyncio owners."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class Owner:
    """One client of a primitive, connected through its own proxy (faults hit it alone)."""

    def __init__(
        self, server: RedisServer, *, is_async: bool, loop: LoopThread | None, **client_kwargs: Any
    ) -> None:
        self.is_async = is_async
        self._loop = loop
        self.proxy = _proxy(server)
        factory = redlease.AsyncClient if is_async else redlease.Client
        self.client: Any = factory.from_url(self.proxy.url, **client_kwargs)

    def start(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``call()`` in the background: a task on the loop, or a thread."""
        if self.is_async:
            assert self._loop is not None

            async def run() -> Any:
                return await call()

            return self._loop.submit(run())
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def work() -> None:
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

        threading.Thread(target=work, daemon=True).start()
        return future

    def run(self, call: Callable[[], Any], timeout: float = CALL_TIMEOUT) -> Any:
        """Run ``call()`` now and return its result (or raise its error)."""
        if not self.is_async:
            return call()
        return self.start(call).result(timeout)

    # --- faults on this owner's link --------------------------------------------------------

    def lose_replies(self, script: scripts.Script, times: int = 2) -> None:
        """Swallow the next ``times`` replies to ``script``: it ran, the client never hears (a
        call is sent at most twice, so 2 makes it raise, 1 makes its retry answer)."""
        for _ in range(times):
            self.proxy.drop_next_reply(sha_of(script))

    def frozen(self, call: Callable[[], Any], seconds: float) -> Any:
        """``call()`` sent while the link is frozen, delivered ``seconds`` late, both ways."""
        self.proxy.freeze()
        try:
            future = self.start(call)
            time.sleep(seconds)  # the fault itself: a bounded delay, not a wait for timing
        finally:
            self.proxy.thaw()
        return future.result(CALL_TIMEOUT)

    def freeze_for(self, seconds: float) -> None:
        """Hold back everything on the link (watchdog, subscriber) for ``seconds``."""
        self.proxy.freeze()
        try:
            time.sleep(seconds)  # the fault itself: a bounded delay
        finally:
            self.proxy.thaw()

    def cut(self, probe: Callable[[], Any]) -> None:
        """Close every connection of this owner (commands, subscriber, watchdog) at once,
        then call ``probe()`` (a read) until it answers.

        The client keeps several pooled connections and a call is sent at most twice: right
        after a cut, a call may meet two dead pooled connections and raise
        ``ServerUnavailableError`` although the server is fine. The probe uses them up, so
        that the rules after it see the link as a fresh client would."""
        self.proxy.cut()
        for _ in range(20):
            try:
                self.run(probe)
                return
            except redlease.ServerUnavailableError:
                continue
        raise AssertionError("the client never reconnected after a cut")

    def waiting(self, channel: str) -> bool:
        """Whether a call of this client waits for a message on ``channel`` now."""
        sub = self.client._subscriber
        return sub is not None and sub.waiting(channel) > 0

    def pending_undos(self) -> int:
        """Abandoned requests of this client whose undo is still to be sent."""
        return int(self.client._permit_keeper.get().table.undos_pending)

    def close(self) -> None:
        try:
            self.run(self.client.close, timeout=15)
        finally:
            self.proxy.close()
            _spare_ports.append(self.proxy.port)


class World:
    """A private server and ``n`` owners, each over its own proxy; ``raw`` reads the server
    directly (never through a proxy) for the invariants."""

    def __init__(self, server: RedisServer, n: int, *, is_async: bool, **client_kwargs: Any):
        self.server = server
        self.raw = redis.Redis.from_url(server.url)
        for script in ALL_SCRIPTS:  # a dropped reply is then always the script's own
            self.raw.script_load(script.source)
        self.loop = LoopThread() if is_async else None
        self.owners: list[Owner] = []
        try:
            for _ in range(n):
                self.owners.append(
                    Owner(server, is_async=is_async, loop=self.loop, **client_kwargs)
                )
        except BaseException:
            self.close()
            raise

    def server_ms(self) -> int:
        seconds, micros = self.raw.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def settle(self, timeout: float = 15.0) -> None:
        """Wait until every owner's abandoned requests are resolved (undos sent)."""
        wait_until(lambda: not any(o.pending_undos() for o in self.owners), timeout)

    def close(self) -> None:
        for owner in self.owners:
            owner.close()
        if self.loop is not None:
            self.loop.close()
        self.raw.close()


def wait_until(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Poll ``condition()`` until true; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)


def results(futures: Iterable[concurrent.futures.Future[Any]], timeout: float) -> list[Any]:
    """The results of background calls, all within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    return [f.result(max(0.0, deadline - time.monotonic())) for f in futures]


# --- client processes ---------------------------------------------------------------------


class Process:
    """One client process, as far as the ids a client mints go: the owner ids and the request
    ids (an acquire's wait id, a release's id) that ``redlease._shared.state``
    mints, by its own code run on state of its own. The module is loaded again under another
    name, so its
    module-level code sets that state up exactly as a new process's import does (a per-process
    counter starts at 1 again; a per-process random part is drawn again). Owners made in two
    ``Process``es mint ids as owners in two worker processes would; a test needs no real
    second process to see what ids that collide, or do not, do to receipts and retries.

    ``minting_per_process()`` routes the library's minting to the ``Process`` of the thread
    or task that mints (``Process.enter()``, done by an ``Actor`` made with it); elsewhere it
    mints as before."""

    _names = itertools.count(1)

    def __init__(self) -> None:
        name = f"redlease._shared._state_of_process_{next(self._names)}"
        spec = importlib.util.spec_from_file_location(name, _owners.__file__)
        assert spec is not None and spec.loader is not None
        self.ids: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.ids)

    def enter(self) -> None:
        """Ids minted from now on in this thread (or this task) come from this process."""
        _current_process.set(self)


_current_process: contextvars.ContextVar[Process | None] = contextvars.ContextVar(
    "stateful_process", default=None
)
_MINTED = ("next_request_id", "next_owner_id")
"""The functions of ``redlease._shared.state`` that mint ids (those the module has)."""


@contextlib.contextmanager
def minting_per_process() -> Iterator[None]:
    """While in effect, every module of the library that mints ids with ``_owners``'s
    functions mints through the ``Process`` entered in the minting thread or task (as before
    when none was)."""
    patched: list[tuple[ModuleType, str, Any]] = []
    for name in _MINTED:
        original = getattr(_owners, name, None)
        if original is None:
            continue

        def route(*args: Any, _name: str = name, _original: Any = original) -> Any:
            process = _current_process.get()
            if process is None:
                return _original(*args)
            return getattr(process.ids, _name)(*args)

        for module in list(sys.modules.values()):
            mod_name = getattr(module, "__name__", "") or ""
            if mod_name == "redlease" or mod_name.startswith("redlease."):
                if mod_name.startswith("redlease._shared._state_of_process_"):
                    continue
                if getattr(module, name, None) is original:
                    patched.append((module, name, original))
                    setattr(module, name, route)
    try:
        yield
    finally:
        for module, name, original in reversed(patched):
            setattr(module, name, original)


# --- a master with a replica, for failovers -----------------------------------------------


class Replicated:
    """A master and a replica fed through a ``TcpProxy`` (the replication link), for rules
    that lose data: ``stall()`` freezes the link (the replica falls behind, its copy of every
    key still alive), ``failover()`` kills the master and promotes the replica, behind or
    not (``REPLICAOF NO ONE``), then gives it a fresh replica of its own; ``restart_empty()``
    kills the master and starts it again with no data. ``master`` is the server clients must
    use now."""

    def __init__(self, binary: ServerBinary) -> None:
        self.binary = binary
        self.master = RedisServer(binary).start()
        self.link: TcpProxy | None = None
        self.replica: RedisServer | None = None
        self.failovers = 0
        try:
            self._new_replica()
        except BaseException:
            self.close()
            raise

    def _new_replica(self) -> None:
        self.link = TcpProxy(("127.0.0.1", self.master.port)).start()
        self.replica = RedisServer(self.binary, replica_of=self.link).start()
        self.replica.wait_replica_synced(timeout=30)

    @property
    def stalled(self) -> bool:
        return self.link is not None and self.link.frozen

    def stall(self) -> None:
        assert self.link is not None
        self.link.freeze()

    def heal(self) -> None:
        """Replication flows again, and the replica has everything before this returns."""
        assert self.link is not None and self.replica is not None
        self.link.thaw()
        self.replica.wait_replica_synced(timeout=30)

    def failover(self, behind: Callable[[RedisServer], None] | None = None) -> RedisServer:
        """The master dies; its replica (as far behind as it is) becomes the master.
        ``behind(replica)``, once it is promoted and before any client can reach it, may set
        some of its keys back to what an earlier moment had: a replica that stopped
        replicating then."""
        assert self.link is not None and self.replica is not None
        old, self.master = self.master, self.replica
        old.kill()
        self.master.promote()
        if behind is not None:
            behind(self.master)
        self.link.close()
        old.close()
        self.failovers += 1
        self._new_replica()
        return self.master

    def restart_empty(self) -> RedisServer:
        """The master dies and starts again on its port with no data (nothing persisted);
        its replica syncs the empty data set once the link flows."""
        self.master.restart()
        return self.master

    def close(self) -> None:
        for thing in (self.link, self.replica, self.master):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()


class Actor:
    """Runs an owner's calls one at a time in one thread (sync) or one task on ``loop``
    (asyncio), so that all of them are made by the same owner of a lock (``Owner.start``
    makes a task per call: a new owner each time). With ``process``, the ids its calls mint
    are that process's (see ``Process``)."""

    def __init__(self, loop: LoopThread | None, process: Process | None = None) -> None:
        self._loop = loop
        self._process = process
        self._sync: queue.Queue[Any] = queue.Queue()
        if loop is None:
            self._thread = threading.Thread(target=self._serve_sync, daemon=True)
            self._thread.start()
        else:
            self._async: asyncio.Queue[Any] = loop.submit(self._new_queue()).result(10)
            self._task = loop.submit(self._serve_async())

    @staticmethod
    async def _new_queue() -> asyncio.Queue[Any]:
        return asyncio.Queue()

    def _serve_sync(self) -> None:
        if self._process is not None:
            self._process.enter()
        while (item := self._sync.get()) is not None:
            call, future = item
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

    async def _serve_async(self) -> None:
        if self._process is not None:
            self._process.enter()
        while (item := await self._async.get()) is not None:
            call, future = item
            try:
                result = call()
                future.set_result(await result if inspect.isawaitable(result) else result)
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

    def _put(self, item: Any) -> None:
        if self._loop is None:
            self._sync.put(item)
        else:
            self._loop.loop.call_soon_threadsafe(self._async.put_nowait, item)

    def start(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._put((call, future))
        return future

    def run(self, call: Callable[[], Any]) -> Any:
        return self.start(call).result(CALL_TIMEOUT)

    def stop(self) -> None:
        self._put(None)
        if self._loop is None:
            self._thread.join(10)
        else:
            self._task.result(10)


def run_machine(factory: Callable[[], RuleBasedStateMachine], settings: Settings) -> None:
    """``run_state_machine_as_test`` of the machines ``factory`` makes (hypothesis calls its
    argument for each run; its annotation asks for a class)."""
    run_state_machine_as_test(factory, settings=settings)  # type: ignore[arg-type]  # a factory
