"""Helpers to drive the core's generator operations by hand."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from redlease._core.keys import LockKeys
from redlease._core.requests import Call, Operation, Request

KEYS = LockKeys.for_name("orders:42")
OWNER = "5f0c2a9e-client:7"


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Finished(Exception):
    """Raised by ``step`` when the operation returned instead of yielding."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


def step(op: Generator[Any, Any, Any], reply: Any = None, *, first: bool = False) -> Any:
    """Send ``reply`` (or start the operation, a lock's or a Redlock's) and return the next
    request it yields."""
    try:
        return next(op) if first else op.send(reply)
    except StopIteration as stop:
        raise Finished(stop.value) from None


def finish(op: Generator[Any, Any, Any], reply: Any) -> Any:
    """Send ``reply`` and return the operation's result; fail if it yields another request."""
    try:
        request = op.send(reply)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"operation yielded {request!r} instead of returning")


def first_call(op: Operation[Any]) -> Call:
    """Start the operation and return its first request, which the test expects to be a Call."""
    return as_call(next(op))


def as_call(request: Request) -> Call:
    """``request``, which the test expects to be a Call."""
    assert isinstance(request, Call), request
    return request
