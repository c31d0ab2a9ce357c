"""Key and channel names. All keys of one lock share the lock name's cluster hash slot."""

from __future__ import annotations

from dataclasses import dataclass

UNLOCK_MESSAGE = "0"
"""What Redisson publishes on the unlock channel when a lock is released."""

HANDOFF_FIELD = "redlease:handoff"
"""Hash field of a released lock reserved for the first waiter in line (lock_release.lua)."""

FENCE_FIELD = "redlease:fence"
"""Hash field of a held lock: the fencing token of the hold (lock_acquire.lua)."""

OWN_FIELDS = "redlease:"
"""Prefix of the lock hash fields that are not holders (Redisson ignores them)."""

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


@dataclass(frozen=True)
class LockKeys:
    """The keys and channel of one reentrant lock (Redisson RLock layout)."""

    name: str
    channel: str
    queue: str
    deadlines: str
    fence: str
    receipt_prefix: str

    @classmethod
    def for_name(cls, name: str) -> LockKeys:
        return cls(
            name=name,
            # Redisson: "redisson_lock__channel" + ":{" + name + "}"
            channel=f"redisson_lock__channel:{{{name}}}",
            queue=same_slot_key(name, "redlease:queue:"),
            deadlines=same_slot_key(name, "redlease:queue-deadlines:"),
            fence=same_slot_key(name, "redlease:fence:"),
            receipt_prefix=same_slot_key(name, "redlease:released:", ":"),
        )

    def receipt(self, owner: str) -> str:
        """The key that remembers ``owner``'s last final release (for safe retries)."""
        return self.receipt_prefix + owner
