"""The group lock's pure part: HighwayHash-128 against its published test vectors (key 00..1f,
data 00 01 02 ... of each length), the value fields as Redisson names them, the calls."""

from __future__ import annotations

import base64

import pytest

from redlease import InvalidArgumentError
from redlease._core import group
from redlease._core.highwayhash import hash128, redisson_field
from redlease._core.keys import CLASSIC

TEST_KEY = (0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918)
EXPECTED = {  # length -> (word 0, word 1), google/highwayhash's highwayhash_test.cc
    0: (0x0FED268F9D8FFEC7, 0x33565E767F093E6F),
    1: (0xD6B0A8893681E7A8, 0xDC291DF9EB9CDCB4),
    3: (0x0607621B295F0BEB, 0xBFE69A0FD9CEDD79),
    16: (0x414460FFD5A401AD, 0x029EA3D5019F18C8),
    20: (0xAC6D279B852D00A8, 0x7DCD3A6BA5EBAA46),
    31: (0x06E7B465E8A57C29, 0x52415E3A07F5D446),
    32: (0x1984DF66C1434AAA, 0x16FC1958F9B3E4B9),
    63: (0x74BD7018022F3EF0, 0x3AEA94A8AD5F4BCB),
}


@pytest.mark.parametrize("length", sorted(EXPECTED))
def test_highwayhash_128_matches_the_published_vectors(length: int) -> None:
    assert hash128(bytes(range(length)), TEST_KEY) == EXPECTED[length]


def test_a_value_field_is_redissons_base64_of_the_hash() -> None:
    field = redisson_field(b"Jack_001")
    assert len(field) == 22 and "=" not in field
    high, low = hash128(b"Jack_001")
    assert base64.b64decode(field + "==") == high.to_bytes(8, "big") + low.to_bytes(8, "big")


def test_values_are_deduplicated_sorted_and_checked() -> None:
    fields = group.value_fields(["b", "a", "b"])
    assert fields == tuple(sorted({redisson_field(b"a"), redisson_field(b"b")}))
    assert group.set_id(fields) == group.set_id(group.value_fields(["a", "b"]))
    for bad in ([], ["a", 2], "ab", None):
        with pytest.raises(InvalidArgumentError):
            group.value_fields(bad)  # type: ignore[arg-type]


def test_the_calls_name_the_group_hash_and_redissons_keys() -> None:
    layout = group.GroupLayout(group.value_fields(["a", "b"]))
    keys = layout.keys("seats", CLASSIC)
    acquire = layout.acquire_call(
        keys, "c:1", held=0, lease=5, join_line=True, wait_id="w", timeout=None, fair=False,
        handover=False,
    )  # fmt: skip
    assert acquire.keys == ("seats", "redisson_lock_token:{seats}")
    assert acquire.args[-2:] == keys.fields
    release = layout.release_call(keys, "c:1", 1, request_id="r1", token=7)
    assert release.keys == (
        "seats",
        "redisson_lock__channel:{seats}",
        "redisson_unlock_latch:{seats}:r1",
    )
    renew = keys.renew_call(["c:1"], 3000, None, tokens=[7])
    assert renew.keys == ("seats",) and renew.args[-2:] == ("c:1", 7)
