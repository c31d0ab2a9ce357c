"""The group lock: many values of one group locked all-or-nothing, in one hash, with one
script call per acquire or release and one watchdog entry per hold (Redisson 4's
``RFasterMultiLock``, ``redisson.getFasterMultiLock(group, values)``).

The group's hash (its key is the group's name) keeps, per value, Redisson's fields: the
value's field (Redisson's ``Hash.hash128toBase64`` of the encoded value: HighwayHash-128;
redlease encodes a value as its UTF-8 bytes, as Redisson's ``StringCodec`` does) naming the
holder's owner field, ``<value>:<owner>:expire_time`` (when the hold of that value ends, ms
since the epoch) and ``<value>:<owner>:lock_count``; and, per redlease hold, a field Redisson
ignores with the hold's fencing token, count and wait id (``group_lock_acquire.lua``). So a
Java service locking the same strings in the same group and redlease exclude each other.

The operations are the reentrant lock's (``lock.acquire`` and ``lock.release`` run them,
with its rules for lost replies, late grants, outages and re-entries); ``GroupLayout`` builds
their calls: a waiter listens on the group's unlock channel (Redisson's), with no line and no
hand-over (Redisson's has neither), and re-checks within the longest lease left on the values
it waits for."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from .highwayhash import redisson_field
from .keys import LockKeys, PubSub, lock_token_key, redisson_prefixed
from .lock import RECEIPT_MS, Layout, grant_undo, to_ms
from .requests import Call, Replication
from .scripts import Script
from .watchdog import OwnRenewalKeys

GROUP_LOCK_ACQUIRE = Script.load("group_lock_acquire")
GROUP_LOCK_RELEASE = Script.load("group_lock_release")
GROUP_LOCK_LEAVE = Script.load("group_lock_leave")
GROUP_LOCK_RENEW = Script.load("group_lock_renew")
GROUP_LOCK_STATUS = Script.load("group_lock_status")
GROUP_LOCK_FORCE_RELEASE = Script.load("group_lock_force_release")

SCRIPTS = (
    GROUP_LOCK_ACQUIRE,
    GROUP_LOCK_RELEASE,
    GROUP_LOCK_LEAVE,
    GROUP_LOCK_RENEW,
    GROUP_LOCK_STATUS,
    GROUP_LOCK_FORCE_RELEASE,
)


def value_fields(values: Iterable[str]) -> tuple[str, ...]:
    """The values' hash fields, Redisson's way (each value's UTF-8 bytes hashed), sorted and
    without repeats (Redisson keeps a set); ``InvalidArgumentError`` for no value or one
    that is not a ``str``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"values must be an iterable of str (a list, a set, ...), got {type(values).__name__}"
        )
    fields = set()
    for value in values:
        if not isinstance(value, str):
            raise InvalidArgumentError(
                f"each value of a group lock must be a str, got {type(value).__name__}"
            )
        fields.add(redisson_field(value.encode()))
    if not fields:
        raise InvalidArgumentError("a group lock needs at least one value")
    return tuple(sorted(fields))


def set_id(fields: Sequence[str]) -> str:
    """Names one set of values, the same in every client (the hold's record field)."""
    return hashlib.sha1(" ".join(fields).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GroupKeys(OwnRenewalKeys):
    """One set of values of a group, as the client's hold table and watchdog see it:
    ``name`` labels the holds (``"<group> [<set id>]"``), ``group`` is the hash's key."""

    group: str
    fields: tuple[str, ...]
    set_id: str

    def renew_call(
        self,
        owners: Sequence[str],
        lease_ms: int,
        replication: Replication | None,
        *,
        tokens: Sequence[int],
    ) -> Call:
        return Call(
            GROUP_LOCK_RENEW,
            (self.group,),
            (lease_ms, self.set_id, len(self.fields), *self.fields, *owners, *tokens),
            replication=replication,
        )

    def latch(self, request_id: str) -> str:
        """Redisson's unlock latch key of a release request (its receipt)."""
        return f"{redisson_prefixed('redisson_unlock_latch', self.group)}:{request_id}"


@dataclass(frozen=True)
class GroupLayout(Layout):
    """The calls of a group lock over ``fields`` (see the module's docstring)."""

    fields: tuple[str, ...]

    def keys(self, name: str, pubsub: PubSub) -> GroupKeys:
        ident = set_id(self.fields)
        return GroupKeys(
            name=f"{name} [{ident}]",
            channel=redisson_prefixed("redisson_lock__channel", name),
            line="",
            places="",
            fence=lock_token_key(name),
            receipt_prefix="",
            pubsub=pubsub,
            group=name,
            fields=self.fields,
            set_id=ident,
        )

    def acquire_call(
        self,
        keys: LockKeys,
        owner: str,
        *,
        held: int,
        lease: float,
        join_line: bool,
        wait_id: str,
        timeout: float | None,
        fair: bool,
        handover: bool,
        token: int = 0,
    ) -> Call:
        """One try; no line (``join_line``, ``fair`` and ``handover`` do not apply)."""
        assert isinstance(keys, GroupKeys)
        undo = grant_undo(
            held,
            lambda count, granted: self.release_call(
                keys, owner, count, request_id=uuid.uuid4().hex, token=granted
            ),
        )
        return Call(
            GROUP_LOCK_ACQUIRE,
            (keys.group, keys.fence),
            (to_ms(lease), owner, held, wait_id, token, keys.set_id, *keys.fields),
            undo=undo,
        )

    def release_call(
        self,
        keys: LockKeys,
        owner: str,
        held: int,
        *,
        request_id: str,
        token: int,
        handover_ms: int = 0,
        unsure: bool = False,
        quiet: bool = False,
    ) -> Call:
        """One release (no hand-over, and a release always wakes the group's waiters:
        ``handover_ms`` and ``quiet`` do not apply)."""
        assert isinstance(keys, GroupKeys)
        return Call(
            GROUP_LOCK_RELEASE,
            (keys.group, keys.channel, keys.latch(request_id)),
            (
                owner,
                held,
                token,
                int(unsure),
                keys.pubsub.command,
                keys.set_id,
                RECEIPT_MS,
                *keys.fields,
            ),
        )

    def leave_call(
        self, keys: LockKeys, owner: str, wait_id: str, timeout: float | None, place: str
    ) -> Call:
        """Give back a first hold made for the acquire call ``wait_id`` (no line to leave)."""
        assert isinstance(keys, GroupKeys)
        return Call(
            GROUP_LOCK_LEAVE,
            (keys.group, keys.channel),
            (owner, wait_id, keys.set_id, keys.pubsub.command, *keys.fields),
        )

    def listen(self, keys: LockKeys, owner: str) -> tuple[str, str | None]:
        return keys.channel, None

    def status_call(self, keys: LockKeys) -> Call:
        assert isinstance(keys, GroupKeys)
        return Call(GROUP_LOCK_STATUS, (keys.group,), (keys.set_id, *keys.fields))

    def force_release_call(self, keys: LockKeys) -> Call:
        assert isinstance(keys, GroupKeys)
        return Call(
            GROUP_LOCK_FORCE_RELEASE,
            (keys.group, keys.channel),
            (keys.pubsub.command, *keys.fields),
        )
