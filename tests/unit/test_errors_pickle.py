"""Every public exception of redlease survives pickling with all it carries.

An error that crosses a process boundary (a Celery task's failure sent back to its caller, a
``ProcessPoolExecutor``, ``multiprocessing``) is pickled there and unpickled here: each class
must come back as itself, with its message, its ``args`` and every attribute (the lock's
``name`` and ``owner``, a ``QuorumError``'s per-master ``outcomes`` and ``errors``, ...). The
classes are discovered from ``redlease.errors.__all__`` and ``redlease.__all__``, so a class
added later is covered without touching this file (a keyword it needs that this file cannot
make a value for fails loudly below).

A serializer that keeps only ``args`` (Celery's default JSON result backend rebuilds an error as
``cls(*args)``) must get the class back too, with its message.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import multiprocessing
import pickle
import typing
from typing import Any

import pytest

import redlease
import redlease.errors
from redlease._core.redlock import NotAnswered


def public_exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in (redlease.errors, redlease):
        for name in module.__all__:
            value = getattr(module, name, None)
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and not issubclass(value, Warning)  # RedleaseWarning: a category, never raised
            ):
                found[value.__qualname__] = value
    return [found[name] for name in sorted(found)]


CLASSES = public_exception_classes()


class Unpicklable(Exception):
    """An error a master may have failed with that cannot be rebuilt from its args."""

    def __init__(self, code: int, *, why: str) -> None:
        super().__init__(f"{code}: {why}")
        self.code = code
        self.why = why


# a distinctive value for each keyword the classes take, by its name
SAMPLES: dict[str, Any] = {
    "name": "orders:42",
    "owner": "c0ffee:1:thread-7",
    "cause": "forced",
    "key_type": "list",
    "command": "evalsha",
    "address": "10.0.0.7:6379",
    "required": 2,
    "acked": 1,
    "reply": [b"OK", 3, None],
    "resource": "balance:7",
    "token": 1_700_000_000_000_001,
    "seen": 1_700_000_000_000_009,
    "quorum": 2,
    "outcomes": {"10.0.0.1:6379": "granted", "10.0.0.2:6379": "unavailable: timed out"},
    "errors": {
        "10.0.0.2:6379": redlease.ServerUnavailableError("timed out", address="10.0.0.2:6379"),
        "10.0.0.3:6379": NotAnswered("no reply", address="10.0.0.3:6379", name="orders:42"),
        "10.0.0.4:6379": ConnectionResetError(104, "reset by peer"),
        "10.0.0.5:6379": Unpicklable(7, why="an odd error"),
    },
}
BY_TYPE: dict[Any, Any] = {str: "some text", int: 12345, bool: True, float: 2.5}


def sample_kwargs(cls: type[BaseException]) -> dict[str, Any]:
    """A value for every keyword-only parameter of ``cls`` (by name, else by annotation)."""
    init = cls.__init__
    if init is BaseException.__init__ or init is Exception.__init__:
        return {}
    hints = typing.get_type_hints(init)
    kwargs: dict[str, Any] = {}
    for param in inspect.signature(init).parameters.values():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if param.name in SAMPLES:
            kwargs[param.name] = SAMPLES[param.name]
            continue
        hint = hints.get(param.name)
        for kind in typing.get_args(hint) or (hint,):
            if kind in BY_TYPE:
                kwargs[param.name] = BY_TYPE[kind]
                break
        else:
            raise AssertionError(
                f"{cls.__qualname__}({param.name}=...): add a sample value for it to SAMPLES"
            )
    return kwargs


def make(cls: type[BaseException]) -> BaseException:
    exc = cls(f"{cls.__qualname__} happened", **sample_kwargs(cls))
    if hasattr(exc, "add_note"):  # Python 3.11+: notes are attributes too
        exc.add_note("a note added on the way")
    return exc


def same(a: Any, b: Any) -> bool:
    """Equal, comparing exceptions by type, args and attributes (not identity)."""
    if isinstance(a, BaseException):
        return (
            type(a) is type(b)
            and same(a.args, b.args)
            and str(a) == str(b)
            and same(vars(a), vars(b))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def test_classes_found() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"RedleaseError", "LockTimeoutError", "QuorumError", "StaleTokenError"} <= names
    assert all(issubclass(cls, redlease.RedleaseError) for cls in CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(cls: type[BaseException], protocol: int) -> None:
    exc = make(cls)
    copy = pickle.loads(pickle.dumps(exc, protocol=protocol))
    assert type(copy) is cls
    assert copy.args == exc.args and str(copy) == str(exc)
    attributes = {k: v for k, v in vars(exc).items() if k != "errors"}
    assert same({k: v for k, v in vars(copy).items() if k != "errors"}, attributes)
    assert [k for k in vars(copy)] == [k for k in vars(exc)]
    for kind in cls.__mro__:  # still the builtin it resembles (except TimeoutError works)
        assert isinstance(copy, kind)


def test_quorum_error_keeps_each_masters_error() -> None:
    """Every master's error comes back; one that cannot be rebuilt is replaced by a
    ``RedleaseError`` naming its type and message (the rest of the error is kept)."""
    exc = make(redlease.QuorumError)
    assert isinstance(exc, redlease.QuorumError)
    copy = pickle.loads(pickle.dumps(exc))
    assert isinstance(copy, redlease.QuorumError)
    assert copy.errors.keys() == exc.errors.keys()
    for address in ("10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379"):
        assert same(copy.errors[address], exc.errors[address]), address
    stand_in = copy.errors["10.0.0.5:6379"]
    assert type(stand_in) is redlease.RedleaseError
    assert str(stand_in) == f"{__name__}.Unpicklable: 7: an odd error"
    assert copy.outcomes == exc.outcomes and copy.quorum == exc.quorum
    original = exc.errors["10.0.0.5:6379"]
    assert isinstance(original, Unpicklable) and original.code == 7  # the original is untouched


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_rebuilt_from_args_alone(cls: type[BaseException]) -> None:
    """What Celery's JSON result backend does: ``cls(*args)`` gives the class and message."""
    exc = make(cls)
    rebuilt = cls(*exc.args)
    assert type(rebuilt) is cls
    assert rebuilt.args == exc.args and str(rebuilt) == str(exc)


def raise_in_child(qualname: str) -> None:
    """Run in a worker process: raise the sample error of the class named ``qualname``."""
    raise make(next(cls for cls in CLASSES if cls.__qualname__ == qualname))


def test_through_a_process_pool() -> None:
    """A ``ProcessPoolExecutor`` round trip (the worker pickles the error, the caller
    unpickles it): every class comes back as itself, with its attributes, so a caller's
    ``except LockTimeoutError`` matches."""
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        for cls in CLASSES:
            exc = make(cls)
            with pytest.raises(cls) as info:
                pool.submit(raise_in_child, cls.__qualname__).result(timeout=60)
            copy = info.value
            assert type(copy) is cls
            assert copy.args == exc.args and str(copy) == str(exc)
            assert same(
                {k: v for k, v in vars(copy).items() if k != "errors"},
                {k: v for k, v in vars(exc).items() if k != "errors"},
            )
