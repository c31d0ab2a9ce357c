"""The glossary (``docs/layout.md``) and the code say the same.

Every identifier in ``src/redlease`` (names, attributes, parameters, functions, classes) is
read from the AST; a word the glossary rejects fails the test unless the identifier is one of
the deliberate exceptions below, each with its reason. And the glossary's claims about the
API are checked against the API itself."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

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
}
"""Rejected word (a part of an identifier) -> the identifiers allowed to keep it, and why."""


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


def _uses(word: str) -> dict[str, set[str]]:
    """Every identifier holding ``word`` (any case), by file."""
    pattern = re.compile(word, re.IGNORECASE)
    uses: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        names = {n for n in _identifiers(ast.parse(path.read_text())) if pattern.search(n)}
        if names:
            uses[str(path.relative_to(SRC))] = names
    return uses


def test_no_identifier_uses_a_word_the_glossary_rejects() -> None:
    wrong = {
        f"{where}: {name}"
        for word, allowed in REJECTED.items()
        for where, names in _uses(word).items()
        for name in names
        if name not in allowed
    }
    assert not wrong, f"words the glossary rejects (docs/layout.md): {sorted(wrong)}"


def test_the_exceptions_are_still_used() -> None:
    """A listed exception that nothing uses any more is removed from the list."""
    for word, allowed in REJECTED.items():
        used = set().union(*_uses(word).values())
        assert set(allowed) <= used, f"{word}: stale exceptions {set(allowed) - used}"


def test_the_glossary_says_what_acquire_and_hold_give() -> None:
    for cls in (redlease.Lock, redlease.AsyncLock):
        assert inspect.signature(cls.acquire).return_annotation in (bool, "bool")
        assert "Lease" in str(inspect.signature(cls.hold).return_annotation)
    row = next(line for line in GLOSSARY.splitlines() if line.startswith("| hold |"))
    assert "`acquire` returns `bool`" in row
    assert "`Lease` is what `hold()` yields" in row
