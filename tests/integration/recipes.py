"""The recipes of docs/*.md as written there: a top-level function's source (with its
decorators) read from the page's ```python blocks and run in a namespace the test gives, so
that a test runs the very code a reader copies (docs/django.md's ``pay`` under gunicorn,
docs/fastapi.md's ``deposit`` under uvicorn, docs/celery.md's ``deposit`` in a worker)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"


def recipe(page: str, name: str, namespace: dict[str, Any]) -> Any:
    """The top-level function ``name`` of a ```python block of ``docs/<page>``, with its
    decorators, run in ``namespace``; what ``name`` is bound to there afterwards."""
    text = (DOCS / page).read_text()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        for node in ast.parse(block).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                source = "\n".join(block.splitlines()[first - 1 : node.end_lineno])
                exec(compile(source, f"docs/{page}:{name}", "exec"), namespace)
                return namespace[name]
    raise LookupError(f"no function {name} in docs/{page}")
