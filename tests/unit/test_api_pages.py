"""The API reference (tools/mkdocs_hooks.py makes it on every site build): one page per public
class of ``redlease.__all__`` and per public module, and a docstring on everything it shows."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import types
from pathlib import Path

import redlease

from .test_docs_hooks import hooks  # tools/mkdocs_hooks.py, loaded once

ROOT = Path(__file__).resolve().parents[2]


def _is_class(obj: object) -> bool:
    """A class, not a type alias: on Python 3.10 ``inspect.isclass`` is true of a generic alias
    such as ``redlease.Listener`` (``Callable[[LockEvent], None]``), which has no page."""
    return inspect.isclass(obj) and not isinstance(obj, types.GenericAlias)


CLASSES = sorted(name for name in redlease.__all__ if _is_class(getattr(redlease, name)))


def test_a_page_per_public_class_and_module() -> None:
    pages = hooks.api_pages()
    classes = {
        path.removeprefix("api/").removesuffix(".md")
        for path, (_, text) in pages.items()
        if "::: redlease." in text and not path.startswith("api/redlease.")
    }
    assert classes == set(CLASSES)
    contrib = {
        f"redlease.contrib.{p.stem}"
        for p in (ROOT / "src/redlease/contrib").iterdir()
        if not p.stem.startswith("_")
        and (p.suffix == ".py" or (p / "__init__.py").exists())  # a module or a package
    }
    modules = {p.removeprefix("api/").removesuffix(".md") for p in pages} - classes
    submodules = {"redlease.contrib.django.fencing"}
    assert modules == {"redlease.events", "redlease.metrics", "redlease.testing", *contrib,
                       *submodules}  # fmt: skip
    # sync and asyncio: every asyncio class has its sync twin's page and the other way round
    for name in CLASSES:
        if name.startswith("Async") and name.removeprefix("Async") in CLASSES:
            assert f"twin: [{name.removeprefix('Async')}]" in pages[f"api/{name}.md"][1]


def test_each_page_documents_its_object() -> None:
    for path, (_, text) in hooks.api_pages().items():
        target = text.split("::: ", 1)[1].split()[0]
        module, _, attr = target.rpartition(".")
        if path.startswith("api/redlease."):
            assert path == f"api/{target}.md"
        else:
            assert getattr(importlib.import_module(module), attr) is getattr(redlease, attr)


def _public_members(cls: type) -> list[tuple[str, object]]:
    """Public methods and properties defined by redlease's own classes (not object's)."""
    found = []
    for attr in dir(cls):
        if attr.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if attr in vars(k)), None)
        if owner is None or not owner.__module__.startswith("redlease"):
            continue
        value = vars(owner)[attr]
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if callable(value):
            found.append((f"{owner.__module__}.{owner.__qualname__}.{attr}", value))
    return found


def test_every_public_class_method_and_property_has_a_docstring() -> None:
    missing = []
    for name in CLASSES:
        cls = getattr(redlease, name)
        if not (cls.__doc__ or "").strip() or cls.__doc__.startswith(f"{name}("):
            missing.append(name)  # a dataclass's made-up docstring is not one
        if issubclass(cls, BaseException):
            continue
        missing += [where for where, value in _public_members(cls) if not inspect.getdoc(value)]
    assert sorted(set(missing)) == []
