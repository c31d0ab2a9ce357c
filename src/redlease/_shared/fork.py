"""The one fork mechanism: what a forked child makes anew, in two words.

A child forked from a process that uses redlease inherits its memory but only the thread that
forked: a lock another thread held stays held forever, and the parent's sockets, tasks and
holds are the parent's. So a child never touches them:

- ``in_child(callback)``, eager: ``callback()`` runs in the child, from this module's one
  ``os.register_at_fork`` hook, before the child runs anything else (no other thread exists
  yet): fresh mutexes, fresh id streams, tables emptied. A bound method is held weakly (its
  object may go); a function for good. The functions run first, then the methods, each in
  the order registered.
- ``PerProcess(make)``, lazy: ``get()`` is the value ``make()`` made in this process; a forked
  child's first ``get()`` makes its own (connections kept for reuse, a table of tasks). Never
  a value of a parent process, even to threads racing to the first ``get()`` (each may then
  make one: use it for what may be made twice, never for a mutex).

Nothing here takes a lock: the hook must not wait for one a parent's thread held.
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_generation = 0
"""How many forks this process is away from the one that first imported redlease."""

_functions: list[Callable[[], Any]] = []
"""What ``in_child`` registered that is not a bound method: run first, in their order."""

_methods: weakref.WeakKeyDictionary[Any, list[Callable[[Any], Any]]] = weakref.WeakKeyDictionary()
"""Each object's methods ``in_child`` registered (none once the object is gone)."""


def in_child(callback: Callable[[], Any]) -> Callable[[], Any]:
    """Have ``callback()`` run in every child forked from now on, before anything else runs
    there (for a mutex a parent's thread may have held, an id stream, a table of the
    parent's). A bound method is held weakly. Returns ``callback`` (usable as a decorator)."""
    owner = getattr(callback, "__self__", None)
    function = getattr(callback, "__func__", None)
    if owner is not None and function is not None:
        _methods.setdefault(owner, []).append(function)
    else:
        _functions.append(callback)
    return callback


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1
    callbacks = [*_functions]
    callbacks += [functools.partial(f, obj) for obj, fs in list(_methods.items()) for f in fs]
    for callback in callbacks:
        try:
            callback()
        except Exception:  # one failing must not leave the others' mutexes held
            logging.getLogger("redlease").exception("after fork: %r failed", callback)


os.register_at_fork(after_in_child=_after_fork_in_child)


class PerProcess(Generic[T]):
    """A value of this process: made by ``make()`` now, and again by a forked child at its
    first ``get()`` there (the parent's is never handed out in a child)."""

    __slots__ = ("_made", "_make")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made = (_generation, make())  # one tuple: read whole, never half updated

    def get(self) -> T:
        generation, value = self._made
        if generation != _generation:
            value = self._make()
            self._made = (_generation, value)
        return value
