"""The scripts and the id minting as they were at commit 0079938, before issue #23's fixes.

Each ``*.lua`` here is ``git show 0079938:src/redlease/lua/<name>.lua``; ``ids.py`` is
``next_request_id`` as ``_owners.py`` had it then. ``test_lock_model.py`` runs the model on
them (one test per defect) and expects the violation each defect causes.

``lease_semaphore_acquire.lua`` is the same file at commit 2d5d1d9, before issue #36's fix (a
retry whose own lease ran out, behind more than 100 expired leases, took its permits a second
time): ``test_lease_semaphore_model.py`` runs it. ``semaphore_release.lua`` likewise (a release
that pushed the count past the total raised it silently): ``test_semaphore_model.py``.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def script(name: str) -> bytes:
    """The unfixed source of ``<name>.lua``."""
    return (HERE / f"{name}.lua").read_bytes()
