"""Paired primitives, thread side: the twin of ``_asyncio/compat.py`` (same names, same
signatures; see there). A generated shell file in ``_sync/`` imports these."""

from __future__ import annotations

import functools
import inspect
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeAlias, TypeVar

from .._redis.connections import call_tokens
from .._shared import fork
from .._shared.state import ThreadOwners
from ..errors import ArgumentTypeError, InvalidArgumentError, RedleaseError

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

ASYNCIO = False
"""Which runtime this is (``_shared.exclusive.bound`` takes plain functions only on threads)."""

Event = threading.Event
"""A flag to set and wait on (``wait_event``)."""

Mutex = threading.Lock
"""Mutual exclusion among the client's callers (``with``)."""

Task = threading.Thread
"""What runs one caller: a thread here, a task there."""


FAILED: tuple[type[BaseException], ...] = (RedleaseError,)
"""What a best-effort give-back suppresses."""

FAILED_OR_CANCELLED: tuple[type[BaseException], ...] = (RedleaseError,)
"""The same on threads: a thread's call is not cancelled."""

Job: TypeAlias = Callable[P, R]
"""A function ``client.exclusive`` decorates: a plain function on threads."""

_owners = ThreadOwners()


def wait_event(event: threading.Event, timeout: float) -> bool:
    """Block until ``event`` is set or ``timeout`` passes; whether it was set."""
    return event.wait(timeout)


def owner_number() -> int:
    """The calling thread's owner number (never reused)."""
    return _owners.current()


def spawn(run: Callable[[], None], name: str) -> None:
    """Run ``run()`` in the background, in a daemon thread of its own."""
    threading.Thread(target=run, name=name, daemon=True).start()


def gather(*awaitables: T) -> list[T]:
    """The results, in order (named as on asyncio: each call here already ran, one after
    the other)."""
    return list(awaitables)


class Slots:
    """A thread client's call slots as tokens (``_connections.call_tokens``)."""

    __slots__ = ("_tokens",)

    def __init__(self, tokens: queue.SimpleQueue[None]) -> None:
        self._tokens = tokens

    def acquire(self) -> bool:
        self._tokens.get()
        return True

    def release(self) -> None:
        self._tokens.put(None)


def call_slots(client: Any) -> Slots | None:
    """The script calls a client runs at once (``_connections.call_slots``); ``None`` where
    the pool sets no useful bound."""
    tokens = call_tokens(client)
    return None if tokens is None else Slots(tokens)


def in_child(callback: Callable[[], Any]) -> None:
    """Have ``callback()`` (a bound method: fresh mutexes, no threads of the parent's) run in
    a forked child, before anything else (``fork.in_child``)."""
    fork.in_child(callback)


def close_unused(clients: Iterable[Any]) -> None:
    """Close redis-py clients made for a client whose construction failed."""
    for made in clients:
        made.close()


def not_a_client(given: Any) -> ArgumentTypeError:
    """The error of a ``Client`` given something other than a redis-py client."""
    return ArgumentTypeError(
        f"Client needs a redis.Redis or RedisCluster, got {type(given).__name__}"
        " (use AsyncClient for redis.asyncio)"
    )


def not_a_master(given: Any) -> ArgumentTypeError:
    """The error of a ``RedlockClient`` given something other than redis-py clients."""
    return ArgumentTypeError(
        f"RedlockClient needs redis.Redis clients, got {type(given).__name__}"
        " (use AsyncRedlockClient for redis.asyncio)"
    )


class Operations:
    """The operations of a client under way, which ``close()`` stops and waits for. Count
    them with ``started()`` and ``ended()`` inside ``with ops.mutex:``, ``wait_idle`` in
    ``close()``."""

    __slots__ = ("_active", "_idle", "mutex")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self.mutex)  # notified when the last one ends

    def started(self) -> None:
        self._active += 1

    def ended(self, closed: bool) -> None:
        self._active -= 1
        if not self._active and closed:  # close() waits for it
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Whether every operation ended within ``timeout`` seconds."""
        with self.mutex:
            return self._idle.wait_for(lambda: self._active == 0, timeout)


class JobDecorator:
    """A scheduled lock as a decorator (``ScheduledLock.__call__``), on threads: a job is a
    plain function (a coroutine function is refused)."""

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R | None]:
        """Decorate a job: each call runs it if the slot is free and returns its result,
        else returns ``None`` at once."""
        if not callable(fn):
            raise InvalidArgumentError(f"scheduled_lock decorates a function, got {fn!r}")
        if inspect.iscoroutinefunction(fn):
            raise InvalidArgumentError(
                f"{fn.__qualname__} is a coroutine function: use AsyncClient.scheduled_lock"
            )
        lock: Any = self  # a ScheduledLock
        token = lock._wants_token(fn)
        job: Callable[..., R] = fn

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> R | None:
            with lock._slot() as run:
                if not run:
                    return None
                if token:
                    lock._give_token(run, kwargs, fn)
                return job(*args, **kwargs)

        return wrapper
