"""``redlease._shared.state.next_request_id`` as it was at commit 0079938 (defect 3 of issue #23):
a per-process counter starting at 1, so every process mints "1", "2", ... (the model loads
this file once per simulated process, as each process would import it)."""

from __future__ import annotations

import itertools

_request_ids = itertools.count(1)


def next_request_id() -> str:
    return str(next(_request_ids))
