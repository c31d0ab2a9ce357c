"""Lua scripts: source read once from ``redlease/lua``, SHA-1 computed locally, run by EVALSHA."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources


@dataclass(frozen=True)
class Script:
    """One server-side operation. Every key goes through KEYS; no value is put in the source."""

    name: str
    source: bytes = field(repr=False)
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        """Read ``lua/<name>.lua`` once (every primitive's module loads its own scripts)."""
        if name not in LOADED:
            source = resources.files("redlease").joinpath("lua").joinpath(f"{name}.lua")
            data = source.read_bytes()
            LOADED[name] = cls(name=name, source=data, sha=hashlib.sha1(data).hexdigest())
        return LOADED[name]


LOADED: dict[str, Script] = {}
"""Every script loaded so far, by name."""


LOCK_ACQUIRE = Script.load("lock_acquire")
LOCK_RELEASE = Script.load("lock_release")
LOCK_RENEW = Script.load("lock_renew")
LOCK_FORCE_RELEASE = Script.load("lock_force_release")
LOCK_STATUS = Script.load("lock_status")
LOCK_LEAVE = Script.load("lock_leave")
FENCED_SET = Script.load("fenced_set")
FENCED_GET = Script.load("fenced_get")

ALL = (
    LOCK_ACQUIRE,
    LOCK_RELEASE,
    LOCK_RENEW,
    LOCK_FORCE_RELEASE,
    LOCK_STATUS,
    LOCK_LEAVE,
    FENCED_SET,
    FENCED_GET,
)
