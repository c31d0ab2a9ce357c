"""Key and channel names. All keys of one lock share the lock name's cluster hash slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNLOCK_MESSAGE = "0"
"""What Redisson publishes on the unlock channel when a lock is released."""

FENCE_FIELD = "redlease:fence"
"""Hash field of a held lock: the fencing token of the hold (lock_acquire.lua)."""

OWN_FIELDS = "redlease:"
"""Prefix of the lock hash fields that are not holders (Redisson ignores them)."""

KEPT_SUFFIX = ":kept"
"""The field a kept lock shows (``release(keep_for=)``, lock_release_keep.lua): the releasing
owner's field followed by this, count 1. No owner is that holder, so nobody takes the lock
until the key expires; Redisson, which only looks for its own owner field, sees it held."""


def kept_by(field: str) -> str | None:
    """The owner whose release kept the lock, when ``field`` is a kept lock's field."""
    if field.endswith(KEPT_SUFFIX) and not field.startswith(OWN_FIELDS):
        return field[: -len(KEPT_SUFFIX)]
    return None


_CRC16_TABLE: list[int] = []
for _byte in range(256):
    _crc = _byte << 8
    for _ in range(8):
        _crc = ((_crc << 1) ^ 0x1021) if _crc & 0x8000 else (_crc << 1)
    _CRC16_TABLE.append(_crc & 0xFFFF)


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16_TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


def hash_tag(key: str) -> str:
    """The part of ``key`` that Redis Cluster hashes: the first non-empty ``{...}``, else all."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def hash_slot(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (CRC16 of its hash tag, modulo 16384)."""
    return _crc16(hash_tag(key).encode()) % 16384


def same_slot_key(name: str, prefix: str, suffix: str = "") -> str:
    """A key built from ``name`` that hashes to the same cluster slot as ``name`` itself.

    A plain name is wrapped in braces (``prefix{name}``), whose tag is then the whole name; a
    name with a hash tag of its own keeps it (``prefix + name``).
    """
    # Either way the key's tag closes before the suffix, so anything appended keeps the slot.
    key = f"{prefix}{name}{suffix}" if hash_tag(name) != name else f"{prefix}{{{name}}}{suffix}"
    if hash_slot(key) == hash_slot(name) and hash_tag(key) == hash_tag(name):
        return key
    # Braces that do not form a tag ("a}b{") cannot be wrapped without changing the slot.
    raise ValueError(
        f"lock name {name!r} has braces that do not form a hash tag; use '{{tag}}' or none"
    )


def redisson_prefixed(prefix: str, name: str) -> str:
    """Redisson's ``prefixName``: ``prefix:{name}``, or ``prefix:name`` for a name with a
    brace (its own hash tag, which the result then shares)."""
    return f"{prefix}:{name}" if "{" in name else f"{prefix}:{{{name}}}"


def redisson_suffixed(name: str, suffix: str) -> str:
    """Redisson's ``suffixName``: ``{name}:suffix``, or ``name:suffix`` for a name with a
    brace (its own hash tag, which the result then shares). A name whose braces form no tag
    (``a{b``) would put the result in another slot: refused (``ValueError``)."""
    key = f"{name}:{suffix}" if "{" in name else f"{{{name}}}:{suffix}"
    if hash_slot(key) != hash_slot(name):
        raise ValueError(
            f"lock name {name!r} has braces that do not form a hash tag; use '{{tag}}' or none"
        )
    return key


def lock_token_key(name: str) -> str:
    """The fencing counter of the lock ``name``: Redisson's ``RFencedLock`` token key,
    ``redisson_lock_token:{name}`` (``prefixName``), which Java's ``INCR``s at every
    acquisition. A redlease lock is in Redisson's ``RLock`` layout, so a Java service may take
    the same name with ``RFencedLock``: both then hand out tokens from this one key (see
    ``lock_acquire.lua``). It hashes to the slot of ``name`` (a plain name is its own tag); a
    name whose braces form no tag would put it elsewhere: refused (``ValueError``)."""
    key = redisson_prefixed("redisson_lock_token", name)
    if hash_slot(key) != hash_slot(name) or hash_tag(key) != hash_tag(name):
        raise ValueError(
            f"lock name {name!r} has braces that do not form a hash tag; use '{{tag}}' or none"
        )
    return key


PUBLISH_COMMANDS = ("publish", "spublish")
"""The commands a script may publish a wake-up with (each script refuses any other)."""


class PubSub:
    """Which pub/sub a client's primitives wake their waiters with.

    Classic (``PUBLISH``/``SUBSCRIBE``) everywhere but on a cluster whose masters all have
    sharded pub/sub (Redis/Valkey >= 7): there ``SPUBLISH``/``SSUBSCRIBE``, on the node that
    owns the channel's slot (Redisson 3.22+ does the same by default). One per client, shared
    by the keys of all its primitives: the shell settles it once, before the client's first
    operation (on a cluster, by asking the masters), and the core reads ``command`` when it
    builds a call that publishes, so keys made before that still publish the settled way.
    No I/O here.
    """

    __slots__ = ("_sharded",)

    def __init__(self, sharded: bool | None = None) -> None:
        self._sharded = sharded  # None: not settled yet

    @property
    def settled(self) -> bool:
        return self._sharded is not None

    @property
    def sharded(self) -> bool:
        return bool(self._sharded)

    @property
    def command(self) -> str:
        """The publish command for the scripts: ``"spublish"`` or ``"publish"``."""
        return "spublish" if self._sharded else "publish"

    def settle(self, sharded: bool) -> None:
        """Choose, once; later calls change nothing (waiters already listen one way)."""
        if self._sharded is None:
            self._sharded = bool(sharded)

    def __repr__(self) -> str:
        state = "unsettled" if self._sharded is None else self.command
        return f"<PubSub {state}>"


CLASSIC = PubSub(sharded=False)
"""Classic pub/sub, settled: a single server, Sentinel, Redlock's masters, a Redis 6.2 cluster."""


@dataclass(frozen=True)
class LockKeys:
    """The keys and channel of one reentrant lock (Redisson RLock layout)."""

    name: str
    channel: str
    line: str
    """The lock's line: its waiters in order (a zset)."""
    places: str
    """The deadline of each waiter's place in the line (a waiter's place expires)."""
    fence: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    """How releases publish on ``channel`` (the client's; see ``PubSub``)."""
    handover_prefix: str = field(default="", kw_only=True)
    """Prefix of each client's own channel for this lock (see ``handover``)."""
    holder_prefix: str = field(default="", kw_only=True)
    """Prefix of each client's own channel where its holds of this lock hear that they were
    force-released (see ``holder``; empty: none)."""

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> LockKeys:
        return cls(
            name=name,
            # Redisson: prefixName("redisson_lock__channel", name)
            channel=redisson_prefixed("redisson_lock__channel", name),
            line=same_slot_key(name, "redlease:line:"),
            places=same_slot_key(name, "redlease:queue-deadlines:"),
            fence=lock_token_key(name),
            receipt_prefix=same_slot_key(name, "redlease:released:", ":"),
            pubsub=pubsub,
            handover_prefix=same_slot_key(name, "redlease:handover:", ":"),
            holder_prefix=same_slot_key(name, "redlease:holder:", ":"),
        )

    def handover(self, owner: str) -> str:
        """The channel where ``owner``'s client hears that its turn came (the lock was handed
        to one of its waiters): one per client and lock, so a release wakes the
        one process whose turn it is, not every process waiting on the lock."""
        return self.handover_prefix + owner.rsplit(":", 1)[0]

    def holder(self, owner: str) -> str:
        """The channel where ``owner``'s client hears that a hold of this lock was
        force-released ("lost <owner field> <token>", ``lock_force_release.lua``): one per
        client and lock, in the lock's slot, named and routed as the hand-over channel (a
        channel of its own, so that who listens for hand-overs is still told apart)."""
        return self.holder_prefix + owner.rsplit(":", 1)[0]

    @property
    def receipts(self) -> str:
        """The key that remembers the lock's recent final releases (for safe retries)."""
        return self.receipt_prefix

    def receipt(self, owner: str) -> str:
        """The key that remembers ``owner``'s last final release (for safe retries)."""
        return self.receipt_prefix + owner


@dataclass(frozen=True)
class PermitKeys:
    """What the two semaphores' keys share (Redisson's RSemaphore and
    RPermitExpirableSemaphore layouts): the name, the channel, the waiters' registrations and
    the receipts of requests."""

    name: str
    channel: str
    waiters: str
    receipt_prefix: str
    pubsub: PubSub = field(default=CLASSIC, kw_only=True, compare=False, repr=False)
    """How changes publish on ``channel`` (the client's; see ``PubSub``)."""

    @staticmethod
    def shared(name: str, pubsub: PubSub) -> dict[str, Any]:
        """The shared keys of the semaphore ``name``, as keyword arguments."""
        return {
            "name": name,
            "channel": redisson_prefixed("redisson_sc", name),
            "waiters": same_slot_key(name, "redlease:sem-waiters:"),
            "receipt_prefix": same_slot_key(name, "redlease:sem-receipt:", ":"),
            "pubsub": pubsub,
        }

    def receipt(self, request_id: str) -> str:
        return self.receipt_prefix + request_id


@dataclass(frozen=True)
class SemaphoreKeys(PermitKeys):
    """The keys and channel of one counting semaphore (Redisson RSemaphore layout)."""

    total: str

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> SemaphoreKeys:
        return cls(total=same_slot_key(name, "redlease:sem-total:"), **cls.shared(name, pubsub))


@dataclass(frozen=True)
class LeaseSemaphoreKeys(PermitKeys):
    """The keys and channel of one lease semaphore (Redisson RPermitExpirableSemaphore layout)."""

    leases: str

    @classmethod
    def for_name(cls, name: str, pubsub: PubSub = CLASSIC) -> LeaseSemaphoreKeys:
        return cls(leases=redisson_suffixed(name, "timeout"), **cls.shared(name, pubsub))
