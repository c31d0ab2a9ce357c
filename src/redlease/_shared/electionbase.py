"""The part of ``Election`` and ``AsyncElection`` that does no I/O: names, identity, the
leader record, the errors a term ends with.

An election is a lock (``redlease:election:{name}``, the lock's own layout: watchdog lease,
hand-over to the next waiter, fencing tokens) plus a record of who holds it: the string
``redlease:leader:{name}``, ``"<term's fencing token> <identity>"``, written by each new leader
with ``fenced_set`` and that term's token (so a late write of an older term never overwrites a
newer one). The record is believed only while the lock holds the very token it names: a dead
or deposed leader's record is never reported once the lock is free or held by another term.
Leaders announce the start and the end of their terms on the channel ``redlease:leader:{name}``
(a hint for ``observe``, which also reads the record at a bounded interval).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from .._core import arguments
from .._core.keys import same_slot_key
from ..errors import InvalidArgumentError, LeaseLostError

log = logging.getLogger("redlease")

RECORD_PREFIX = "redlease:leader:"
"""The leader record's key (and the election's channel): ``redlease:leader:{name}``."""

LOCK_PREFIX = "redlease:election:"
"""The election's lock: ``redlease:election:{name}``."""

OBSERVE_POLL = 1.0
"""Default seconds between two reads of the leader by ``observe`` when no announcement came
(a leader that dies or is deposed announces nothing)."""


def default_identity() -> str:
    """``"<host name>:<pid>"``: which process leads (read at each campaign, so a forked
    child names itself)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def checked_identity(identity: object) -> str | None:
    if identity is None:
        return None
    if not isinstance(identity, str):
        raise InvalidArgumentError(f"identity must be a str, got {type(identity).__name__}")
    if not identity:
        raise InvalidArgumentError("identity must not be empty")
    return identity


def parse_record(value: Any) -> tuple[int, str] | None:
    """``(token, identity)`` of a leader record as read (bytes or str), else ``None``."""
    if value is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    token, _, identity = text.partition(" ")
    if not token.isdigit() or not identity:
        return None
    return int(token), identity


class ElectionBase:
    """Names and identity of one election, shared by both shells."""

    def __init__(self, name: str, identity: str | None) -> None:
        self.name = arguments.name(name, "election")
        """The election's name, as given."""
        try:
            self.lock_name = same_slot_key(self.name, LOCK_PREFIX)
            """The name of the lock the leader holds."""
            self._record_key = same_slot_key(self.name, RECORD_PREFIX)
        except ValueError as exc:  # braces that do not form a hash tag
            raise InvalidArgumentError(str(exc).replace("lock name", "election name")) from None
        self._channel = self._record_key
        self._identity = checked_identity(identity)

    @property
    def identity(self) -> str:
        """This candidate's identity: the one given, else ``"<host name>:<pid>"``."""
        return self._identity if self._identity is not None else default_identity()

    @property
    def record_key(self) -> str:
        """The key of the leader record (``redlease:leader:{name}``)."""
        return self._record_key

    def _publish_command(self, sharded: bool) -> str:
        return "SPUBLISH" if sharded else "PUBLISH"

    def _not_elected(self, timeout: float | None) -> str:
        return f"election {self.name!r}: {self.identity} was not elected within {timeout} s"

    def _lost_error(
        self, identity: str, token: int, owner: str, cause: BaseException | None
    ) -> LeaseLostError:
        why = f": {cause}" if cause is not None else ""
        error = LeaseLostError(
            f"election {self.name!r}: {identity} lost the leadership of term {token}{why}",
            name=self.lock_name,
            owner=owner,
            cause=cause.cause if isinstance(cause, LeaseLostError) else "unknown",
        )
        error.__cause__ = cause
        return error

    def _started(self, identity: str, token: int) -> None:
        log.info(
            "election %r: %s leads (term %d)",
            self.name,
            identity,
            token,
            extra={"lock": self.lock_name, "election": self.name},
        )

    def _ended(self, identity: str, token: int, lost: bool) -> None:
        log.log(
            logging.WARNING if lost else logging.INFO,
            "election %r: %s %s term %d",
            self.name,
            identity,
            "lost" if lost else "resigned",
            token,
            extra={"lock": self.lock_name, "election": self.name},
        )
