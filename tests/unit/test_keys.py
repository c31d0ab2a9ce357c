"""Key names and cluster hash slots (keys.py)."""

from __future__ import annotations

import binascii

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from redlease._core.fair import REDISSON_FAIR
from redlease._core.keys import (
    CLASSIC,
    UNLOCK_MESSAGE,
    LockKeys,
    hash_slot,
    hash_tag,
    same_slot_key,
)

RECEIPT_PREFIX = "redlease:released:"


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        ("foo", 12182),
        ("bar", 5061),
        ("123456789", 0x31C3),  # the CRC16-XMODEM check value; 0x31C3 < 16384
        ("somekey", 11058),
        ("foo{hash_tag}", 2515),
        ("bar{hash_tag}", 2515),
        ("", 0),
    ],
)
def test_hash_slot_matches_redis_cluster(key: str, slot: int) -> None:
    assert hash_slot(key) == slot


def test_hash_tag_keys_share_a_slot() -> None:
    assert hash_slot("{user1000}.following") == hash_slot("{user1000}.followers")
    assert hash_slot("{user1000}.following") == hash_slot("user1000")
    assert hash_slot("following") != hash_slot("followers")


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        ("plain", "plain"),
        ("{user1000}.following", "user1000"),
        ("foo{bar}{zap}", "bar"),  # only the first {...} counts
        ("foo{{bar}}zap", "{bar"),  # first "{", then the first "}" after it
        ("foo{}{bar}", "foo{}{bar}"),  # empty first tag: the whole key is hashed
        ("{}", "{}"),
        ("foo{bar", "foo{bar"),  # no closing brace
        ("foo}bar{", "foo}bar{"),  # "}" before "{" does not close anything
        ("a}{b}c", "b"),
        ("{a}", "a"),
        ("x{ü}y", "ü"),
    ],
)
def test_hash_tag_rules(key: str, tag: str) -> None:
    assert hash_tag(key) == tag


def test_hash_slot_hashes_utf8_bytes() -> None:
    assert hash_slot("ü") == binascii.crc_hqx("ü".encode(), 0) % 16384
    assert hash_slot("ü") != binascii.crc_hqx("ü".encode("latin-1"), 0) % 16384


@given(st.text())
def test_hash_slot_is_crc16_xmodem_of_the_tag(key: str) -> None:
    # binascii.crc_hqx with initial value 0 is CRC16-CCITT (XMODEM), the one Redis uses.
    expected = binascii.crc_hqx(hash_tag(key).encode(), 0) % 16384
    assert hash_slot(key) == expected
    assert 0 <= hash_slot(key) < 16384


@given(st.text(), st.text(), st.text())
def test_hash_tag_is_the_spec(prefix: str, inner: str, suffix: str) -> None:
    # Reference implementation straight from the cluster spec.
    key = prefix + inner + suffix
    s = key.find("{")
    expected = key
    if s != -1:
        e = key.find("}", s + 1)
        if e != -1 and e != s + 1:
            expected = key[s + 1 : e]
    assert hash_tag(key) == expected


@given(st.text(), st.sampled_from(["", "x:", RECEIPT_PREFIX]), st.sampled_from(["", ":", ":z"]))
@example("a}b{", RECEIPT_PREFIX, ":")
@example("{}", RECEIPT_PREFIX, ":")
@example("{tag}rest", RECEIPT_PREFIX, ":")
def test_same_slot_key_is_in_the_slot_or_refused(name: str, prefix: str, suffix: str) -> None:
    try:
        key = same_slot_key(name, prefix, suffix)
    except ValueError:
        assert "{" in name or "}" in name or name == ""
        return
    assert hash_slot(key) == hash_slot(name)
    assert key.startswith(prefix)
    assert key.endswith(suffix)
    assert name in key


@given(st.text(min_size=1).filter(lambda s: "{" not in s and "}" not in s), st.text())
def test_same_slot_key_always_wraps_a_name_without_braces(name: str, prefix: str) -> None:
    prefix = prefix.replace("{", "").replace("}", "")
    key = same_slot_key(name, prefix, ":")
    assert key == f"{prefix}{{{name}}}:"
    assert hash_slot(key) == hash_slot(name)


def test_same_slot_key_keeps_a_names_own_tag() -> None:
    assert same_slot_key("{tenant7}:orders", "p:", ":") == "p:{tenant7}:orders:"


def test_same_slot_key_refuses_braces_that_are_not_a_tag() -> None:
    with pytest.raises(ValueError, match="braces"):
        same_slot_key("a}b{", RECEIPT_PREFIX, ":")


def test_lock_keys_use_redissons_layout() -> None:
    keys = LockKeys.for_name("orders:42")
    assert keys.name == "orders:42"
    assert keys.channel == "redisson_lock__channel:{orders:42}"
    assert keys.receipt("c1:7") == "redlease:released:{orders:42}:c1:7"
    assert UNLOCK_MESSAGE == "0"


def test_lock_keys_with_a_hash_tag_keep_it() -> None:
    keys = LockKeys.for_name("{tenant7}:orders")
    # Redisson's prefixName adds braces only to a name without any: the channel keeps the
    # name's own tag, so it shares the lock's cluster slot.
    assert keys.channel == "redisson_lock__channel:{tenant7}:orders"
    assert hash_slot(keys.channel) == hash_slot(keys.name)
    assert keys.receipt("c1:7") == "redlease:released:{tenant7}:orders:c1:7"


owners = st.text(min_size=1, max_size=40)


@given(st.text(min_size=1), owners)
@example("a}b{3801", "owner-1:1")  # found by search: the name's bare form happens to match
@example("{tenant7}:orders", "}{evil}")
@example("plain", "{other}")
def test_receipt_keys_stay_in_the_lock_names_slot(name: str, owner: str) -> None:
    """Every key a script touches must be in one slot, or Redis Cluster refuses the call."""
    try:
        keys = LockKeys.for_name(name)
    except ValueError:
        return
    assert hash_slot(keys.receipt(owner)) == hash_slot(name)
    assert hash_slot(keys.receipt("")) == hash_slot(name)


def test_lock_keys_refuse_names_whose_slot_they_cannot_keep() -> None:
    with pytest.raises(ValueError):
        LockKeys.for_name("a}b{")


@pytest.mark.parametrize("name", ["orders:42", "{user:7}:cart", "a"])
def test_a_clients_hand_over_channel_is_in_the_locks_slot(name: str) -> None:
    keys = LockKeys.for_name(name)
    channel = keys.handover("3f1c-client:17")
    assert channel == keys.handover("3f1c-client:99")  # one per client, whatever the thread
    assert channel != keys.handover("other-client:17")
    assert channel.endswith(":3f1c-client")
    assert hash_slot(channel) == hash_slot(name)


@pytest.mark.parametrize("name", ["orders:42", "{user:7}:cart", "a"])
def test_a_clients_holder_channel_is_in_the_locks_slot(name: str) -> None:
    """Where a force release tells a holder's client: one per client and lock, in the lock's
    slot (sharded pub/sub routes it as the hand-over channel), apart from the hand-over one."""
    keys = LockKeys.for_name(name)
    channel = keys.holder("3f1c-client:17")
    assert channel == keys.holder("3f1c-client:99")
    assert channel != keys.holder("other-client:17")
    assert channel != keys.handover("3f1c-client:17")
    assert channel.endswith(":3f1c-client")
    assert hash_slot(channel) == hash_slot(name)
    fair = REDISSON_FAIR.keys(name, CLASSIC)
    assert fair.holder("3f1c-client:17") == channel  # a fair lock's holders too, either layout
