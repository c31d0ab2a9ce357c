"""The layers stand apart: ``_async/`` and ``_sync/`` (and their engines, ``_asyncio/`` and
``_threads/``) never import each other; ``_shared/`` (what they share) imports neither of them
nor a runtime; only ``_redis/`` (the redis-py adaptation) and the modules around it that do I/O
import redis; every module imports on its own in a fresh interpreter, and module-level imports
form no cycle. (``_core/``'s purity: ``test_core_purity.py``.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import redlease

PACKAGE = Path(redlease.__file__).parent
MODULES = sorted(
    ".".join(("redlease", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
    for p in PACKAGE.rglob("*.py")
)


def _module_of(path: Path) -> str:
    return ".".join(("redlease", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
        ".__init__"
    )


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = _module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imported(path: Path, node: ast.stmt) -> list[str]:
    """The redlease modules one import statement names (a ``from x import y`` may name a
    submodule ``x.y``)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        module = _absolute(path, node)
        names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return [n for n in names if n in MODULES]


def _all_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        m for node in ast.walk(tree) if isinstance(node, ast.stmt) for m in _imported(path, node)
    }


def _runtime_imports(path: Path) -> set[str]:
    """What a module imports when it is imported: its top-level statements (into ``if``/``try``
    blocks), not ``if TYPE_CHECKING:`` blocks, not function bodies."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
            else:
                out.update(_imported(path, node))

    visit(tree.body)
    return out


def test_async_and_sync_never_import_each_other() -> None:
    """Nor do their engines: the asyncio side (``_async/``, ``_asyncio/``) and the thread side
    (``_sync/``, ``_threads/``) stand apart."""
    asyncio_side = ("_async", "_asyncio")
    thread_side = ("_sync", "_threads")
    for sides, others in ((asyncio_side, thread_side), (thread_side, asyncio_side)):
        for side in sides:
            for path in (PACKAGE / side).rglob("*.py"):
                crossed = {
                    m
                    for m in _all_imports(path)
                    for other in others
                    if m == f"redlease.{other}" or m.startswith(f"redlease.{other}.")
                }
                assert not crossed, f"{path.relative_to(PACKAGE)} imports {sorted(crossed)}"


def _top_names(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports anywhere (``asyncio``, ``redis``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


RUNTIMES = {"asyncio", "threading", "selectors", "subprocess", "ssl", "redis", "valkey"}
"""What ``_shared/`` never imports: a runtime, or redis-py (``_redis/`` adapts it)."""
MAY_USE_THREADING = {"state.py"}
"""``_shared/state.py`` guards the hold table with a ``threading.Lock`` (the watchdog thread of
a sync client and its callers share it) and keeps ``threading.local`` owner ids; it starts no
thread and does no I/O."""


def test_shared_imports_no_runtime_and_no_redis() -> None:
    for path in sorted((PACKAGE / "_shared").glob("*.py")):
        allowed = {"threading"} if path.name in MAY_USE_THREADING else set()
        bad = (RUNTIMES - allowed) & _top_names(path)
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


ABOVE = (
    "redlease._async",
    "redlease._sync",
    "redlease._threads",
    "redlease.cli",
    "redlease.testing",
    "redlease.contrib",
)
"""What the middle layers never import when imported: the shells (``redlease._async`` also
covers ``_asyncio``), their engines and the modules above them."""


@pytest.mark.parametrize("layer", ["_shared", "_redis"])
def test_the_middle_layers_do_not_import_the_shells_at_run_time(layer: str) -> None:
    """``_shared/`` and ``_redis/`` are below the shells: none of their modules imports
    ``_async``/``_sync`` (or the CLI, the test doubles, the integrations) when it is imported
    (``_shared/locked.py`` looks up the client classes inside a function, once called)."""
    paths = sorted((PACKAGE / layer).glob("*.py"))
    assert len(paths) > 3
    for path in paths:
        above = {m for m in _runtime_imports(path) if m.startswith(ABOVE)}
        assert not above, f"{path.relative_to(PACKAGE)} imports {sorted(above)}"


REDIS_USERS = (
    "_redis",
    "_async",  # and _asyncio/, its engines
    "_sync",
    "_threads",
    "cli",
    "testing",
    "contrib",
    "demo.py",
)
"""The only places that import redis-py: its adaptation, the two shells and their engines, and
the modules that talk to servers themselves (the CLI, the test servers, the demo, Redisson's
stand-in, the integrations)."""


def test_only_the_adaptation_and_the_shells_import_redis() -> None:
    users = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "redis" in _top_names(path)
    }
    assert users, "the scanner found no module importing redis"
    stray = {u for u in users if not u.startswith(REDIS_USERS)}
    assert not stray, f"redis-py imported outside {REDIS_USERS}: {sorted(stray)}"
    assert any(u.startswith("_redis/") for u in users)


def test_no_import_cycle_at_run_time() -> None:
    graph = {
        _module_of(p): {m for m in _runtime_imports(p) if m != _module_of(p)}
        for p in PACKAGE.rglob("*.py")
    }
    # a package's own __init__ runs before its submodules: drop edges to one's parent package
    for module, deps in graph.items():
        deps -= {m for m in deps if module.startswith(f"{m}.")}
    state: dict[str, int] = {}

    def walk(module: str, trail: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycle = [*trail[trail.index(dep) :], dep] if dep in trail else [module, dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                walk(dep, [*trail, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])


@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports_on_its_own(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("module", "framework"),
    [
        ("celery", "celery"),
        ("django", "django"),
        ("fastapi", "starlette"),
        ("sqlalchemy", "sqlalchemy"),
    ],
)
def test_a_contrib_module_without_its_extra_says_which_to_install(
    module: str, framework: str
) -> None:
    """``import redlease.contrib.<module>`` without its framework: a ``ModuleNotFoundError``
    that names the extra to install, not only the missing module."""
    code = (
        "import sys\n"
        f"sys.modules[{framework!r}] = None  # as if not installed\n"
        f"import redlease.contrib.{module}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"ModuleNotFoundError: redlease.contrib.{module} needs {framework}, which is not"
        f" installed: pip install 'redlease[{module}]'"
    )
