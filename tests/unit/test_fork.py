"""The one fork mechanism (``_shared/fork.py``), in a real forked child: ``in_child``
callbacks run there before anything else (functions, then live objects' methods), and a
``PerProcess`` value is made anew there. The child reports over a pipe; the parent waits a
bounded time and reaps it by its PID."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from redlease._shared import fork

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHILD_TIMEOUT = 10.0


def _in_child(report: Callable[[], Any]) -> Any:
    """``report()`` run in a forked child, its value sent back as JSON over a pipe; the child
    is killed by its PID if it has not answered within ``CHILD_TIMEOUT``."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(report()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                break
            time.sleep(0.02)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not answer within {CHILD_TIMEOUT} s")
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        return json.loads(b"".join(chunks))
    finally:
        os.close(read)


@pytest.fixture(autouse=True)
def _own_callbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module's callbacks only, and only for its tests' children (the library's own
    still run in every other child: they are kept aside, not dropped)."""
    monkeypatch.setattr(fork, "_functions", [])
    monkeypatch.setattr(fork, "_methods", weakref.WeakKeyDictionary())


class _Stateful:
    """A stateful object as CONTRIBUTING tells it to be: a mutex made anew in a child."""

    made = 0

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.mutex = threading.Lock()
        fork.in_child(self._fresh_after_fork)

    def _fresh_after_fork(self) -> None:
        self.calls.append("object")
        self.mutex = threading.Lock()


def test_a_child_gets_fresh_mutexes_even_when_a_parent_thread_held_one() -> None:
    calls: list[str] = []
    fork.in_child(lambda: calls.append("function"))
    obj = _Stateful(calls)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with obj.mutex:
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    try:

        def report() -> Any:
            got = obj.mutex.acquire(timeout=2)  # the parent's would never be released here
            return {"got": got, "calls": calls}

        assert _in_child(report) == {"got": True, "calls": ["function", "object"]}
    finally:
        done.set()
        thread.join(10)
    assert calls == []  # nothing runs in the parent


def test_an_object_gone_is_not_called() -> None:
    calls: list[str] = []
    obj = _Stateful(calls)
    del obj
    gc.collect()
    assert _in_child(lambda: calls) == []


def test_a_failing_callback_stops_no_other() -> None:
    calls: list[str] = []

    def fails() -> None:
        raise RuntimeError("boom")

    fork.in_child(fails)
    obj = _Stateful(calls)
    assert _in_child(lambda: calls) == ["object"]
    del obj


def test_a_per_process_value_is_made_anew_in_a_child_once() -> None:
    made: list[int] = []

    def make() -> list[int]:
        made.append(os.getpid())
        return [os.getpid()]

    value = fork.PerProcess(make)
    parent = value.get()
    assert value.get() is parent and made == [os.getpid()]

    def report() -> Any:
        first = value.get()
        return {"fresh": first is not parent, "same": value.get() is first, "made": len(made)}

    assert _in_child(report) == {"fresh": True, "same": True, "made": 2}
    assert value.get() is parent  # the parent keeps its own


def test_a_grandchild_makes_its_own_too() -> None:
    value = fork.PerProcess(os.getpid)

    def report() -> Any:
        child = value.get()
        return [child, _in_child(value.get), os.getpid()]

    child, grandchild, child_pid = _in_child(report)
    assert child == child_pid and grandchild not in (child, os.getpid())
    assert value.get() == os.getpid()
