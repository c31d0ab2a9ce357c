"""The local record of holds (HoldTable)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from redlease._core.keys import LockKeys
from redlease._core.lock import Acquired, Hold, HoldTable

A = LockKeys.for_name("a")
B = LockKeys.for_name("b")


def grant(
    table: HoldTable, keys: LockKeys, owner: str, lease: float | None, at: float = 0.0
) -> Hold:
    count = table.count(keys.name, owner) + 1
    hold = table.granted(
        keys, owner, Acquired(count=count, ttl=30.0, requested_at=at, token=7), lease
    )
    assert hold is not None
    return hold


def test_empty_table() -> None:
    table = HoldTable()
    assert table.count("a", "o") == 0
    assert table.get("a", "o") is None
    assert table.holds() == [] and table.watched() == []
    table.released("a", "o", 0)  # a stray release is ignored
    assert table.drop("a", "o") is None


def test_reentrant_leases_stack_and_unstack() -> None:
    table = HoldTable()
    first = grant(table, A, "o", 10.0, at=5.0)
    assert (first.count, first.renewed_at, first.keys, first.owner) == (1, 5.0, A, "o")
    second = grant(table, A, "o", None, at=9.0)
    assert second is first
    assert first.leases == [10.0, None]
    assert first.renewed_at == 5.0  # re-entry keeps the episode's record
    assert table.count("a", "o") == 2
    table.released("a", "o", 1)
    assert first.leases == [10.0]
    assert table.get("a", "o") is first
    table.released("a", "o", 0)
    assert table.get("a", "o") is None and table.count("a", "o") == 0


def test_holds_are_per_lock_and_owner() -> None:
    table = HoldTable()
    grant(table, A, "o1", None)
    grant(table, A, "o2", None)
    grant(table, B, "o1", 3.0)
    assert (table.count("a", "o1"), table.count("a", "o2"), table.count("b", "o1")) == (1, 1, 1)
    assert len(table.holds()) == 3
    table.released("a", "o1", 0)
    assert table.count("a", "o1") == 0 and table.count("a", "o2") == 1


def test_servers_count_is_the_truth() -> None:
    table = HoldTable()
    for _ in range(3):
        grant(table, A, "o", 1.0)
    hold = table.granted(A, "o", Acquired(count=2, ttl=1.0, requested_at=0.0, token=7), None)
    assert hold.count == 2
    assert hold.leases[-1] is None  # the new hold is kept


def test_release_to_zero_forgets_the_hold_even_if_local_count_is_higher() -> None:
    table = HoldTable()
    grant(table, A, "o", 1.0)
    grant(table, A, "o", 1.0)
    table.released("a", "o", 0)
    assert table.get("a", "o") is None


def test_watched_only_with_a_watchdog_hold_not_being_released() -> None:
    table = HoldTable()
    leased = grant(table, A, "o", 10.0)
    assert not leased.watched and table.watched() == []
    watched = grant(table, A, "o", None)
    assert watched.watched and table.watched() == [watched]
    watched.releasing = True
    assert table.watched() == []
    watched.releasing = False
    table.released("a", "o", 1)  # the watchdog hold (last in) goes
    assert table.watched() == []


def test_drop_checks_the_epoch() -> None:
    table = HoldTable()
    hold = grant(table, A, "o", None)
    assert table.drop("a", "o", hold.epoch + 1) is None
    assert table.get("a", "o") is hold
    assert table.drop("a", "o", hold.epoch) is hold
    assert table.get("a", "o") is None
    again = grant(table, A, "o", None)
    assert again.epoch != hold.epoch
    assert table.drop("a", "o", hold.epoch) is None  # a stale episode cannot drop the new one
    assert table.drop("a", "o") is again


def test_epochs_are_never_reused() -> None:
    table = HoldTable()
    seen = set()
    for i in range(50):
        hold = grant(table, A if i % 2 else B, "o", None)
        assert hold.epoch not in seen
        seen.add(hold.epoch)
        if i % 3 == 0:
            table.clear()
        else:
            table.drop(hold.keys.name, "o")
    assert len(seen) == 50


def test_clear() -> None:
    table = HoldTable()
    grant(table, A, "o", None)
    grant(table, B, "o", None)
    table.clear()
    assert table.holds() == [] and table.count("a", "o") == 0


class HoldTableMachine(RuleBasedStateMachine):
    """Random grants, releases, drops against a model: a dict of lease lists."""

    episodes = Bundle("episodes")

    def __init__(self) -> None:
        super().__init__()
        self.table = HoldTable()
        self.model: dict[tuple[str, str], list[float | None]] = {}
        self.releasing: set[tuple[str, str]] = set()
        self.epoch_of: dict[tuple[str, str], int] = {}
        self.max_epoch = 0

    names = st.sampled_from(["a", "b", "{t}c"])
    owners = st.sampled_from(["o1", "o2"])
    leases = st.one_of(st.none(), st.floats(0.1, 100))

    @rule(target=episodes, name=names, owner=owners, lease=leases, at=st.floats(0, 1e6))
    def granted(self, name: str, owner: str, lease: float | None, at: float):
        key = (name, owner)
        leases = self.model.setdefault(key, [])
        leases.append(lease)
        hold = self.table.granted(
            LockKeys.for_name(name), owner, Acquired(len(leases), 30.0, at, 7), lease
        )
        if key in self.epoch_of:
            assert hold.epoch == self.epoch_of[key]
        else:
            assert hold.epoch > self.max_epoch
            assert hold.renewed_at == at
            self.max_epoch = hold.epoch
            self.epoch_of[key] = hold.epoch
        return (name, owner, hold.epoch)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def released(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        leases = self.model[key]
        leases.pop()
        self.table.released(*key, len(leases))
        if not leases:
            self._forget(key)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), flag=st.booleans())
    def set_releasing(self, data: st.DataObject, flag: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        hold = self.table.get(*key)
        assert hold is not None
        hold.releasing = flag
        (self.releasing.add if flag else self.releasing.discard)(key)

    @rule(episode=consumes(episodes))
    def drop_episode(self, episode: tuple[str, str, int]) -> None:
        name, owner, epoch = episode
        key = (name, owner)
        current = self.epoch_of.get(key)
        dropped = self.table.drop(name, owner, epoch)
        if current == epoch:
            assert dropped is not None and dropped.epoch == epoch
            self._forget(key)
        else:
            assert dropped is None

    def _forget(self, key: tuple[str, str]) -> None:
        del self.model[key]
        del self.epoch_of[key]
        self.releasing.discard(key)

    @invariant()
    def matches_model(self) -> None:
        assert {(h.keys.name, h.owner) for h in self.table.holds()} == set(self.model)
        for (name, owner), leases in self.model.items():
            assert self.table.count(name, owner) == len(leases)
            hold = self.table.get(name, owner)
            assert hold is not None
            assert hold.leases == leases
            assert hold.keys == LockKeys.for_name(name)
        expected_watched = {
            k for k, leases in self.model.items() if None in leases and k not in self.releasing
        }
        assert {(h.keys.name, h.owner) for h in self.table.watched()} == expected_watched


HoldTableMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestHoldTable = HoldTableMachine.TestCase
