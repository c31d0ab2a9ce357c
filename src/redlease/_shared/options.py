"""A misspelt keyword option named in an error that lists the valid ones."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ArgumentTypeError

__all__ = ["refuse_unknown"]

WAIT_WORDS = ("wait", "blocking", "block", "wait_timeout", "max_wait")
"""Other libraries' names for the wait: here it is ``timeout`` everywhere."""


def refuse_unknown(
    where: str, unknown: Mapping[str, Any] | Iterable[str], valid: Iterable[str]
) -> None:
    """Raise ``ArgumentTypeError`` (an ``InvalidArgumentError`` and a ``TypeError``) naming
    each of ``unknown`` and listing ``valid``; nothing when ``unknown`` is empty."""
    names = sorted(unknown)
    if not names:
        return
    options = sorted(valid)
    hints = []
    for name in names:
        if name in WAIT_WORDS and "timeout" in options:
            hints.append(
                f"the wait for a busy lock is timeout= (seconds; 0: one try, None: as long as"
                f" it takes), not {name}="
            )
        else:
            close = difflib.get_close_matches(name, options, n=1)
            if close:
                hints.append(f"{name}: did you mean {close[0]}?")
    said = ", ".join(repr(n) for n in names)
    raise ArgumentTypeError(
        f"{where}: unknown option{'s' if len(names) > 1 else ''} {said}; the options are"
        f" {', '.join(options)}" + "".join(f" ({hint})" for hint in hints)
    )
