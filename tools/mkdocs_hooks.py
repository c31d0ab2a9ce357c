"""mkdocs hooks (registered in mkdocs.yml): checks on every page the site build renders.

A list written without a blank line before it, or a sub-list indented by two spaces instead of
four, is not a list for Python-Markdown: its items render as one paragraph with literal "- "
markers in the text. ``on_page_content`` fails the build on any paragraph or list item whose
text has a line that starts with a list marker ("- ", "* ", "+ ", "1. "), so such a page cannot
be published (``mkdocs build`` in .ci/run; tests/unit/test_docs_hooks.py checks the detector).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
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
