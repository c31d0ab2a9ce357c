"""The Lua of the Redisson stand-ins, one file per script in ``redlease/testing/lua``."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load(name: str) -> str:
    """The text of ``redlease/testing/lua/<name>.lua``, as the stand-in sends it (EVAL)."""
    source = resources.files("redlease.testing").joinpath("lua").joinpath(f"{name}.lua")
    return source.read_text(encoding="utf-8")
