"""One spelling per idea in the public API (issue 32)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest

import redlease

# (class, method): the parameters that may be given by position (the count, or the id)
SEMAPHORE_POSITIONALS = {
    ("Semaphore", "acquire"): ["permits"],
    ("Semaphore", "hold"): ["permits"],
    ("Semaphore", "release"): ["permits"],
    ("LeaseSemaphore", "acquire"): [],
    ("LeaseSemaphore", "hold"): [],
    ("LeaseSemaphore", "acquire_many"): ["permits"],
    ("LeaseSemaphore", "release"): ["permit_id"],
    ("LeaseSemaphore", "release_many"): ["permit_ids"],
}


def _positionals(fn: Any) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(fn).parameters.values()
    return [p.name for p in params if p.kind in kinds and p.name != "self"]


@pytest.mark.parametrize("prefix", ["", "Async"])
@pytest.mark.parametrize(("cls", "method"), sorted(SEMAPHORE_POSITIONALS))
def test_what_follows_a_semaphore_s_count_is_keyword_only(
    prefix: str, cls: str, method: str
) -> None:
    # ``acquire(5)`` must not mean five permits on one and five seconds on the other
    fn = getattr(getattr(redlease, prefix + cls), method)
    assert _positionals(fn) == SEMAPHORE_POSITIONALS[cls, method]


LOCKS = ["Lock", "FairLock", "SpinLock", "ReadLock", "WriteLock", "RedlockLock", "MultiLock"]


def _shape(fn: Any) -> list[tuple[str, bool]]:
    """(name, keyword-only) of each parameter but ``self``."""
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind is inspect.Parameter.KEYWORD_ONLY) for p in params if p.name != "self"]


@pytest.mark.parametrize("prefix", ["", "Async"])
@pytest.mark.parametrize("cls", LOCKS)
def test_a_lock_s_acquire_takes_blocking_timeout_then_lease_by_keyword(
    prefix: str, cls: str
) -> None:
    # threading's and redis-py's order; ``acquire(True, 5, 10)`` no longer reads as a lease
    acquire = getattr(redlease, prefix + cls).acquire
    assert _shape(acquire) == [("blocking", False), ("timeout", False), ("lease", True)]


@pytest.mark.parametrize("prefix", ["", "Async"])
@pytest.mark.parametrize(
    "cls", ["Lock", "FairLock", "SpinLock", "ReadLock", "WriteLock", "RedlockLock", "MultiLock"]
)
def test_a_lock_s_hold_takes_acquire_s_arguments_in_its_order_by_keyword(
    prefix: str, cls: str
) -> None:
    # ``hold(5)`` was five seconds' wait, and would now be ``blocking=5``: refused instead
    hold = getattr(redlease, prefix + cls).hold
    assert _shape(hold) == [("blocking", True), ("timeout", True), ("lease", True)]


@pytest.mark.parametrize("cls", ["LeaseSemaphore", "AsyncLeaseSemaphore"])
def test_a_lease_permit_s_lease_is_changed_one_way(cls: str) -> None:
    sem = getattr(redlease, cls)
    assert hasattr(sem, "update_lease_time")  # Redisson's updateLeaseTime
    assert not hasattr(sem, "renew")


@pytest.mark.parametrize(
    ("cls", "method"),
    [
        ("Client", "fair_lock"),
        ("Client", "rw_lock"),
        ("AsyncClient", "fair_lock"),
        ("AsyncClient", "rw_lock"),
        ("FairLock", "__init__"),
        ("ReadLock", "__init__"),
        ("AsyncFairLock", "__init__"),
        ("AsyncWriteLock", "__init__"),
    ],
)
def test_layout_is_a_literal_as_the_other_choices(cls: str, method: str) -> None:
    annotation = inspect.signature(getattr(getattr(redlease, cls), method)).parameters["layout"]
    assert annotation.annotation in ("LayoutName", redlease.LayoutName)  # (postponed: a string)
    assert get_args(redlease.LayoutName) == ("redlease", "redisson")


# Names a public signature may use that are not redlease's own: the language's, typing's and
# collections.abc's, and the frameworks' and redis-py's types a caller already has.
FOREIGN = {
    *("None", "bool", "int", "float", "str", "bytes", "list", "dict", "tuple", "type"),
    *("Any", "NoReturn", "Callable", "Awaitable", "Iterable", "Iterator", "Sequence"),
    *("AsyncIterator", "Mapping"),
    "redis",  # redis.Redis, redis.asyncio.Redis, ... (Client(redis_client))
    "Model",  # Django's (contrib.django.model_lock)
    "Request",  # Starlette's (contrib.fastapi.get_client)
    "compat",  # Election.observe(stop=): threading.Event, or asyncio.Event on the asyncio side
}


def _annotation_names(obj: Any) -> Iterator[str]:
    """The first part of every dotted name in ``obj``'s annotations (postponed: strings)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return
    texts = [str(p.annotation) for p in sig.parameters.values()]
    texts.append(str(sig.return_annotation))
    for text in texts:
        if text != str(inspect.Parameter.empty):
            yield from (name.split(".")[0] for name in re.findall(r"[A-Za-z_][\w.]*", text))


def test_the_types_of_the_signatures_are_importable_from_redlease() -> None:
    # every type a caller may have to name in an annotation (a listener's LockEvent, a wait's
    # Seconds, a layout's LayoutName) comes from ``redlease``; an integration's own types
    # (contrib.fastapi.LeaderTask) from the integration's module
    missing = set()
    for where, obj in _walk():
        allowed = {*FOREIGN, *redlease.__all__}
        if where.startswith("contrib."):
            allowed |= set(importlib.import_module(f"redlease.{where.rsplit('.', 1)[0]}").__all__)
        missing |= {f"{where}: {n}" for n in _annotation_names(obj) if n not in allowed}
    assert sorted(missing) == []
    for name in ("LockEvent", "Listener", "EventKind", "Seconds", "LayoutName", "OnBusy"):
        assert name in redlease.__all__


def test_the_event_types_are_the_events_module_s() -> None:
    from redlease import events

    assert redlease.LockEvent is events.LockEvent
    assert redlease.Listener is events.Listener and redlease.EventKind is events.EventKind


def test_the_statistics_types_live_in_one_module() -> None:
    for name in ("LockStatistics", "SemaphoreStatistics", "LatchStatistics"):
        assert getattr(redlease, name).__module__ == "redlease.stats"
        assert name in redlease.__all__


def test_the_integrations_import_nothing_private_of_the_core() -> None:
    contrib = Path(redlease.__file__).parent / "contrib"
    found = [
        str(path.relative_to(contrib))
        for path in contrib.rglob("*.py")
        if "_core" in path.read_text()
    ]
    assert found == []


# --- the walk: one name per idea, one idea per name (docs/layout.md's glossary) -------------
#
# For each word of the glossary, the other names one might give its idea: a parameter (or a
# CLI option) so named is a second name for it.
SYNONYMS = {
    "timeout": {"wait", "wait_timeout", "blocking_timeout", "max_wait", "wait_time", "waittime"},
    "lease": {"lease_time", "lease_seconds", "ttl", "expire", "expiry", "ex", "px", "at_most_for"},
    "permits": {"count", "n", "num_permits", "permit_count", "amount"},
    "on_lease_lost": {"on_lost", "on_loss", "lost"},
}
# and what each word is: every parameter of that name is of that type (else it means two things)
MEANS = {
    "timeout": {"Seconds | None"},
    "lease": {"Seconds | None", "Seconds"},
    "permits": {"int"},
    "blocking": {"bool"},
    "layout": {"LayoutName"},
    "on_lease_lost": {"Callable[[LeaseLostError], None] | None"},
}
# Deliberate exceptions, (where, name): why. ``where`` drops the ``Async`` prefix.
EXCEPTIONS = {
    ("redlease run", "wait"): "flock(1)'s --wait/-w, which `redlease run` mirrors",
    ("Client.scheduled_lock", "at_most_for"): "ShedLock's lockAtMostFor, beside at_least_for",
    ("ScheduledLock", "at_most_for"): "ShedLock's lockAtMostFor, beside at_least_for",
    ("Client.fenced_set", "px"): "redis-py's SET px=: the stored value's expiry in ms",
    ("CountDownLatch.try_set_count", "count"): "Redisson's trySetCount: a latch's count",
    ("contrib.django.exclusive", "on_lost"): "a policy's name ('raise', ...), not a callback",
    ("contrib.fastapi.exclusive", "on_lost"): "a policy's name ('raise', ...), not a callback",
}


def _walk() -> Iterator[tuple[str, Any]]:
    """``(where, callable)`` of the public API: ``redlease.__all__``'s functions, classes
    (their constructors) and their public methods, and the integrations' public callables.
    Values the API hands back (frozen dataclasses: ``Lease``, the statistics) are read, not
    called, and errors are raised, not called: both are left out."""
    for name in redlease.__all__:
        obj = getattr(redlease, name, None)
        if inspect.isclass(obj):
            if dataclasses.is_dataclass(obj) or issubclass(obj, BaseException):
                continue
            plain = name.removeprefix("Async")
            yield plain, obj
            for member, fn in inspect.getmembers(obj):
                if not member.startswith("_") and callable(fn):
                    yield f"{plain}.{member}", fn
        elif inspect.isfunction(obj):
            yield name, obj
    for module in ("django", "fastapi", "celery"):
        try:
            mod = importlib.import_module(f"redlease.contrib.{module}")
        except ImportError:  # its framework is not installed
            continue
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
                yield f"contrib.{module}.{name}", obj


def _parameters(obj: Any) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.name not in ("self", "cls")]


def _cli_options() -> Iterator[tuple[str, str]]:
    """``(command, option name)`` of every option the CLI's ``--help`` shows."""
    top = subprocess.run(
        [sys.executable, "-m", "redlease", "--help"], capture_output=True, text=True, check=True
    ).stdout
    commands = re.findall(r"^    (\w+)\s", top, re.M)
    assert "run" in commands, top
    for command in commands:
        text = subprocess.run(
            [sys.executable, "-m", "redlease", command, "--help"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for option in set(re.findall(r"(?<![\w-])--([a-z][a-z-]*)", text)):
            yield f"redlease {command}", option.replace("-", "_")
        if re.search(r"(?<![\w-])-w\b", text):
            yield f"redlease {command}", "wait"  # flock's -w is the wait too


def _second_names(found: Iterator[tuple[str, str]]) -> list[str]:
    other = {word: preferred for preferred, words in SYNONYMS.items() for word in words}
    return sorted(
        f"{where}({name}): the glossary's word is {other[name]!r}"
        for where, name in found
        if name in other and (where, name) not in EXCEPTIONS
    )


def test_no_idea_has_two_names_in_the_api() -> None:
    found = ((where, p.name) for where, obj in _walk() for p in _parameters(obj))
    assert _second_names(found) == []


def test_no_idea_has_two_names_in_the_cli() -> None:
    assert _second_names(_cli_options()) == []


def test_no_name_means_two_things() -> None:
    found = sorted(
        f"{where}({p.name}: {p.annotation})"
        for where, obj in _walk()
        for p in _parameters(obj)
        if p.name in MEANS and str(p.annotation) not in MEANS[p.name]
    )
    assert found == []


def test_every_exception_is_still_needed() -> None:
    seen = {(where, p.name) for where, obj in _walk() for p in _parameters(obj)}
    seen |= set(_cli_options())
    assert set(EXCEPTIONS) - seen == set()
