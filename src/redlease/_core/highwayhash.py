"""HighwayHash-128 (Google's keyed hash), as Redisson's ``Hash.hash128toBase64`` names a
value: the group lock's hash fields (``RFasterMultiLock``) are each value's hash under
Redisson's fixed key, so that a Java service and redlease name the same value alike.

Written from the algorithm's description and checked against its published test vectors
(``tests/unit/test_group.py``). Slow in Python (a few microseconds per value), which is
fine: a group lock hashes its values once, when it is made."""

from __future__ import annotations

import base64

MASK = (1 << 64) - 1
LOW = (1 << 32) - 1

REDISSON_KEY = (0x9E3779B97F4A7C15, 0xF39CC0605CEDC834, 0x1082276BF3A27251, 0xF86C6A11D0C18E95)
"""The key Redisson hashes values with (``org.redisson.misc.Hash``)."""

_INIT0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_INIT1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)


def _swap_halves(x: int) -> int:
    return ((x >> 32) | (x << 32)) & MASK


def _zipper(high: int, low: int) -> tuple[int, int]:
    """The byte shuffle of two lanes (``high``: the odd lane, ``low``: the even one)."""
    a = low.to_bytes(8, "little") + high.to_bytes(8, "little")
    order = (3, 12, 2, 5, 14, 1, 15, 0, 11, 4, 10, 13, 9, 6, 8, 7)
    out = bytes(a[i] for i in order)
    return int.from_bytes(out[:8], "little"), int.from_bytes(out[8:], "little")


class _State:
    def __init__(self, key: tuple[int, int, int, int]) -> None:
        self.mul0 = list(_INIT0)
        self.mul1 = list(_INIT1)
        self.v0 = [self.mul0[i] ^ key[i] for i in range(4)]
        self.v1 = [self.mul1[i] ^ _swap_halves(key[i]) for i in range(4)]

    def update(self, lanes: list[int]) -> None:
        v0, v1, mul0, mul1 = self.v0, self.v1, self.mul0, self.mul1
        for i in range(4):
            v1[i] = (v1[i] + mul0[i] + lanes[i]) & MASK
            mul0[i] ^= ((v1[i] & LOW) * (v0[i] >> 32)) & MASK
            v0[i] = (v0[i] + mul1[i]) & MASK
            mul1[i] ^= ((v0[i] & LOW) * (v1[i] >> 32)) & MASK
        for lo, hi in ((0, 1), (2, 3)):
            z0, z1 = _zipper(v1[hi], v1[lo])
            v0[lo] = (v0[lo] + z0) & MASK
            v0[hi] = (v0[hi] + z1) & MASK
        for lo, hi in ((0, 1), (2, 3)):
            z0, z1 = _zipper(v0[hi], v0[lo])
            v1[lo] = (v1[lo] + z0) & MASK
            v1[hi] = (v1[hi] + z1) & MASK

    def packet(self, data: bytes) -> None:
        self.update([int.from_bytes(data[i : i + 8], "little") for i in range(0, 32, 8)])

    def remainder(self, data: bytes) -> None:
        size = len(data)
        for i in range(4):
            self.v0[i] = (self.v0[i] + ((size << 32) + size)) & MASK
            half0, half1 = self.v1[i] & LOW, self.v1[i] >> 32
            half0 = ((half0 << size) & LOW) | (half0 >> (32 - size))
            half1 = ((half1 << size) & LOW) | (half1 >> (32 - size))
            self.v1[i] = half0 | (half1 << 32)
        whole = size & ~3
        packet = bytearray(32)
        packet[:whole] = data[:whole]
        if size & 16:
            packet[28:32] = data[size - 4 : size]
        elif size & 3:
            rest = size & 3
            packet[16] = data[whole]
            packet[17] = data[whole + (rest >> 1)]
            packet[18] = data[whole + rest - 1]
        self.packet(bytes(packet))

    def permute_and_update(self) -> None:
        self.update([_swap_halves(self.v0[i]) for i in (2, 3, 0, 1)])


def hash128(data: bytes, key: tuple[int, int, int, int] = REDISSON_KEY) -> tuple[int, int]:
    """HighwayHash-128 of ``data``: its two 64-bit words."""
    state = _State(key)
    whole = len(data) - len(data) % 32
    for i in range(0, whole, 32):
        state.packet(data[i : i + 32])
    if len(data) % 32:
        state.remainder(data[whole:])
    for _ in range(6):
        state.permute_and_update()
    v0, v1, mul0, mul1 = state.v0, state.v1, state.mul0, state.mul1
    return (
        (v0[0] + mul0[0] + v1[2] + mul1[2]) & MASK,
        (v0[1] + mul0[1] + v1[3] + mul1[3]) & MASK,
    )


def redisson_field(value: bytes) -> str:
    """Redisson's ``Hash.hash128toBase64`` of an encoded value: the two words big-endian,
    in base64 without its final ``==`` (22 characters)."""
    high, low = hash128(value)
    return base64.b64encode(high.to_bytes(8, "big") + low.to_bytes(8, "big")).decode()[:-2]
