"""mkdocs hooks (registered in mkdocs.yml): a check on every page, and the API reference pages.

A list written without a blank line before it, or a sub-list indented by two spaces instead of
four, is not a list for Python-Markdown: its items render as one paragraph with literal "- "
markers in the text. ``on_page_content`` fails the build on any paragraph or list item whose
text has a line that starts with a list marker ("- ", "* ", "+ ", "1. "), so such a page cannot
be published (``mkdocs build`` in .ci/run; tests/unit/test_docs_hooks.py checks the detector).
"""

from __future__ import annotations

import ast
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

# a line of running text that starts with what Markdown meant as a list marker
_MARKER = re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+\S")
# text in these is code or preformatted: a "- " there is the code's own
_VERBATIM = {"code", "pre", "kbd", "samp", "script", "style"}
_BLOCKS = {"p", "li", "td", "th", "dd", "dt"}
_VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "source"}


class _Finder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.texts: list[list[str]] = []  # one buffer per open block element
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        self.stack.append(tag)
        if tag in _BLOCKS:
            self.texts.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID or tag not in self.stack:
            return
        while self.stack:
            open_tag = self.stack.pop()
            if open_tag in _BLOCKS:
                self._close(self.texts.pop())
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self.texts:
            return
        if _VERBATIM.intersection(self.stack):
            # code is never running text: quoted, a "- " in it cannot start a line
            data = "`" + data.replace("\n", " ") + "`"
        self.texts[-1].append(data)

    def _close(self, parts: list[str]) -> None:
        lines = "".join(parts).split("\n")
        # the first line is where the element starts: only a marker on a later line is
        # the sign of a list Markdown did not see
        self.found.extend(line.strip() for line in lines[1:] if _MARKER.match(line))


def list_markers_in_text(html: str) -> list[str]:
    """The lines of running text (paragraphs, list items, cells) that start with a list marker."""
    finder = _Finder()
    finder.feed(html)
    finder.close()
    return finder.found


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    found = list_markers_in_text(html)
    if found:
        from mkdocs.exceptions import PluginError

        shown = "\n".join(f"  {line[:100]}" for line in found[:10])
        raise PluginError(
            f"{page.file.src_path}: {len(found)} list marker(s) rendered inside a paragraph "
            "(a list needs a blank line before it; a sub-list, 4 spaces of indentation):\n" + shown
        )
    return html


# --- The API reference: one page per public class, generated at build time -------------------
#
# Every class in ``redlease.__all__`` gets a page ``api/<Class>.md`` holding mkdocstrings'
# ``::: redlease.<Class>`` (its docstring, every public method and property with its signature,
# parameters, return type and what it raises), and every public module outside the package's
# top level (``redlease.contrib.*``, ``redlease.events``, ``redlease.testing``,
# ``redlease.metrics``) a page ``api/<module>.md``. The pages are made from the source on each
# build (nothing to regenerate: a class added to ``__all__`` or a contrib module added to
# src/redlease/contrib/ has its page in the next build) and put in the nav in place of the
# ``API reference: api/index.md`` entry of mkdocs.yml. tests/unit/test_api_pages.py checks that
# the pages are exactly ``__all__``'s classes and the modules.

SRC = Path(__file__).resolve().parent.parent / "src" / "redlease"

# the nav's groups; a class not named here goes to its group by kind (an error, an asyncio class)
_VALUES = [
    "Lease",
    "LockStatistics",
    "SemaphoreStatistics",
    "LatchStatistics",
    "ScheduledRun",
    "ExponentialBackoff",
    "LockEvent",
]
_SYNC = [
    "Client",
    "Lock",
    "FairLock",
    "SpinLock",
    "GroupLock",
    "ReadWriteLock",
    "ReadLock",
    "WriteLock",
    "Semaphore",
    "LeaseSemaphore",
    "CountDownLatch",
    "ScheduledLock",
    "Election",
    "Term",
    "MultiLock",
    "RedlockClient",
    "RedlockLock",
]
# the guide page of each class (by its name without "Async")
_GUIDES = {
    "Client": ("lock.md", "Lock"),
    "Lock": ("lock.md", "Lock"),
    "FairLock": ("fair-lock.md", "Fair lock"),
    "SpinLock": ("spin-lock.md", "Spin lock"),
    "ExponentialBackoff": ("spin-lock.md", "Spin lock"),
    "GroupLock": ("group-lock.md", "Group lock"),
    "ReadWriteLock": ("rw-lock.md", "Read-write lock"),
    "ReadLock": ("rw-lock.md", "Read-write lock"),
    "WriteLock": ("rw-lock.md", "Read-write lock"),
    "Semaphore": ("semaphores.md", "Semaphores and latches"),
    "LeaseSemaphore": ("semaphores.md", "Semaphores and latches"),
    "CountDownLatch": ("semaphores.md", "Semaphores and latches"),
    "SemaphoreStatistics": ("semaphores.md", "Semaphores and latches"),
    "LatchStatistics": ("semaphores.md", "Semaphores and latches"),
    "ScheduledLock": ("scheduled-jobs.md", "Scheduled jobs"),
    "ScheduledRun": ("scheduled-jobs.md", "Scheduled jobs"),
    "Election": ("election.md", "Leader election"),
    "Term": ("election.md", "Leader election"),
    "MultiLock": ("redlock.md", "Redlock and multi-lock"),
    "RedlockClient": ("redlock.md", "Redlock and multi-lock"),
    "RedlockLock": ("redlock.md", "Redlock and multi-lock"),
    "Lease": ("lock.md", "Lock"),
    "LockStatistics": ("observability.md", "Observability"),
    "LockEvent": ("observability.md", "Observability"),
}
_MODULES = ["redlease.events", "redlease.metrics", "redlease.testing"]
_MODULE_GUIDES = {
    "redlease.events": ("observability.md", "Observability"),
    "redlease.metrics": ("observability.md", "Observability"),
    "redlease.testing": ("testing.md", "Servers in your own tests"),
    "redlease.contrib.celery": ("celery.md", "Celery tasks that never run twice"),
    "redlease.contrib.django": ("django.md", "Django"),
    "redlease.contrib.fastapi": ("fastapi.md", "FastAPI"),
    "redlease.contrib.django.fencing": ("fencing-database.md", "Fencing a database write"),
    "redlease.contrib.sqlalchemy": ("fencing-database.md", "Fencing a database write"),
}
# the public modules inside a contrib package (each has its page beside the package's)
_CONTRIB_SUBMODULES = ["redlease.contrib.django.fencing"]


def public_classes() -> list[tuple[str, str]]:
    """``(name, module)`` of every class in ``redlease.__all__``, read from the source.

    ``module`` is the module it is defined in, relative to the package (``errors``,
    ``_sync.lock``); a name of ``__all__`` that is not a class (``LossCause``) is left out.
    """
    tree = ast.parse((SRC / "__init__.py").read_text())
    exported: list[str] = []
    origin: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                origin[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported = [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    classes = []
    for name in exported:
        module = origin.get(name)
        if module is None:
            continue
        path = SRC.joinpath(*module.split(".")).with_suffix(".py")
        defined = ast.parse(path.read_text())
        if any(isinstance(n, ast.ClassDef) and n.name == name for n in defined.body):
            classes.append((name, module))
    return classes


def public_modules() -> list[str]:
    """The documented modules: events, metrics, testing, and every ``redlease.contrib`` one."""
    contrib = sorted(
        f"redlease.contrib.{p.stem}"
        for p in (SRC / "contrib").iterdir()
        if not p.stem.startswith("_")
        and (p.suffix == ".py" or (p / "__init__.py").exists())  # a module or a package
    )
    return [*_MODULES, *sorted([*contrib, *_CONTRIB_SUBMODULES])]


def _module_all(module: str) -> list[str]:
    """The names of a module's ``__all__``, read from its source."""
    parts = module.split(".")[1:]
    path = SRC.joinpath(*parts)
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return []


def _guide(guide: tuple[str, str] | None) -> str:
    if guide is None or not (SRC.parent.parent / "docs" / guide[0]).exists():
        return ""
    return f" · guide: [{guide[1]}](../{guide[0]})"


def api_pages() -> dict[str, tuple[str, str]]:
    """``{path: (nav group, page text)}`` for every page of the API reference."""
    pages: dict[str, tuple[str, str]] = {}
    classes = public_classes()
    names = {name for name, _ in classes}
    order = {name: i for i, name in enumerate([*_SYNC, *_VALUES, "RedleaseError"])}
    by_order = sorted(classes, key=lambda c: (order.get(c[0].removeprefix("Async"), 99), c[0]))
    for name, module in by_order:
        plain = name.removeprefix("Async")
        if module == "errors":
            group = "Errors"
        elif name.startswith("Async") and plain in names:
            group = "asyncio API"
        elif name in _SYNC or f"Async{name}" in names:
            group = "Sync API"
        else:  # a value the API hands back (Lease, LockStatistics, EvictionPolicy, ...)
            group = "Values"
        twin = f"Async{name}" if f"Async{name}" in names else plain if plain != name else None
        twin_text = ""
        if twin and twin in names:
            side = "asyncio" if twin.startswith("Async") else "sync"
            twin_text = f" · {side} twin: [{twin}]({twin}.md)"
        text = (
            f"# {name}\n\n"
            f"`from redlease import {name}`{twin_text}{_guide(_GUIDES.get(plain))}\n\n"
            f"::: redlease.{name}\n"
        )
        if group == "Errors":  # what else it is (except ... ValueError still catches it)
            text += "    options:\n      show_bases: true\n"
        pages[f"api/{name}.md"] = (group, text)
    for module in public_modules():
        text = f"# {module}\n\n`import {module}`{_guide(_MODULE_GUIDES.get(module))}\n\n"
        # a class the top level exports has its own page: linked here, not shown twice
        own = [n for n, m in classes if f"redlease.{m}" == module]
        top = [n for n in _module_all(module) if n in _module_all("redlease")]
        if top:
            links = ", ".join(f"[`{n}`]({n}.md)" for n in own)
            text += f"`from redlease import {', '.join(top)}` also works" + (
                f"; a class has its own page: {links}.\n\n" if own else ".\n\n"
            )
        # a module shows what its __all__ exports, not its helpers
        text += f"::: {module}\n    options:\n      filters: public\n"
        if own:
            rest = [n for n in _module_all(module) if n not in own]
            text += f"      members: {rest!r}\n"
        group = "Integrations" if ".contrib." in module else "Modules"
        pages[f"api/{module}.md"] = (group, text)
    return pages


_GROUPS = ["Sync API", "asyncio API", "Values", "Errors", "Modules", "Integrations"]
_NAV_TITLE = "API reference"


def on_config(config: Any) -> Any:
    """Put the generated pages in the nav, in place of ``API reference: api/index.md``."""
    pages = api_pages()
    section: list[Any] = ["api/index.md"]
    for group in _GROUPS:
        entries = [
            {path.removeprefix("api/").removesuffix(".md"): path}
            for path, (page_group, _) in pages.items()
            if page_group == group
        ]
        if entries:
            section.append({group: entries})
    _replace(config["nav"], section)
    return config


def _replace(nav: list[Any], section: list[Any]) -> bool:
    """Put ``section`` in place of the ``API reference: api/index.md`` entry, at any depth."""
    for i, item in enumerate(nav):
        if not isinstance(item, dict):
            continue
        if item.get(_NAV_TITLE) == "api/index.md":
            nav[i] = {_NAV_TITLE: section}
            return True
        if any(isinstance(v, list) and _replace(v, section) for v in item.values()):
            return True
    return False


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site."""
    from mkdocs.structure.files import File

    for path, (_, text) in api_pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The API reference's index lists every generated page, by group."""
    if page.file.src_uri != "api/index.md":
        return markdown
    pages = api_pages()
    lines = [markdown.rstrip(), ""]
    for group in _GROUPS:
        names = [
            path.removeprefix("api/").removesuffix(".md")
            for path, (page_group, _) in pages.items()
            if page_group == group
        ]
        if names:
            links = ", ".join(f"[`{name}`]({name}.md)" for name in names)
            lines += [f"## {group}", "", links, ""]
    return "\n".join(lines)
