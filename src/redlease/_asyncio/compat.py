"""Paired primitives, asyncio side: what a generated shell file needs that differs by runtime.

``_threads/compat.py`` has the same names for threads; ``tools/async_to_sync.py`` turns
``from .._asyncio.compat import X`` into ``from .._threads.compat import X``, so a shell file in
``_async/`` is written once, with no sync code in comments (psycopg's ``_acompat.py``,
httpcore's ``_synchronization.py``). ``tests/unit/test_engine_parity.py`` keeps the two alike.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, ParamSpec, TypeAlias, TypeVar, overload

from .._redis.connections import call_slots as _call_slots
from .._shared.state import TaskOwners
from ..errors import ArgumentTypeError, EventLoopError, InvalidArgumentError
from .cancel import within

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

ASYNCIO = True
"""Which runtime this is (``_shared.exclusive.bound`` takes coroutine functions only on asyncio)."""

Event = asyncio.Event
"""A flag to set and wait on (``wait_event``)."""

Mutex = asyncio.Lock
"""Mutual exclusion among the client's callers (``async with``)."""

Task = asyncio.Task
"""What runs one caller: a task here, a thread there."""

Cancelled = asyncio.CancelledError
"""What a cancelled caller meets (never raised on threads, where a call is not cancelled)."""

FAILED: tuple[type[BaseException], ...] = (Exception,)
"""What a best-effort give-back suppresses."""

FAILED_OR_CANCELLED: tuple[type[BaseException], ...] = (Exception, asyncio.CancelledError)
"""What a best-effort give-back suppresses when it must not be cut short either."""

Job: TypeAlias = Callable[P, Awaitable[R]]
"""A function ``client.exclusive`` decorates: a coroutine function on asyncio."""

_owners = TaskOwners()
_spawned: set[asyncio.Task[None]] = set()  # a reference to each until it is done


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds; a cancelled waiter stops
    waiting, also when it is cancelled as the event is set (``cancel.within``)."""
    try:
        await within(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True


_callers: weakref.WeakKeyDictionary[Any, asyncio.Task[Any]] = weakref.WeakKeyDictionary()
"""The task that called each ``owned_by_caller`` method, by the coroutine the call made."""

_ending: weakref.WeakKeyDictionary[asyncio.Task[Any], set[Callable[[int], None]]] = (
    weakref.WeakKeyDictionary()
)
"""What to tell when each owning task ends (``on_owner_end``)."""

CoroutineFunction = TypeVar("CoroutineFunction", bound=Callable[..., Coroutine[Any, Any, Any]])


def owned_by_caller(fn: CoroutineFunction) -> CoroutineFunction:
    """Decorate a method whose holds belong to the task that *called* it: also when its
    coroutine runs in a task of its own, made only to run it (``asyncio.wait_for`` on Python
    3.10 and 3.11, ``asyncio.create_task``, ``asyncio.gather``), the owner is the task where
    ``lock.acquire()`` was written, as with ``asyncio.Lock``, whose caller holds."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        coroutine = fn(*args, **kwargs)
        caller = _owning_task()
        if caller is not None:
            _callers[coroutine] = caller
        return coroutine

    call._is_coroutine = getattr(asyncio.coroutines, "_is_coroutine", None)  # type: ignore[attr-defined]
    if sys.version_info >= (3, 12):
        inspect.markcoroutinefunction(call)
    return call  # type: ignore[return-value]


def _owning_task() -> asyncio.Task[Any] | None:
    """The calling task, or, in a task made only to run an ``owned_by_caller`` call, the task
    that made the call (outside a running loop: ``None``)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: the owner is learnt where the call runs
        return None
    if task is None:
        return None
    caller = _callers.get(task.get_coro())
    return task if caller is None else caller


def owner_number() -> int:
    """The calling task's owner number (never reused): see ``owned_by_caller``."""
    return _owners.current(_owning_task())


def on_owner_end(told: Callable[[int], None]) -> None:
    """Call ``told(owner_number)`` when the calling owner's task ends (once per ``told`` and
    task; at once, from the loop, if it has ended already: a caller that did not wait for
    its call)."""
    task = _owning_task()
    if task is None:
        return
    tell = _ending.get(task)
    if tell is None:
        tell = _ending[task] = set()
    if told in tell:
        return
    tell.add(told)
    number = _owners.current(task)
    task.add_done_callback(lambda _: told(number))


def current_task() -> asyncio.Task[Any] | None:
    """The calling task."""
    return asyncio.current_task()


def cancel(task: asyncio.Task[Any] | None, message: str) -> bool:
    """Cancel ``task`` (if any and not done); whether it was."""
    if task is None or task.done():
        return False
    return task.cancel(message)


def uncancel(task: asyncio.Task[Any] | None) -> int:
    """Take back one cancellation of ``task``; the cancellations still pending (always 0 on
    Python 3.10, which does not count them)."""
    if task is None or sys.version_info < (3, 11):
        return 0
    return task.uncancel()


def spawn(run: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
    """Run ``run()`` in the background, in a task of its own (kept referenced until done)."""
    task = asyncio.get_running_loop().create_task(run(), name=name)
    _spawned.add(task)
    task.add_done_callback(_spawned.discard)


async def gather(*awaitables: Awaitable[T]) -> list[T]:
    """Each awaitable's result, in order, run at once."""
    return list(await asyncio.gather(*awaitables))


Slots = asyncio.Semaphore
"""A client's call slots (``acquire``, ``release``)."""


def call_slots(client: Any) -> asyncio.Semaphore | None:
    """The script calls a client runs at once (``_connections.call_slots``)."""
    return asyncio.Semaphore(_call_slots(client))


def in_child(callback: Callable[[], Any]) -> None:
    """Nothing on asyncio: a child forked from a coroutine goes on in the same event loop,
    whose tasks may hold its mutexes and must release the same ones; what a child must not
    use is a ``fork.PerProcess``, made anew where it is used."""


async def ready(cluster: Any) -> None:
    """Let a ``RedisCluster`` read the cluster's layout (redis.asyncio does it at first use)."""
    await cluster.initialize()


def close_unused(clients: Iterable[Any]) -> None:
    """Nothing: a ``redis.asyncio.Redis`` made and never used holds no connection."""


def not_a_client(given: Any) -> ArgumentTypeError:
    """The error of an ``AsyncClient`` given something other than a redis.asyncio client."""
    return ArgumentTypeError(
        "AsyncClient needs a redis.asyncio.Redis or RedisCluster, got "
        f"{type(given).__name__} (use Client for redis.Redis)"
    )


def not_a_master(given: Any) -> ArgumentTypeError:
    """The error of an ``AsyncRedlockClient`` given something other than redis.asyncio
    clients."""
    return ArgumentTypeError(
        "AsyncRedlockClient needs redis.asyncio.Redis clients, got "
        f"{type(given).__name__} (use RedlockClient for redis.Redis)"
    )


class LoopBinding:
    """The event loop an asyncio client (``AsyncClient``, ``AsyncRedlockClient``) was first
    used on: its connections, watchdog and subscriber belong to it. ``check()`` binds it at
    the first use and, on any other loop, raises ``EventLoopError`` (not redis-py's "attached
    to a different loop" or "Event loop is closed" from deep inside a connection). Every call
    that reaches the server checks it first."""

    __slots__ = ("_loop", "_what")

    def __init__(self, what: str) -> None:
        self._what = what  # the client's class, for the message
        self._loop: weakref.ReferenceType[asyncio.AbstractEventLoop] | None = None

    def check(self, name: str | None) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = weakref.ref(loop)
            return
        first = self._loop()
        if first is loop:
            return
        state = "closed" if first is None or first.is_closed() else "still running"
        raise EventLoopError(
            f"this {self._what} was first used on another event loop (now {state}); a client "
            "belongs to the loop it is first used on (its connections, watchdog and "
            "subscriber): create one per event loop, inside it. In a FastAPI or Starlette "
            "app, create it in the lifespan (redlease.contrib.fastapi.lifespan puts one on "
            "app.state.redlease), not at module level: each TestClient runs a loop of its own",
            name=name,
        )


class Operations:
    """The operations of a client under way, which ``close()`` stops and waits for. Count
    them with ``started()`` and ``ended()`` inside ``with ops.mutex:`` (a thread lock, never
    held across an ``await``: the same code as on threads, at the cost of an uncontended
    lock), ``wait_idle`` in ``close()``."""

    __slots__ = ("_active", "_idle", "mutex")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self._active = 0
        self._idle = asyncio.Event()  # set while none is under way
        self._idle.set()

    def started(self) -> None:
        self._active += 1
        self._idle.clear()

    def ended(self, closed: bool) -> None:
        self._active -= 1
        if not self._active:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Whether every operation ended within ``timeout`` seconds."""
        return await wait_event(self._idle, timeout)


class JobDecorator:
    """A scheduled lock as a decorator (``AsyncScheduledLock.__call__``), on asyncio: a job is a
    coroutine function, or a plain function run in the loop."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | None]]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, Awaitable[R | None]]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Awaitable[Any]]:
        """Decorate a job (a coroutine function, or a plain function run in the loop): each
        call runs it if the slot is free and returns its result, else returns ``None`` at
        once."""
        if not callable(fn):
            raise InvalidArgumentError(f"scheduled_lock decorates a function, got {fn!r}")
        lock: Any = self  # an AsyncScheduledLock
        token = lock._wants_token(fn)
        job: Callable[..., Any] = fn
        coroutine = inspect.iscoroutinefunction(fn)

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            async with lock._slot() as run:
                if not run:
                    return None
                if token:
                    lock._give_token(run, kwargs, fn)
                result = job(*args, **kwargs)
                return await result if coroutine else result

        return wrapper
