"""Fenced writes: a protected Redis resource rejects writers whose token is stale."""

from __future__ import annotations

from ..errors import StaleTokenError
from . import scripts
from .keys import same_slot_key
from .requests import Call, Operation


def seen_key(resource: str) -> str:
    """Where the highest token a resource has seen is kept (same cluster slot)."""
    return same_slot_key(resource, "redlease:fence-seen:")


def fenced_set(resource: str, value: str | bytes, token: int, px: int) -> Operation[None]:
    """Set ``resource`` to ``value`` unless a holder with a higher token already wrote it."""
    reply = yield Call(
        scripts.FENCED_SET,
        (resource, seen_key(resource)),
        (token, value, px),
    )
    if int(reply[0]) != 1:
        raise _stale("write to", resource, token, int(reply[1]))


def fenced_get(resource: str, token: int) -> Operation[bytes | str | None]:
    """Read ``resource`` and make it refuse every token older than ``token`` from now on."""
    reply = yield Call(scripts.FENCED_GET, (resource, seen_key(resource)), (token,))
    if int(reply[0]) != 1:
        raise _stale("read of", resource, token, int(reply[1]))
    value: bytes | str | None = reply[2]
    return value


def _stale(what: str, resource: str, token: int, seen: int) -> StaleTokenError:
    return StaleTokenError(
        f"{what} {resource!r} refused: token {token} is older than {seen}, "
        "which a later holder already used",
        resource=resource,
        token=token,
        seen=seen,
    )
