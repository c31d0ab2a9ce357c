"""The layers stand apart: ``_async/`` and ``_sync/`` (and their engines, ``_asyncio/`` and
``_threads/``) never import each other; every import points down a layer (``_core`` <
``_redis`` < ``_shared`` < the engines < the shells < the public modules), and ``contrib``
imports nothing private; ``_shared/`` (what the shells share) imports no runtime; only
``_redis/`` (the redis-py adaptation) and the modules around it that do I/O import redis;
every module imports on its own in a fresh interpreter, and module-level imports form no
cycle. (``_core/``'s purity: ``test_core_purity.py``.)"""

from __future__ import annotations

import ast
import shutil
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


LAYERS = {
    "_core": 0,
    "_redis": 1,
    "_shared": 2,
    "_asyncio": 3,
    "_threads": 3,
    "_async": 4,
    "_sync": 4,
}
"""The private layers, low to high (docs/layout.md): the pure core, the redis-py adaptation, the
runtime-neutral middle, the engines (one per runtime), the shells (``_sync`` generated from
``_async``). Above them all: the public modules, the CLI, ``contrib`` and ``testing``."""
VOCABULARY = {"redlease.errors", "redlease.events", "redlease.stats"}
"""Public modules of values every layer speaks (the errors it raises, the events and statistics
it hands out): imported from any layer."""
TOP = len(LAYERS) + 1


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], TOP) if len(parts) > 1 else TOP


def _points_up(importer: str, imported: str) -> bool:
    if importer.startswith("redlease.contrib"):
        return imported.startswith("redlease._")
    if imported in VOCABULARY:
        return False
    return _layer(importer) < TOP and _layer(imported) > _layer(importer)


def upward_imports(package: Path) -> list[str]:
    """Every import in the package at ``package`` (anywhere in a module: top level,
    ``if TYPE_CHECKING:``, function bodies) that points up a layer: from a private layer to a
    higher one or to the public modules (bar ``VOCABULARY``), or from ``contrib`` to anything
    private (``redlease._*``: the integrations use the public API only)."""
    modules = {_module_in(package, p) for p in package.rglob("*.py")}
    found = []
    for path in sorted(package.rglob("*.py")):
        me = _module_in(package, path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt):
                continue
            up = [n for n in _imported_in(package, path, node, modules) if _points_up(me, n)]
            if up:
                where = path.relative_to(package)
                found.append(f"{where}:{node.lineno} ({me}) imports {', '.join(up)}")
    return found


def _module_in(package: Path, path: Path) -> str:
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(("redlease", *parts)).removesuffix(".__init__")


def _imported_in(package: Path, path: Path, node: ast.stmt, modules: set[str]) -> list[str]:
    """The redlease modules one import statement names (``from x import y`` may name a
    submodule ``x.y``) in the package at ``package``."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level == 0:
            module = node.module or ""
        else:
            base = _module_in(package, path).split(".")
            if path.name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return [n for n in names if n in modules]


def test_every_import_points_down_a_layer() -> None:
    """An engine never imports a shell, ``_shared`` neither (nor an engine), ``_redis`` nothing
    of ``_shared``, ``_core`` nothing above it, and ``contrib`` nothing private: at run time,
    under ``TYPE_CHECKING`` or inside a function alike (what a layer needs of one above it is
    a ``Protocol`` of its own, or handed to it)."""
    found = upward_imports(PACKAGE)
    assert not found, "imports that point up a layer:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module", "planted", "reported"),
    [
        ("_threads/fanout.py", "from .._sync.client import Client\n", "redlease._sync.client"),
        ("_shared/exclusive.py", "import redlease._async.client\n", "redlease._async.client"),
        (
            "_asyncio/watchdog.py",
            "if TYPE_CHECKING:\n    from .._async import lock\n",
            "redlease._async.lock",
        ),
        (
            "_core/keys.py",
            "def late():\n    from ..cli import run\n    return run\n",
            "redlease.cli.run",
        ),
        ("_redis/urls.py", "from .._shared import channels\n", "redlease._shared.channels"),
        (
            "contrib/celery/_task.py",
            "def late():\n    from ..._core.keys import LockKeys\n    return LockKeys\n",
            "redlease._core.keys",
        ),
    ],
)
def test_the_layer_check_fails_on_a_planted_upward_import(
    tmp_path: Path, module: str, planted: str, reported: str
) -> None:
    """The check above, run on a copy of the package with one upward import added (at the
    top, under ``TYPE_CHECKING``, inside a function), reports that import and no other."""
    copy = tmp_path / "redlease"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.lua"))
    target = copy / module
    target.write_text(target.read_text() + "\n" + planted)
    found = upward_imports(copy)
    assert len(found) == 1, found
    assert found[0].startswith(f"{module}:") and found[0].endswith(reported)


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
