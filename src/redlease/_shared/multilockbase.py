"""What both multi-lock shells share: the members' order, checks and errors."""

from __future__ import annotations

from .._core.log import log
from ..errors import InvalidArgumentError


def order_key(lock: object) -> tuple[str, str]:
    """Members are taken in one order everywhere (by name, then where they live), so two
    multi-locks over the same locks, given in different orders, cannot deadlock."""
    client = getattr(lock, "client", None)
    return (str(getattr(lock, "name", "")), str(getattr(client, "address", "")))


def check_members(locks: tuple[object, ...]) -> None:
    if not locks:
        raise InvalidArgumentError("a MultiLock needs at least one lock")
    for lock in locks:
        if not callable(getattr(lock, "acquire", None)) or not callable(
            getattr(lock, "release", None)
        ):
            raise InvalidArgumentError(f"{lock!r} is not a lock (no acquire/release)")


def first_error(errors: list[BaseException], what: str) -> BaseException:
    """The error to raise after trying every member; the others are logged."""
    for extra in errors[1:]:
        log.warning("%s: another member failed too: %r", what, extra)
    return errors[0]
