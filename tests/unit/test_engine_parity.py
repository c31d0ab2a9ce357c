"""The twin engine packages match name for name: ``redlease._asyncio`` and ``redlease._threads``.

What is checked (read from the source with ``ast``, nothing imported but the names):

* both packages have the same modules (``compat.py``, ``transport.py``, ``cancel.py``,
  ``watchdog.py``, ``subscriber.py``, ``fanout.py``, ``line.py``);
* each module defines the same public top-level names (functions, classes, constants), a
  class named ``AsyncX`` on asyncio matching ``X`` on threads (the generator's renaming);
* each class has the same methods, public and underscore ones alike (the generated shells call
  both: ``_check_fork``, ``_fresh_after_fork``, ...), except the few internal helpers of one
  runtime listed in ``OWN`` with the reason; ``__init__`` included;
* each function and method has the same parameter names in the same order, and the same
  kinds (positional, keyword-only, ``*args``, ``**kwargs``); types may differ by runtime.

So a method or a function added on one side only, or a parameter renamed on one side, fails
here: add it on the other side too, or (for a helper the other runtime has no use for) to
``OWN`` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import redlease

PACKAGE = Path(redlease.__file__).parent
ASYNCIO = PACKAGE / "_asyncio"
THREADS = PACKAGE / "_threads"

OWN: dict[tuple[str, str], set[str]] = {
    # asyncio: a task per pub/sub connection; threads: one select() thread woken by a pipe
    ("subscriber", "Subscriber"): {
        "_ensure_task",
        "_close_later",
        "_ensure_thread",
        "_wake",
        "_pause",
        "_read_available",
    },
    # asyncio: one bounded call per renewal; threads: its own bounded connections
    # (and asyncio's loop checks it was not stopped: a cancellation may be swallowed)
    ("watchdog", "Watchdog"): {"_renew_on", "_round", "_refresh_record", "_via", "_stopped"},
    # asyncio: a future per waiter; threads: an event and a fork hook (fork.in_child)
    ("line", "Lines"): {"_fresh_after_fork", "_outcome"},
    # the fan-out: tasks on asyncio, polled sockets and helper threads on threads
    ("fanout", "Master"): {
        "open",
        "close",
        "first_contact",
        "failures",
        "failed_since",
        "request_connection",
        "_open",
        "after_fork",
    },
    ("fanout", "Round"): {
        "receive",  # a connection's replies (asyncio); within a wait (threads)
        "drain",
        "finish",
        "send",
        "start_fresh",
        "on_new_connection",
        "end",
        "readable",
        "connected",
        "dispatch",
    },
    ("fanout", "RedlockDriver"): {
        "_watchdog_loop",
        "_helpers",
        "_take_back",
        "_any_subscriber",
        "_stop_if_closed",
        "_fanout",  # a request on asyncio (tasks), its calls and timeout on threads
        "_fresh_after_fork",  # threads: a fork hook (fork.in_child)
        "_mind_owner",  # asyncio: a hold's task is watched (ASYNC_ONLY below)
        "_owner_ended",
    },
}
"""Per (module, class as named on threads): methods one runtime alone has, and why."""

OWN_NAMES: dict[str, set[str]] = {
    # asyncio: the engine's timed wait that never swallows a cancellation (threads are not
    # cancelled, and pass their timeouts to the waits they make)
    "cancel": {"within"},
    # the fan-out's own helpers and bounds: tasks on asyncio, polled sockets on threads
    "fanout": {
        "consume",
        "discard",
        "nothing",
        "adopt",
        "FINAL_READ",
        "CONNECT_POLL",
        "MAX_CONNECTING",
    },
    # threads: how often the select() thread looks for channels to unsubscribe
    "subscriber": {"IDLE_CHECK"},
    # asyncio: a direct call read in the caller's task, a cancelled caller's reply read
    # late; the pipeline's bounds
    "transport": {
        "read_late",
        "send_direct",
        "Progress",
        "WIDTH",
        "SPREAD",
        "DEPTH",
        "RETIRE_GRACE",
    },
}
"""Per module: public top-level names one runtime alone has (internal to that engine)."""

ASYNC_ONLY: dict[str, set[str]] = {
    # a task can be cancelled midway: what sees a call through it (a thread's cannot)
    "cancel": {
        "CANCEL_GRACE",
        "Cancelled",
        "before_sending",
        "bounded",
        "cancellable",
        "finish_call",
        "finish_despite_cancel",
        "finish_run",
        "keeping",
        "undo_despite_cancel",
        "unsent",
    },
    # a task's cancellation, the task owning a hold and its end, the loop a client is bound
    # to, a cluster client's first read of the layout
    "compat": {
        "Cancelled",
        "CoroutineFunction",
        "LoopBinding",
        "cancel",
        "current_task",
        "on_owner_end",
        "owned_by_caller",
        "ready",
        "uncancel",
    },
    # the opt-in pipeline (AsyncClient(pipeline=True))
    "transport": {"Pipeline", "PipelineClosedError"},
}
"""Per module: what only the asyncio engine has because only asyncio code uses it: the sync
shells never call it (``tools/async_to_sync.py`` drops its uses: ``# ASYNC``, ``UNWRAPPED``),
so ``_threads/`` has no stand-in for it (``test_threads_has_no_stand_ins``)."""


def _modules(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"}


def _plain(name: str) -> str:
    """A name as the generator renames it (``AsyncWatchdog`` -> ``Watchdog``)."""
    return name[5:] if name.startswith("Async") and name[5:6].isupper() else name


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, str]]:
    args = node.args
    out = [(a.arg, "positional") for a in (*args.posonlyargs, *args.args)]
    if args.vararg is not None:
        out.append((args.vararg.arg, "*"))
    out += [(a.arg, "keyword") for a in args.kwonlyargs]
    if args.kwarg is not None:
        out.append((args.kwarg.arg, "**"))
    return out


def _top_level(path: Path) -> tuple[dict[str, ast.AST], dict[str, ast.ClassDef]]:
    """A module's public top-level names (renamed as on threads) and its classes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: dict[str, ast.AST] = {}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found = [node.name]
            if isinstance(node, ast.ClassDef):
                classes[_plain(node.name)] = node
        elif isinstance(node, ast.Assign):
            found = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found = [node.target.id]
        else:
            continue
        for name in found:
            if not name.startswith("_") and name not in ("T", "R", "P", "C"):
                names[_plain(name)] = node
    return names, classes


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            decorators = {getattr(d, "id", getattr(d, "attr", "")) for d in node.decorator_list}
            if "overload" in decorators:
                continue  # the implementation's signature is the one compared
            dunder = node.name.startswith("__") and node.name.endswith("__")
            if dunder and node.name != "__init__":
                # __aenter__/__enter__ and the like: the generator's renaming
                methods[node.name.replace("__a", "__")] = node
            else:
                methods[node.name] = node
    return methods


def test_the_same_modules() -> None:
    assert _modules(ASYNCIO) == _modules(THREADS)
    assert {"compat", "transport", "cancel", "watchdog", "subscriber", "fanout", "line"} <= (
        _modules(ASYNCIO)
    )


@pytest.mark.parametrize("module", sorted(_modules(ASYNCIO)))
def test_the_same_public_names(module: str) -> None:
    on_asyncio, _ = _top_level(ASYNCIO / f"{module}.py")
    on_threads, _ = _top_level(THREADS / f"{module}.py")
    own = OWN_NAMES.get(module, set()) | ASYNC_ONLY.get(module, set())
    assert set(on_asyncio) - own == set(on_threads) - own, (
        f"{module}: only on asyncio {sorted(set(on_asyncio) - set(on_threads) - own)}, "
        f"only on threads {sorted(set(on_threads) - set(on_asyncio) - own)}"
    )
    for name in sorted(set(on_asyncio) & set(on_threads)):
        a, t = on_asyncio[name], on_threads[name]
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            assert isinstance(t, ast.FunctionDef | ast.AsyncFunctionDef), f"{module}.{name}"
            assert _signature(a) == _signature(t), f"{module}.{name}: parameters differ"


@pytest.mark.parametrize("module", sorted(_modules(ASYNCIO)))
def test_the_same_methods(module: str) -> None:
    _, on_asyncio = _top_level(ASYNCIO / f"{module}.py")
    _, on_threads = _top_level(THREADS / f"{module}.py")
    for name in sorted(set(on_asyncio) & set(on_threads)):
        a, t = _methods(on_asyncio[name]), _methods(on_threads[name])
        own = OWN.get((module, name), set())
        assert set(a) - own == set(t) - own, (
            f"{module}.{name}: only on asyncio {sorted(set(a) - set(t) - own)}, "
            f"only on threads {sorted(set(t) - set(a) - own)}"
        )
        for method in sorted((set(a) & set(t)) - own):
            assert _signature(a[method]) == _signature(t[method]), (
                f"{module}.{name}.{method}: parameters differ: "
                f"{_signature(a[method])} vs {_signature(t[method])}"
            )


def test_a_method_on_one_side_only_is_found(tmp_path: Path) -> None:
    """The check itself: a method added to one twin only is reported."""
    one = tmp_path / "one.py"
    other = tmp_path / "other.py"
    one.write_text("class AsyncX:\n    def a(self) -> None: ...\n    def b(self) -> None: ...\n")
    other.write_text("class X:\n    def a(self) -> None: ...\n")
    a = _methods(_top_level(one)[1]["X"])
    t = _methods(_top_level(other)[1]["X"])
    assert set(a) - set(t) == {"b"}


def _stand_in(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a function only stands in for its asyncio twin: no body (a docstring,
    ``pass``, ``...``), ``raise NotImplementedError``, or a return of a constant or of one of
    its own parameters as it came."""
    body = [
        stmt
        for stmt in node.body
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
    ]
    params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    if not body or all(isinstance(stmt, ast.Pass) for stmt in body):
        return True
    if len(body) != 1:
        return False
    only = body[0]
    if isinstance(only, ast.Raise):
        raised = only.exc.func if isinstance(only.exc, ast.Call) else only.exc
        return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"
    if isinstance(only, ast.Return):
        value = only.value
        return (
            value is None
            or isinstance(value, ast.Constant)
            or (isinstance(value, ast.Name) and value.id in params)
        )
    return False


def test_threads_has_no_stand_ins() -> None:
    """Nothing in ``_threads/`` exists only so that generated code imports: no function or
    method that does nothing, returns what it was given or a constant, or raises
    ``NotImplementedError``; no class with nothing in it. What only asyncio needs
    (``ASYNC_ONLY``) is on the asyncio side alone, and the sync shells do without it."""
    trees = {p.name: ast.parse(p.read_text(), filename=str(p)) for p in THREADS.glob("*.py")}
    used_here = {  # a helper the engine itself calls is not there for the shells
        n.id for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.Name)
    }
    found = []
    for name, tree in sorted(trees.items()):
        protocols = {
            id(f)
            for c in ast.walk(tree)
            if isinstance(c, ast.ClassDef)
            and any(getattr(b, "id", "") == "Protocol" for b in c.bases)
            for f in c.body
        }
        for node in ast.walk(tree):
            if id(node) in protocols or getattr(node, "name", None) in used_here:
                continue
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _stand_in(node):
                found.append(f"{name}:{node.lineno} {node.name}()")
            elif isinstance(node, ast.ClassDef) and all(
                isinstance(stmt, ast.Expr | ast.Pass) for stmt in node.body
            ):
                found.append(f"{name}:{node.lineno} class {node.name}")
    assert not found, "stand-ins in _threads/: " + ", ".join(found)
    for module, names in ASYNC_ONLY.items():
        on_asyncio, _ = _top_level(ASYNCIO / f"{module}.py")
        on_threads, _ = _top_level(THREADS / f"{module}.py")
        assert names <= set(on_asyncio), f"{module}: {sorted(names - set(on_asyncio))}"
        assert not names & set(on_threads), f"{module}: {sorted(names & set(on_threads))}"
