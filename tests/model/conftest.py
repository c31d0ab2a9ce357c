"""One private server for the whole model run (``engine.py`` keeps nothing on it between
steps), on the newest binary found (``REDLEASE_SERVER`` picks another)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .engine import ServerEngine, start_engine


@pytest.fixture(scope="session")
def engine() -> Iterator[ServerEngine]:
    server, eng = start_engine()
    try:
        yield eng
    finally:
        eng.close()
        server.stop()
