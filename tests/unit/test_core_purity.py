"""The core does no I/O: it imports no asyncio, threading, socket or redis, even indirectly."""

from __future__ import annotations

import ast
from pathlib import Path

import redlease

PACKAGE = Path(redlease.__file__).parent
CORE = PACKAGE / "_core"
FORBIDDEN = {"asyncio", "threading", "socket", "redis", "selectors", "ssl", "subprocess", "valkey"}


def _imports(path: Path) -> list[tuple[str, Path | None]]:
    """(imported top-level name, file inside the package it resolves to, if any)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[str, Path | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                out.append(
                    (top, _resolve(alias.name.split(".")[1:]) if top == "redlease" else None)
                )
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module is not None
                parts = node.module.split(".")
                out.append((parts[0], _resolve(parts[1:]) if parts[0] == "redlease" else None))
                continue
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            parts = node.module.split(".") if node.module else []
            target = base.joinpath(*parts)
            if node.module:
                out.append(("redlease", _file(target)))
            for alias in node.names:
                sub = _file(target / alias.name)
                out.append(("redlease", sub if sub else _file(target)))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            raise AssertionError(f"{path}: dynamic __import__")
    return out


def _resolve(parts: list[str]) -> Path | None:
    return _file(PACKAGE.joinpath(*parts))


def _file(target: Path) -> Path | None:
    if target.with_suffix(".py").is_file():
        return target.with_suffix(".py")
    if (target / "__init__.py").is_file():
        return target / "__init__.py"
    return None


def _reachable() -> dict[Path, list[str]]:
    """Every module the core reaches through imports inside redlease, with its imports."""
    todo = sorted(CORE.glob("*.py"))
    seen: dict[Path, list[str]] = {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        found = _imports(path)
        seen[path] = [top for top, _ in found]
        todo.extend(p for _, p in found if p is not None and p != PACKAGE / "__init__.py")
    return seen


def test_core_modules_are_found() -> None:
    modules = _reachable()
    names = {p.name for p in modules}
    assert {"lock.py", "keys.py", "scripts.py", "watchdog.py", "backoff.py"} <= names
    assert PACKAGE / "errors.py" in modules  # followed out of _core


def test_core_imports_nothing_that_does_io() -> None:
    for path, tops in _reachable().items():
        bad = FORBIDDEN.intersection(tops)
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_core_does_not_reach_into_the_shells() -> None:
    for path in _reachable():
        rel = path.relative_to(PACKAGE).parts
        assert rel[0] not in {"_sync", "_async", "_shared", "_redis", "cli", "testing"}, path


def test_import_scanner_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom redis.asyncio import Redis\nimport threading as t\n")
    assert [top for top, _ in _imports(bad)] == ["os", "redis", "threading"]
