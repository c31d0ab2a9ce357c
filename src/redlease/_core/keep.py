"""A final release that keeps the lock taken, by no one, for a while (``release(keep_for=)``):
the owner's last hold goes, and the key stays for the time asked, then expires. What a
scheduled job's ``at_least_for`` needs (ShedLock's ``lockAtLeastFor``): instances whose ticks
are a little apart find the slot taken after a fast run, the instance that ran it included.
The kept lock shows the field ``keys.KEPT_SUFFIX`` names; ``status`` reports it as kept, and
``force_release`` frees it as it frees a held lock."""

from __future__ import annotations

from ..errors import LeaseLostError
from . import codes
from .keys import LockKeys
from .requests import Call, Operation
from .scripts import Script

RELEASE_KEEP = Script.load("lock_release_keep")


def release_keep_call(
    keys: LockKeys,
    owner: str,
    *,
    request_id: str,
    token: int,
    keep_ms: int,
    unsure: bool = False,
) -> Call:
    """The script call of a final release that keeps the lock ``keep_ms`` more milliseconds;
    ``token``: the owner's hold's (0: not known); ``unsure``: the owner's last re-entry may
    have landed unseen (its count may be one more, which goes too)."""
    return Call(
        RELEASE_KEEP,
        (keys.name, keys.receipts),
        (owner, 1, request_id, token, keep_ms, int(unsure)),
    )


def release_keep(
    keys: LockKeys,
    owner: str,
    *,
    request_id: str,
    token: int,
    keep_ms: int,
    unsure: bool = False,
) -> Operation[int]:
    """Release the owner's last hold and keep the lock taken ``keep_ms`` more milliseconds;
    returns the holds the owner keeps (0). A retry with the same ``request_id`` of a release
    that already ran changes nothing."""
    reply = yield release_keep_call(
        keys, owner, request_id=request_id, token=token, keep_ms=keep_ms, unsure=unsure
    )
    if int(reply[0]) != codes.RELEASED:
        raise LeaseLostError(
            f"lock {keys.name!r}: owner {owner} no longer holds it "
            "(its lease expired or it was force-released)",
            name=keys.name,
            owner=owner,
        )
    return int(reply[1])
