"""The library's logger, ``redlease`` (every layer logs through it)."""

from __future__ import annotations

import logging

log = logging.getLogger("redlease")
