"""The glossary (``docs/layout.md``) and the code say the same.

Every identifier in ``src/redlease`` (names, attributes, parameters, functions, classes) is
read from the AST; a word the glossary rejects fails the test unless the identifier is one of
the deliberate exceptions below, each with its reason. And the glossary's claims about the
API are checked against the API itself."""

from __future__ import annotations

import ast
import inspect
import re
import shutil
from pathlib import Path

import pytest

import redlease

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "redlease"
GLOSSARY = (ROOT / "docs" / "layout.md").read_text()

REJECTED = {
    # the glossary: "hand-over ... `handover` in identifiers and key names"
    "handoff": {
        "handoff_window": "the public option, kept from before the word was settled",
        "HANDOFF_WINDOW": "the option's default, named after it",
    },
    # the glossary: "line" (the server's queue of waiters) and "place" (a waiter's entry,
    # with a deadline of its own): LockKeys.line and LockKeys.places
    "deadlines": {},
    # the glossary: "line", never "queue": an acquire that takes a place in line if the lock
    # cannot be had is join_line (LockKeys.line the key). Another idea that is a queue keeps
    # the word, in its own module only (an exception here is "<module>: <identifier>")
    "queue": {
        "_redis/connections.py: queue": "the stdlib's queue module (queue.SimpleQueue)",
        "_redis/connections.py: SimpleQueue": "the stdlib's queue.SimpleQueue: call tokens",
        "_threads/compat.py: queue": "the stdlib's queue module (queue.SimpleQueue)",
        "_threads/compat.py: SimpleQueue": "the stdlib's queue.SimpleQueue: call tokens",
        "demo.py: queue": "the stdlib's queue module (queue.Empty)",
        "demo.py: queues": "the stdlib's multiprocessing.queues module",
        "demo.py: Queue": "multiprocessing's Queue: the demo's worker messages",
        "_asyncio/transport.py: queued": "calls queued on a pipeline's connection, to write",
        "_asyncio/transport.py: _queued": "the count of calls queued on the pipeline",
        "contrib/celery/_options.py: queued_for": "the public option: a task in Celery's queue",
        "contrib/celery/_task.py: queued_for": "the public option: a task in Celery's queue",
        "contrib/celery/_holds.py: queued_record": "the id of a task queued in Celery's broker",
        "contrib/celery/_task.py: queued_record": "the id of a task queued in Celery's broker",
        "testing/redisson/fair_lock.py: queue": "Redisson's own word (its RFairLock's list)",
    },
}
"""Rejected word (a part of an identifier) -> the identifiers allowed to keep it, and why: an
identifier anywhere, or ``"<module>: <identifier>"`` in that module only."""


def _identifiers(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg | ast.keyword) and node.arg is not None:
            found.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.rsplit(".", 1)[-1])
    return found


def _uses(word: str, package: Path = SRC) -> dict[str, set[str]]:
    """Every identifier holding ``word`` (any case), by file."""
    pattern = re.compile(word, re.IGNORECASE)
    uses: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        names = {n for n in _identifiers(ast.parse(path.read_text())) if pattern.search(n)}
        if names:
            uses[path.relative_to(package).as_posix()] = names
    return uses


def _wrong(package: Path = SRC) -> set[str]:
    """``"<module>: <identifier>"`` of every use of a rejected word not listed as allowed."""
    return {
        f"{where}: {name}"
        for word, allowed in REJECTED.items()
        for where, names in _uses(word, package).items()
        for name in names
        if name not in allowed and f"{where}: {name}" not in allowed
    }


def test_no_identifier_uses_a_word_the_glossary_rejects() -> None:
    wrong = _wrong()
    assert not wrong, f"words the glossary rejects (docs/layout.md): {sorted(wrong)}"


@pytest.mark.parametrize(
    ("module", "planted", "reported"),
    [
        ("_core/codes.py", "handoff_planted = 1\n", "handoff_planted"),
        ("_core/lock.py", "def planted(queue: bool) -> bool:\n    return queue\n", "queue"),
        ("_core/fair.py", "class WaitQueue:\n    pass\n", "WaitQueue"),
        ("_shared/channels.py", "def planted(keys):\n    return keys.queue\n", "queue"),
        ("_asyncio/line.py", "queued = 0\n", "queued"),  # allowed in transport.py only
    ],
)
def test_the_check_fails_on_a_planted_identifier(
    tmp_path: Path, module: str, planted: str, reported: str
) -> None:
    """The check above, run on a copy of the package with one identifier added that holds a
    rejected word, reports that identifier in that module and nothing else."""
    copy = tmp_path / "redlease"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.lua"))
    target = copy / module
    target.write_text(target.read_text() + "\n\n" + planted)
    assert _wrong(copy) == {f"{module}: {reported}"}


def test_the_exceptions_are_still_used() -> None:
    """A listed exception that nothing uses any more is removed from the list."""
    for word, allowed in REJECTED.items():
        uses = _uses(word)
        used = {name for names in uses.values() for name in names}
        used |= {f"{where}: {name}" for where, names in uses.items() for name in names}
        assert set(allowed) <= used, f"{word}: stale exceptions {set(allowed) - used}"


def test_the_glossary_says_what_acquire_and_hold_give() -> None:
    for cls in (redlease.Lock, redlease.AsyncLock):
        assert inspect.signature(cls.acquire).return_annotation in (bool, "bool")
        assert "Lease" in str(inspect.signature(cls.hold).return_annotation)
    row = next(line for line in GLOSSARY.splitlines() if line.startswith("| hold |"))
    assert "`acquire` returns `bool`" in row
    assert "`Lease` is what `hold()` yields" in row
