"""The docs build's check for lists that render as paragraphs (tools/mkdocs_hooks.py).

The hook fails ``mkdocs build`` (.ci/run) on a page whose paragraphs show literal list markers;
here the detector is checked on Python-Markdown's output for both mistakes and their fixes, and
every page of docs/ and the README is rendered with the site's Markdown extensions and checked,
so that the test command catches such a page before a site is built.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# mkdocs.yml's markdown_extensions (checked below to stay the same)
EXTENSIONS = ["toc", "tables", "admonition", "pymdownx.highlight", "pymdownx.superfences"]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools/mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def _render(text: str) -> str:
    markdown = pytest.importorskip("markdown")
    pytest.importorskip("pymdownx")
    return str(markdown.markdown(text, extensions=EXTENSIONS))


def test_hook_registered_in_mkdocs_yml() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^hooks:\n  - tools/mkdocs_hooks\.py$", config, flags=re.MULTILINE)
    for name in EXTENSIONS:
        assert re.search(rf"^  - {re.escape(name)}:?$", config, flags=re.MULTILINE), name


BROKEN = [
    # no blank line before the list: the items join the paragraph
    "Three things:\n- one\n- two\n- three\n",
    "Steps:\n1. first\n2. second\n",
    # a sub-list after a paragraph of its item, with no blank line
    "- item\n\n    settled by:\n    - a sub-item\n    - another\n",
    # a second paragraph indented by two spaces ends the list: the next items join it
    "- one\n\n  more about one\n- two\n- three\n",
]

FIXED = [
    "Three things:\n\n- one\n- two\n- three\n",
    "Steps:\n\n1. first\n2. second\n",
    "- item, settled by:\n\n    - a sub-item\n    - another\n",
    "- one\n\n    more about one\n\n- two\n- three\n",
    # markers inside code are the code's own
    "```text\n- not a list\n```\n\nA `-` sign, `x - y`, and\n`- z` inline.\n",
    "| a | b |\n|---|---|\n| x - y | 1 |\n",
]


@pytest.mark.parametrize("text", BROKEN)
def test_markers_in_paragraphs_found(text: str) -> None:
    assert hooks.list_markers_in_text(_render(text)), _render(text)


@pytest.mark.parametrize("text", FIXED)
def test_real_lists_pass(text: str) -> None:
    assert hooks.list_markers_in_text(_render(text)) == [], _render(text)


def test_detector_on_plain_html() -> None:
    """Without Markdown installed the detector still runs on what Python-Markdown writes."""
    assert hooks.list_markers_in_text("<p>Three:\n- one\n- two</p>") == ["- one", "- two"]
    assert hooks.list_markers_in_text("<li>item\n  - sub</li>") == ["- sub"]
    assert hooks.list_markers_in_text("<p>x <code>a\n- b</code> y</p>") == []
    assert hooks.list_markers_in_text("<pre><code>- a\n- b</code></pre>") == []
    assert hooks.list_markers_in_text("<ul>\n<li>one</li>\n<li>two</li>\n</ul>") == []


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_pages_have_no_list_marker_in_a_paragraph(path: Path) -> None:
    assert hooks.list_markers_in_text(_render(path.read_text())) == []
