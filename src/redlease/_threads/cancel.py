"""Finishing despite a cancellation, on threads: there is none to finish despite.

A thread's call cannot be cancelled midway, so the sync shells call what the asyncio ones wrap
in ``_asyncio/cancel.py`` directly (``tools/async_to_sync.py`` drops the wrappers:
``UNWRAPPED``, and the code marked ``# ASYNC``). What is left is what both runtimes share.
"""

from __future__ import annotations

from ..errors import RedleaseError

GAVE_UP: tuple[type[BaseException], ...] = (RedleaseError,)
"""How a ``bounded`` give-back may fail: its own error (on threads, no other way)."""
