"""Classic or sharded pub/sub: the client's choice, the publish argument every publishing script
gets, and the bookkeeping of which connection each channel is subscribed on (no server)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import redis

from redlease._core import group, latch, rwlock, scripts
from redlease._core import lease_semaphore as lease_core
from redlease._core import lock as lock_core
from redlease._core import semaphore as sem
from redlease._core.fair import REDISSON_FAIR
from redlease._core.keys import (
    CLASSIC,
    PUBLISH_COMMANDS,
    LeaseSemaphoreKeys,
    LockKeys,
    PubSub,
    SemaphoreKeys,
)
from redlease._core.requests import Call, Handed
from redlease._core.rwlock_redisson import RedissonRwKeys
from redlease._redis.connections import ANY_NODE, settle_pubsub
from redlease._shared.channels import (
    ABANDONED_KEPT,
    Abandoned,
    ChannelTable,
    Links,
    Lost,
    Orphan,
    Waiter,
)

from ._fakes import first_call
from .test_scripts import LUA_DIR, publish_argument

OWNER = "5f0c2a9e-client:7"

# --- the client's choice ----------------------------------------------------------------------


def test_pubsub_is_settled_once() -> None:
    mode = PubSub()
    assert not mode.settled and not mode.sharded
    assert mode.command == "publish"  # never used unsettled: the shell settles it first
    mode.settle(True)
    assert mode.settled and mode.sharded and mode.command == "spublish"
    mode.settle(False)  # waiters already listen the sharded way: the choice stays
    assert mode.command == "spublish"
    assert CLASSIC.settled and CLASSIC.command == "publish"
    CLASSIC.settle(True)
    assert CLASSIC.command == "publish"
    assert {PubSub(sharded=s).command for s in (True, False)} == set(PUBLISH_COMMANDS)


UNKNOWN = redis.ResponseError(
    "ERR Unknown subcommand or wrong number of arguments for 'SHARDNUMSUB'"
)
DOWN = redis.ConnectionError("Error 111 connecting to 127.0.0.1:7002. Connection refused.")
CLUSTER_DOWN = redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down")


@pytest.mark.parametrize(
    ("answers", "command"),
    [
        ([None, None, None], "spublish"),  # Redis/Valkey >= 7 on every master
        ([UNKNOWN, UNKNOWN, UNKNOWN], "publish"),  # Redis 6.2: the fallback
        ([None, UNKNOWN, None], "publish"),  # mid-upgrade: one master still on 6.2
        ([None, DOWN, None], "spublish"),  # a master down does not hold the others back
        ([DOWN, UNKNOWN, DOWN], "publish"),
        ([CLUSTER_DOWN, None, None], "spublish"),  # CLUSTERDOWN is an error reply, not a "no"
        ([redis.RedisClusterException("cannot be connected"), None], "spublish"),
    ],
)
def test_the_masters_answers_choose_the_pub_sub(answers, command, caplog) -> None:
    mode = PubSub()
    with caplog.at_level(logging.DEBUG, logger="redlease"):
        assert settle_pubsub(mode, answers, "cluster x") is None
    assert mode.settled and mode.command == command
    assert ("classic" if command == "publish" else "sharded") in caplog.text


def test_no_master_reached_settles_nothing() -> None:
    mode = PubSub()
    assert settle_pubsub(mode, [DOWN, DOWN], "cluster x") is DOWN
    assert not mode.settled  # asked again by the next operation


# --- the publish argument ---------------------------------------------------------------------

SHARDED = PubSub(sharded=True)


def _publishing_calls(mode: PubSub) -> Iterator[Call]:
    """Every call of a script that publishes, as the core builds it for keys of ``mode``."""
    keys = LockKeys.for_name("orders:42", mode)
    yield lock_core.release_call(keys, OWNER, 1, request_id="r", token=7, handover_ms=50)
    yield lock_core.leave_call(keys, OWNER, "w", "w30000")
    yield first_call(lock_core.force_release(keys))
    fair_keys = REDISSON_FAIR.keys("orders:42", mode)
    yield REDISSON_FAIR.release_call(fair_keys, OWNER, 1, request_id="r", token=7)
    yield REDISSON_FAIR.leave_call(fair_keys, OWNER, "w", None, "w30000")
    yield first_call(lock_core.force_release(fair_keys, REDISSON_FAIR))
    rw = rwlock.RwKeys.for_name("catalog", mode)
    assert rw.side_keys(rwlock.READ).pubsub is mode
    for side in (rwlock.READ, rwlock.WRITE):
        yield rwlock.release_call(rw, side, OWNER, 1, request_id="r", token=7)
        yield first_call(rwlock.force_release(rw, side))
    for side in (rwlock.READ, rwlock.WRITE):
        yield rwlock.leave_call(rw, side, OWNER, "w")
    redisson_rw = RedissonRwKeys.for_name("catalog", mode)
    for side in (rwlock.READ, rwlock.WRITE):
        yield redisson_rw.release_call(side, OWNER, 1, request_id="r", token=7)
        yield redisson_rw.force_release_call(side)
        leave = redisson_rw.leave_call(side, OWNER, "w")
        assert leave is not None
        yield leave
    s = SemaphoreKeys.for_name("jobs", mode)
    yield first_call(sem.try_set_permits(s, 2))
    yield first_call(sem.add_permits(s, 1))
    yield sem.release_call(s, 1, "r")
    yield sem.undo_call(s, 1, "r")
    ls = LeaseSemaphoreKeys.for_name("workers", mode)
    permit = lease_core.new_permit_id()
    yield first_call(lease_core.lease_try_set_permits(ls, 2))
    yield lease_core.lease_acquire_call(ls, OWNER, permit, 10.0, register=True)
    yield lease_core.lease_release_call(ls, permit, "r")
    yield lease_core.renew_call(ls, [permit, lease_core.new_permit_id()], 10.0)
    yield first_call(sem.set_permits(s, 3))
    yield first_call(lease_core.lease_add_permits(ls, -1))
    yield first_call(lease_core.lease_set_permits(ls, 3))
    yield lease_core.release_many_call(ls, [permit, lease_core.new_permit_id()], ["r1", "r2"])
    yield first_call(lease_core.update_lease(ls, permit, 10.0))
    layout = group.GroupLayout(group.value_fields(["a", "b"]))
    seats = layout.keys("seats", mode)
    yield layout.release_call(seats, OWNER, 1, request_id="r", token=7)
    yield layout.leave_call(seats, OWNER, "w", None, "")
    yield layout.force_release_call(seats)
    gate = latch.keys_for("gate", cluster=True, pubsub=mode)
    yield first_call(latch.try_set_count(gate, 2))
    yield first_call(latch.count_down(gate))
    yield first_call(latch.delete(gate))


@pytest.mark.parametrize("mode", [SHARDED, CLASSIC], ids=["sharded", "classic"])
def test_every_publishing_script_gets_the_clients_command(mode: PubSub) -> None:
    calls = list(_publishing_calls(mode))
    publishing = {
        p.stem for p in LUA_DIR.glob("*.lua") if publish_argument(p.read_text()) is not None
    }
    assert {c.script.name for c in calls} == publishing
    for call in calls:
        index = publish_argument(call.script.source.decode())
        assert index is not None
        assert call.args[index - 1] == mode.command, call.script.name


def test_keys_made_before_the_choice_publish_the_chosen_way() -> None:
    """A lock object made before the client's first operation: its keys follow the client."""
    mode = PubSub()
    keys = LockKeys.for_name("orders:42", mode)
    mode.settle(True)
    assert lock_core.leave_call(keys, OWNER, "w", "w30000").args[1] == "spublish"
    assert keys == LockKeys.for_name("orders:42")  # the mode is not part of the keys' identity


def test_scripts_that_do_not_publish_take_no_command() -> None:
    for script in scripts.ALL:
        if publish_argument(script.source.decode()) is None:
            assert script.name in {"lock_acquire", "lock_renew", "lock_status"} or (
                script.name.startswith("fenced_")
            )


# --- which connection each channel is on ------------------------------------------------------


def _table() -> tuple[ChannelTable, Links]:
    table = ChannelTable(threading.Event)
    return table, Links(table)


def _wait(table: ChannelTable, links: Links, channel: str) -> Waiter:
    waiter = Waiter(channel, OWNER, threading.Event())
    _, new = table.add(waiter)
    if new:
        links.want(channel)
    return waiter


def test_a_channel_is_placed_once_and_confirmed_on_its_link() -> None:
    table, links = _table()
    waiter = _wait(table, links, "a")
    _wait(table, links, "a")
    assert links.pending() == ["a"]
    links.place("a", "n1:7000")
    assert links.pending() == []
    assert not table.entries["a"].is_confirmed
    links.confirmed("n2:7001", "a")  # not the link it is placed on
    assert not table.entries["a"].is_confirmed
    links.confirmed("n1:7000", "a")
    assert table.entries["a"].is_confirmed
    assert not waiter.event.is_set()  # a first subscription wakes nobody
    assert links.idle() == []


def test_one_link_per_node_whatever_the_channels() -> None:
    table, links = _table()
    for i in range(100):
        _wait(table, links, f"c{i}")
        links.place(f"c{i}", f"node{i % 3}")
    assert set(links.channels) == {"node0", "node1", "node2"}
    assert sum(len(c) for c in links.channels.values()) == 100


def test_a_slot_moved_away_is_subscribed_again_and_its_waiters_recheck() -> None:
    """The server unsubscribes a sharded channel when its slot leaves the node: that channel is
    placed again, and once confirmed on the new master every waiter re-checks."""
    table, links = _table()
    waiters = [_wait(table, links, "a") for _ in range(3)]
    links.place("a", "old")
    links.confirmed("old", "a")
    assert links.unsubscribed("old", "a") is True
    assert not table.entries["a"].is_confirmed
    assert links.pending() == ["a"]
    links.place("a", "new")
    assert not any(w.event.is_set() for w in waiters)
    links.confirmed("new", "a")
    assert all(w.event.is_set() for w in waiters)
    assert links.channels["old"] == set() and "old" in links.idle()


def test_our_own_unsubscription_is_not_a_move() -> None:
    table, links = _table()
    waiter = _wait(table, links, "a")
    links.place("a", "n1")
    links.confirmed("n1", "a")
    table.remove(waiter, now=0.0)
    assert table.drop_idle(now=10.0, linger=2.0) == ["a"]
    assert links.drop("a") == "n1"
    assert links.idle() == []  # the unsubscription is not answered yet
    assert links.unsubscribed("n1", "a") is False
    assert links.pending() == [] and links.idle() == ["n1"]
    links.forget("n1")
    assert links.idle() == []


def test_an_error_reply_fails_the_oldest_command_of_its_link() -> None:
    """-MOVED answers the oldest unanswered command: that subscription is placed again."""
    table, links = _table()
    _wait(table, links, "a")
    _wait(table, links, "b")
    links.place("a", "n1")
    links.place("b", "n1")
    assert links.refused("n1") == "a"
    assert links.pending() == ["a"]
    links.confirmed("n1", "b")
    assert table.entries["b"].is_confirmed
    assert links.refused("n1") is None  # nothing left unanswered


def test_a_failed_link_gives_up_its_channels_and_forgets_idle_ones() -> None:
    table, links = _table()
    busy = _wait(table, links, "busy")
    idle = _wait(table, links, "idle")
    other = _wait(table, links, "other")
    for channel, link in (("busy", "n1"), ("idle", "n1"), ("other", "n2")):
        links.place(channel, link)
        links.confirmed(link, channel)
    table.remove(idle, now=0.0)
    assert links.lost("n1") == ["busy"]
    assert "idle" not in table.entries  # nobody waits there: not subscribed again
    assert links.pending() == ["busy"]
    assert table.entries["other"].is_confirmed
    links.place("busy", "n3")
    links.confirmed("n3", "busy")
    assert busy.event.is_set() and not other.event.is_set()


def test_classic_pub_sub_has_one_link() -> None:
    table, links = _table()
    for name in "abc":
        _wait(table, links, name)
        links.place(name, ANY_NODE)
    assert set(links.channels) == {ANY_NODE}
    assert sorted(links.lost(ANY_NODE)) == ["a", "b", "c"]
    assert links.pending() == ["a", "b", "c"]


def test_a_channel_nobody_waits_on_is_not_placed() -> None:
    table, links = _table()
    waiter = _wait(table, links, "a")
    table.remove(waiter, now=0.0)
    table.drop_idle(now=10.0, linger=2.0)
    assert links.pending() == []


def test_a_hand_over_message_reaches_only_its_waiter_with_the_grant() -> None:
    table, links = _table()
    first = _wait(table, links, "ch")
    second = Waiter("ch", "client-b:2", threading.Event())
    table.add(second)
    table.on_message("ch", "client-b:2 1700000000000123 1000 w7", 0.0)
    assert not first.event.is_set()
    assert second.woken(second.event.is_set()) == Handed(1700000000000123, 1000, "w7")
    assert second.woken(False) is False  # consumed
    table.on_message("ch", "client-b:2", 0.0)  # a reservation: a bare wake-up
    assert second.woken(second.event.is_set()) is True


# --- a turn that comes to a wait that is over (issue 31 item 3) --------------------------------

ME = "client-a"  # this client's id: its owners are "client-a:<n>"


class GivenBack:
    """A ``give_back`` that records what it was called with."""

    def __init__(self) -> None:
        self.calls: list[Handed | None] = []

    def __call__(self, handed: Handed | None) -> None:
        self.calls.append(handed)


def _abandon(
    table: ChannelTable, waiter: Waiter | None, channel: str, owner: str, wait: str
) -> tuple[Abandoned, GivenBack, Orphan | None]:
    given = GivenBack()
    record = Abandoned(channel, owner, wait, given)
    orphan, _ = table.abandon(record, waiter, now=0.0)
    return record, given, orphan


def _give_back(notices: list[Lost | Orphan]) -> None:
    for notice in notices:
        assert isinstance(notice, Orphan)
        notice.give_back()


def test_a_hand_over_to_an_abandoned_wait_is_given_back_once() -> None:
    """A lock handed to a wait of this client that is over (its leave may be lost): the
    table hands the grant back to be given back, once (a second copy finds nothing), and a
    grant for another wait id of that owner is not that wait's."""
    table = ChannelTable(threading.Event)
    t1 = Waiter("unlock", f"{ME}:1", threading.Event(), private="mine")
    t2 = Waiter("unlock", f"{ME}:2", threading.Event(), private="mine")
    table.add(t1)
    table.add(t2)
    _, given, orphan = _abandon(table, t1, "mine", f"{ME}:1", "w1")
    assert orphan is None and table.waiting("mine") == 1
    assert table.on_message("mine", f"{ME}:1 900 20000 w0", 0.0) == []  # another wait's
    notices = table.on_message("mine", f"{ME}:1 901 20000 w1", 0.0)
    _give_back(notices)
    assert given.calls == [Handed(901, 20000, "w1")]
    assert not t2.event.is_set()  # the live waiter of another owner is not woken by it
    assert table.on_message("mine", f"{ME}:1 901 20000 w1", 0.0) == []  # a second copy


def test_a_grant_for_an_owner_that_waits_again_is_that_waiters() -> None:
    """The owner of an abandoned wait waits again: a hand-over to the old wait wakes the new
    one (a hint: its next try takes over the hold made for the old wait), and nothing is
    given back, so no give-back can race the owner's new wait."""
    table = ChannelTable(threading.Event)
    old = Waiter("unlock", f"{ME}:1", threading.Event(), private="mine")
    table.add(old)
    _, given, _ = _abandon(table, old, "mine", f"{ME}:1", "w1")
    new = Waiter("unlock", f"{ME}:1", threading.Event(), private="mine")
    table.add(new)
    assert table.on_message("mine", f"{ME}:1 901 20000 w1", 0.0) == []
    assert new.woken(new.event.is_set()) == Handed(901, 20000, "w1")  # not its wait id
    assert given.calls == []


def test_a_hand_over_that_came_before_the_wait_ended_is_given_back_with_it() -> None:
    """A hand-over delivered while the wait was giving up (never taken) is given back as the
    wait is abandoned."""
    table = ChannelTable(threading.Event)
    waiter = Waiter("unlock", f"{ME}:1", threading.Event(), private="mine")
    table.add(waiter)
    table.on_message("mine", f"{ME}:1 901 20000 w1", 0.0)
    _, given, orphan = _abandon(table, waiter, "mine", f"{ME}:1", "w1")
    assert orphan is not None
    orphan.give_back()
    assert given.calls == [Handed(901, 20000, "w1")]


def test_a_confirmed_leave_forgets_the_place() -> None:
    table = ChannelTable(threading.Event)
    waiter = Waiter("unlock", f"{ME}:1", threading.Event(), private="mine")
    table.add(waiter)
    record, given, _ = _abandon(table, waiter, "mine", f"{ME}:1", "w1")
    assert table.drop_idle(now=100.0, linger=2.0) == ["unlock"]  # "mine" is kept
    table.left(record, now=100.0)
    assert table.on_message("mine", f"{ME}:1 901 20000 w1", 100.0) == []
    assert table.drop_idle(now=200.0, linger=2.0) == ["mine"]
    assert given.calls == []


def test_a_writer_named_or_a_zero_on_its_own_channel_gives_the_turn_back() -> None:
    """A read-write lock's release names the first writer (its owner field, no grant): for
    an abandoned writer of this client, the turn is given back (its leave again). Redisson's
    fair lock wakes the first waiter with "0" on that waiter's own channel: with nobody
    listening there any more, the same."""
    table = ChannelTable(threading.Event)
    writer = Waiter("rw", f"{ME}:1", threading.Event())
    other = Waiter("rw", f"{ME}:2", threading.Event())
    table.add(writer)
    table.add(other)
    _, given, _ = _abandon(table, writer, "rw", f"{ME}:1", "w1")
    assert table.on_message("rw", "client-b:9", 0.0) == []  # another client's writer
    _give_back(table.on_message("rw", f"{ME}:1", 0.0))
    assert given.calls == [None] and not other.event.is_set()

    fair = Waiter("redisson", f"{ME}:3", threading.Event(), private=f"redisson:{ME}:3")
    table.add(fair)
    _, given, _ = _abandon(table, fair, f"redisson:{ME}:3", f"{ME}:3", "w3")
    assert table.on_message("redisson", "0", 0.0) == []  # the lock's own channel: a hint
    _give_back(table.on_message(f"redisson:{ME}:3", "0", 0.0))
    assert given.calls == [None]


def test_a_wait_that_never_listened_is_listened_for() -> None:
    """A wait abandoned before its subscription was made (its link froze first) still has
    its place: its channel is new to the table, to be subscribed."""
    table = ChannelTable(threading.Event)
    given = GivenBack()
    orphan, new = table.abandon(Abandoned("mine", f"{ME}:1", "w1", given), None, now=0.0)
    assert orphan is None and new == ["mine"]
    _give_back(table.on_message("mine", f"{ME}:1 901 20000 w1", 0.0))
    assert given.calls == [Handed(901, 20000, "w1")]


def test_abandoned_places_are_bounded() -> None:
    table = ChannelTable(threading.Event)
    given = GivenBack()
    for i in range(ABANDONED_KEPT + 5):
        table.abandon(Abandoned("mine", f"{ME}:{i}", f"w{i}", given), None, now=0.0)
    assert table.on_message("mine", f"{ME}:0 901 20000 w0", 0.0) == []  # the oldest: forgotten
    last = ABANDONED_KEPT + 4
    assert len(table.on_message("mine", f"{ME}:{last} 902 20000 w{last}", 0.0)) == 1
