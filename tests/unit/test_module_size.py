"""Modules of one job (issue #34): no module of ``src/redlease`` is over ``MAX_LINES`` lines; one
that grows past it is split along its seams (``contrib/celery/``: options, clients, holds, the
task), its package's ``__init__.py`` exporting what the module did."""

from __future__ import annotations

from pathlib import Path

import redlease

PACKAGE = Path(redlease.__file__).parent
MAX_LINES = 700


def _too_long(package: Path) -> dict[str, int]:
    sizes = {
        str(path.relative_to(package)): len(path.read_text().splitlines())
        for path in package.rglob("*.py")
    }
    assert sizes, f"no module found under {package}"
    return {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}


def test_no_module_is_over_700_lines() -> None:
    too_long = _too_long(PACKAGE)
    assert not too_long, f"modules over {MAX_LINES} lines (split them): {too_long}"


def test_the_check_fails_on_a_planted_long_module(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert _too_long(tmp_path) == {"long.py": MAX_LINES + 1}
