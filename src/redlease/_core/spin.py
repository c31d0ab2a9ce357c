"""The spin lock's acquire: the reentrant lock's own keys and scripts, without pub/sub.

A spin lock is the reentrant lock (``lock.py``: the same hash, the same acquire and release
scripts, tokens and renewals; a spin lock, a lock and Redisson's RLock of one name exclude
each other) whose waiter never listens: it tries, and while the lock is held sleeps a growing
pause (``ExponentialBackoff``) and tries again, as Redisson's ``RSpinLock`` does, for servers
and proxies without pub/sub. It takes no place in the lock's line (each try is a single try),
so a release never hands it the lock and nothing is left behind when it gives up."""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable
from typing import Any

from .backoff import ExponentialBackoff
from .keys import LockKeys
from .lock import REDLEASE, Acquired, Layout
from .lock import acquire as lock_acquire
from .requests import Operation, Sleep, Subscribe


class Backoff:
    """A spin lock's way to wait (``lock.WaitStep``): no subscription and no place in line;
    after each try that did not get the lock, the next pause of ``backoff`` (never past the
    caller's deadline: the last try is made at it). It waits for the lock (rides out an
    outage) once a reply said the lock is held."""

    in_line = False

    def __init__(self, backoff: ExponentialBackoff, random: Callable[[], float]) -> None:
        self._pauses = backoff.pauses(random)
        self.listening = False

    def start(self) -> Operation[None]:
        return
        yield

    def ready(self) -> Operation[bool]:
        self.listening = True  # a reply said the lock is held: the caller waits for it
        return False
        yield

    def pause(self, hint: float, remaining: float) -> Operation[Any]:
        yield Sleep(min(remaining, next(self._pauses)))


def acquire(
    keys: LockKeys,
    owner: str,
    *,
    held: int,
    lease: float,
    blocking: bool,
    timeout: float | None,
    wait_id: str,
    backoff: ExponentialBackoff,
    token: int = 0,
    clock: Callable[[], float] = time.monotonic,
    random: Callable[[], float] = _random.random,
    on_gone: Callable[[], None] = lambda: None,
    layout: Layout = REDLEASE,
) -> Operation[Acquired | None]:
    """The lock's acquire (``lock.acquire``: its rules for grants that come too late, LOST
    replies, re-entries, outages and lost replies) with a spin lock's waiter: single tries
    (no place in line, no hand-over), ``backoff``'s pauses between them; ``None`` when not
    acquired."""

    def waiter(_: Subscribe) -> Backoff:
        return Backoff(backoff, random)

    return lock_acquire(
        keys,
        owner,
        held=held,
        lease=lease,
        blocking=blocking,
        timeout=timeout,
        wait_id=wait_id,
        token=token,
        clock=clock,
        on_gone=on_gone,
        layout=layout,
        wait=waiter,
    )
