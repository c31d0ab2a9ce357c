"""``python -m redlease``: the same command line as the ``redlease`` script."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":  # guarded: spawned demo workers import this module as __mp_main__
    sys.exit(main())
