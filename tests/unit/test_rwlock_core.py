"""The read-write lock's pure core (rwlock.py): keys, calls, the acquire loop, renewal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redlease._core import rwlock as core
from redlease._core import scripts
from redlease._core.keys import hash_slot
from redlease._core.lock import Acquired, HoldTable, Status, to_ms
from redlease._core.requests import Call, Replication, Sleep, Subscribe, WaitWake
from redlease._core.watchdog import BATCH, OwnRenewalKeys, RenewalPolicy
from redlease.errors import (
    LeaseLostError,
    LockUpgradeError,
    ReplicaError,
    ServerUnavailableError,
)

from ._fakes import OWNER, FakeClock, Finished, finish, first_call, step
from .test_scripts import LUA_DIR, header_arity

KEYS = core.RwKeys.for_name("orders:42")
WAIT = "w"
READ, WRITE = core.READ, core.WRITE
GRANTED, HELD, LOST, UPGRADE = core.GRANTED, core.HELD, core.LOST, core.UPGRADE


# --- keys and scripts ----------------------------------------------------------------------


@given(st.text(st.characters(codec="utf-8", exclude_characters="{}"), min_size=1, max_size=20))
def test_every_key_shares_the_name_slot(name: str) -> None:
    for n in (name, f"{{{name}}}:x"):
        keys = core.RwKeys.for_name(n)
        slot = hash_slot(n)
        for key in (
            keys.writer,
            keys.readers,
            keys.leases,
            keys.tokens,
            keys.line,
            keys.places,
            keys.fence,
            keys.channel,
            keys.receipt(READ, OWNER),
            keys.receipt(WRITE, OWNER),
        ):
            assert hash_slot(key) == slot, key
        assert len({keys.writer, keys.readers, keys.leases, keys.tokens, keys.line}) == 5


def test_each_side_has_its_own_release_receipt() -> None:
    """A final release of one side must not hide a retried release of the other."""
    read, write = KEYS.receipt(READ, OWNER), KEYS.receipt(WRITE, OWNER)
    assert read != write
    assert KEYS.side_keys(READ).receipt(OWNER) == read
    assert KEYS.side_keys(WRITE).receipt(OWNER) == write
    for side, receipt in ((READ, read), (WRITE, write)):
        call = core.release_call(KEYS, side, OWNER, 1, request_id="r", token=7)
        assert call.keys[-1] == receipt


def test_side_keys_label_the_holds_and_renew_with_rw_renew() -> None:
    read, write = KEYS.side_keys(READ), KEYS.side_keys(WRITE)
    assert (read.name, write.name) == ("orders:42 (read)", "orders:42 (write)")
    assert isinstance(read, OwnRenewalKeys) and read != write
    assert read == KEYS.side_keys(READ) and hash(read) == hash(KEYS.side_keys(READ))
    call = read.renew_call(["a:1", "b:2"], 30_000, None, tokens=[7, 8])
    assert call.script is core.RW_RENEW
    assert call.keys == (KEYS.writer, KEYS.readers, KEYS.leases, KEYS.tokens)
    assert call.args == (30_000, READ, "a:1", "b:2", 7, 8)  # each owner's token after them


def test_every_rw_script_is_loaded_once() -> None:
    names = sorted(s.name for s in core.SCRIPTS)
    assert names == sorted(p.stem for p in LUA_DIR.glob("rw_*.lua"))
    assert not {s.name for s in scripts.ALL} & set(names)


def _calls() -> list[tuple[Call, int]]:
    """Every kind of call the core builds, with the number of holds it is about."""
    out: list[tuple[Call, int]] = []
    for side in core.SIDES:
        for join_line in (False, True):
            call = core.acquire_call(KEYS, side, OWNER, 0, 30.0, join_line, WAIT)
            out.append((call, 1))
            assert call.undo is not None
            undo = call.undo([GRANTED, 1, 30000, 5])
            assert undo is not None
            out.append((undo, 1))
        reentry = core.acquire_call(KEYS, side, OWNER, 1, 30.0, False, WAIT, token=5)
        out.append((reentry, 1))
        assert reentry.undo is not None
        undo = reentry.undo([GRANTED, 2, 30000, 5])
        assert undo is not None
        out.append((undo, 1))
        out.append((core.leave_call(KEYS, side, OWNER, WAIT), 1))
        out.append((core.release_call(KEYS, side, OWNER, 2, request_id="r", token=5), 1))
        out.append((first_call(core.force_release(KEYS, side)), 1))
        for n in (1, 3):
            renew = KEYS.side_keys(side).renew_call(
                [f"o:{i}" for i in range(n)], 9000, None, tokens=list(range(1, n + 1))
            )
            out.append((renew, n))
    out.append((first_call(core.status(KEYS, OWNER)), 1))
    return out


def test_calls_cover_every_script() -> None:
    assert {c.script.name for c, _ in _calls()} == {s.name for s in core.SCRIPTS}


@pytest.mark.parametrize(("call", "n"), _calls(), ids=lambda v: getattr(v, "script", v))
def test_calls_match_the_script_headers(call: Call, n: int) -> None:
    assert header_arity(call.script.name, n) == (len(call.keys), len(call.args))
    assert all(isinstance(k, str) and k for k in call.keys)
    assert all(isinstance(a, str | int) and not isinstance(a, bool) for a in call.args)


def test_receipt_and_place_constants_match_the_scripts() -> None:
    for script in (core.RW_READ_RELEASE, core.RW_WRITE_RELEASE):
        assert f"'px', {core.RECEIPT_MS})" in script.source.decode()
    assert core.PLACE_MS == 4 * core.RECHECK * 1000
    assert Path(LUA_DIR / "rw_write_acquire.lua").read_text().count("join_line()") >= 3


def test_acquire_call_undo_gives_back_only_a_new_grant() -> None:
    call = core.acquire_call(KEYS, WRITE, OWNER, 2, 30.0, True, WAIT, token=5)
    assert call.args[-2:] == (WAIT, 5)  # the token of the hold the re-entry joins
    assert call.undo is not None
    undo = call.undo([GRANTED, 3, 30000, 5])
    assert undo is not None and undo.script is core.RW_WRITE_RELEASE
    assert undo.args[:2] == (OWNER, 3) and undo.args[-1] == 5  # that hold's token
    assert call.undo([GRANTED, 2, 30000, 5]) is None  # not ours: nothing to give back
    assert call.undo([HELD, 0, 100, 0]) is None


@pytest.mark.parametrize("side", core.SIDES)
def test_a_first_grants_undo_gives_back_by_the_calls_wait_id(side: str) -> None:
    """Not by count: a give-back delivered late must not free a hold that a later call of
    the same owner was granted meanwhile (the script frees only a hold made for the call)."""
    call = core.acquire_call(KEYS, side, OWNER, 0, 30.0, True, WAIT)
    assert call.args[-2:] == (WAIT, 0)
    assert call.undo is not None
    undo = call.undo([GRANTED, 1, 30000, 5])
    assert undo == core.leave_call(KEYS, side, OWNER, WAIT)
    assert undo is not None and undo.args == (OWNER, "publish", side, WAIT)
    assert call.undo([HELD, 0, 100, 0]) is None
    assert call.undo([LOST, 2, 0, 0]) is None


# --- the acquire loop ------------------------------------------------------------------------


def start(
    clock: FakeClock,
    side: str = READ,
    *,
    held: int = 0,
    lease: float = 30.0,
    blocking: bool = True,
    timeout: float | None = None,
    token: int = 0,
) -> tuple[Any, Any]:
    op = core.acquire(
        KEYS,
        side,
        OWNER,
        held=held,
        lease=lease,
        blocking=blocking,
        timeout=timeout,
        wait_id=WAIT,
        token=token,
        clock=clock,
    )
    first = step(op, first=True)
    if blocking:  # listens first, if its client already does (here: not)
        leave = core.leave_call(KEYS, side, OWNER, WAIT)  # gives back a hold made for the call
        wait = WAIT if side == WRITE else ""  # (only a writer has a place in line)
        assert first == Subscribe(KEYS.channel, OWNER, leave, only_if_live=True, wait=wait)
        first = step(op, False)
    return op, first


def assert_acquire(
    call: Any, side: str, *, held: int = 0, join_line: bool = True, token: int = 0
) -> None:
    assert isinstance(call, Call)
    expected = core.acquire_call(KEYS, side, OWNER, held, 30.0, join_line, WAIT, token=token)
    assert (call.script, call.keys, call.args) == (expected.script, expected.keys, expected.args)


def test_the_server_decides_an_upgrade() -> None:
    """No local read count is trusted (a read hold may be gone on the server): the write
    acquire is sent, and the server's UPGRADE raises at once."""
    op, call = start(FakeClock(), WRITE)
    assert_acquire(call, WRITE)
    with pytest.raises(LockUpgradeError) as info:
        op.send([UPGRADE, 0, 0, 0])
    assert info.value.name == "orders:42 (write)" and info.value.owner == OWNER


def test_granted_on_first_try() -> None:
    clock = FakeClock(100.0)
    op, call = start(clock, READ)
    assert_acquire(call, READ)
    clock.advance(0.01)
    assert finish(op, [GRANTED, 1, 30000, 77]) == Acquired(1, 30.0, 100.0, 77)


def test_held_subscribes_retries_then_waits_bounded_by_the_hint() -> None:
    clock = FakeClock()
    op, _ = start(clock, WRITE, timeout=None)
    assert step(op, [HELD, 0, 600, 0]) == Subscribe(
        KEYS.channel, OWNER, core.leave_call(KEYS, WRITE, OWNER, WAIT), wait=WAIT
    )
    assert_acquire(step(op, None), WRITE)  # at once after subscribing
    assert step(op, [HELD, 0, 600, 0]) == WaitWake(0.6)  # the blocking holder's lease
    assert_acquire(step(op, True), WRITE)
    assert step(op, [HELD, 0, -1, 0]) == WaitWake(core.RECHECK)  # a writer ahead in line
    assert_acquire(step(op, False), WRITE)
    assert step(op, [HELD, 0, 60_000, 0]) == WaitWake(core.RECHECK)
    assert_acquire(step(op, True), WRITE)
    assert finish(op, [GRANTED, 1, 30000, 5]).count == 1


def test_a_writer_that_runs_out_of_time_leaves_the_line_a_reader_has_none() -> None:
    for side in core.SIDES:
        clock = FakeClock()
        op, _ = start(clock, side, timeout=1.0)
        step(op, [HELD, 0, 5000, 0])  # Subscribe
        step(op, None)
        clock.advance(0.25)
        assert step(op, [HELD, 0, 5000, 0]) == WaitWake(0.75)
        clock.advance(0.75)
        step(op, False)
        if side == WRITE:
            assert step(op, [HELD, 0, 5000, 0]) == core.leave_call(KEYS, WRITE, OWNER, WAIT)
            assert finish(op, 0) is None
        else:
            assert finish(op, [HELD, 0, 5000, 0]) is None


def test_non_blocking_tries_once_and_does_not_queue() -> None:
    op, call = start(FakeClock(), WRITE, blocking=False)
    assert_acquire(call, WRITE, join_line=False)
    assert finish(op, [HELD, 0, 5000, 0]) is None


@pytest.mark.parametrize("side", core.SIDES)
def test_a_gone_hold_is_taken_afresh_from_the_servers_count(side: str) -> None:
    """A re-entry that finds the owner's hold gone (an explicit lease ran out, a force
    release, or a hold of the owner field with another token: a stale copy after a failover)
    goes on as a first acquire at once, as Redisson does, instead of raising."""
    op, first = start(FakeClock(), side, held=2, token=7)
    assert_acquire(first, side, held=2, token=7)  # joins only the hold with the owner's token
    assert_acquire(step(op, [LOST, 0, 0, 0]), side, held=0)
    assert finish(op, [GRANTED, 1, 30000, 9]) == Acquired(1, 30.0, 1000.0, 9)
    # non-blocking, and another owner writes meanwhile: not acquired
    op, _ = start(FakeClock(), side, held=1, blocking=False, token=7)
    assert_acquire(step(op, [LOST, 0, 0, 0]), side, held=0, join_line=False)
    assert finish(op, [HELD, 0, 1000, 0]) is None


def test_following_the_servers_count_is_bounded() -> None:
    op, _ = start(FakeClock(), READ, held=3, blocking=False, token=7)
    for count in (2, 1, 0):
        # the same hold (its token) while it has a count; a first acquire once it is gone
        token = 7 if count else 0
        assert_acquire(
            step(op, [LOST, count, 0, 0]), READ, held=count, join_line=False, token=token
        )
    with pytest.raises(LeaseLostError) as info:
        op.send([LOST, 5, 0, 0])
    assert info.value.name == "orders:42 (read)" and info.value.owner == OWNER


def test_a_late_grant_is_given_back_and_the_wait_goes_on() -> None:
    clock = FakeClock()
    op, _ = start(clock, READ, lease=1.0)
    clock.advance(0.995)  # less than the drift allowance (12 ms) left
    back = step(op, [GRANTED, 1, 1000, 5])
    assert isinstance(back, Call) and back.script is core.RW_READ_RELEASE
    assert back.args[:2] == (OWNER, 1) and back.args[-1] == 5  # the grant's token
    assert isinstance(step(op, [core.RELEASED, 0]), Subscribe)


def test_a_grant_without_enough_replicas_is_given_back() -> None:
    op, _ = start(FakeClock(), WRITE)
    error = ReplicaError("short", name="x", required=1, acked=0, reply=[GRANTED, 1, 30000, 5])
    back = op.throw(error)
    assert isinstance(back, Call) and back.script is core.RW_WRITE_RELEASE
    assert back.args[:2] == (OWNER, 1) and back.args[-1] == 5  # the grant's token
    with pytest.raises(ReplicaError):
        op.send([core.RELEASED, 0])


def test_an_outage_is_ridden_out_only_once_listening() -> None:
    op, _ = start(FakeClock(), READ)
    # not yet listening: tell the caller, after giving back what may have been granted: a
    # first hold made for this very call (by its wait id), never a later call's
    give_back = op.throw(ServerUnavailableError("down"))
    assert give_back == core.leave_call(KEYS, READ, OWNER, WAIT)
    with pytest.raises(ServerUnavailableError):
        op.throw(ServerUnavailableError("still down"))
    clock = FakeClock()
    op, _ = start(clock, READ)
    step(op, [HELD, 0, 5000, 0])  # Subscribe
    step(op, None)
    assert isinstance(op.throw(ServerUnavailableError("down")), Sleep)
    clock.advance(11.0)
    assert_acquire(step(op, None), READ)
    give_back = op.throw(ServerUnavailableError("still down"))
    assert give_back == core.leave_call(KEYS, READ, OWNER, WAIT)
    with pytest.raises(ServerUnavailableError):
        op.send(0)  # nothing to give back


reply_st = st.one_of(
    st.tuples(st.just(HELD), st.integers(-1, 60_000)),
    st.tuples(st.just(GRANTED), st.just(30_000)),
)


@settings(max_examples=200)
@given(
    side=st.sampled_from(core.SIDES),
    timeout=st.one_of(st.none(), st.floats(0.05, 20.0)),
    replies=st.lists(st.tuples(reply_st, st.floats(0.0, 3.0)), max_size=40),
)
def test_waits_are_bounded_and_giving_up_leaves_the_line(
    side: str, timeout: float | None, replies: list[tuple[tuple[int, int], float]]
) -> None:
    """Whatever the server answers and however long each wait lasts: no wait is longer than
    RECHECK or the time left, the op ends once its timeout ran out, and a writer that gives up
    leaves the line exactly once."""
    clock = FakeClock()
    start_at = clock.now
    op, request = start(clock, side, timeout=timeout)
    leaves = 0
    acquire_scripts = (core.RW_READ_ACQUIRE, core.RW_WRITE_ACQUIRE)
    # then the server keeps answering HELD (a timeout runs out) or grants (no timeout)
    tail = [((HELD, -1), 3.0)] * 20 if timeout is not None else [((GRANTED, 30_000), 0.0)]
    try:
        for (code, ms), spent in [*replies, *tail]:
            while not (isinstance(request, Call) and request.script in acquire_scripts):
                if isinstance(request, WaitWake):
                    assert 0 <= request.timeout <= core.RECHECK
                    if timeout is not None:
                        assert clock.now + request.timeout <= start_at + timeout + 1e-9
                    clock.advance(min(spent, request.timeout))
                    request = step(op, spent < request.timeout)
                elif request == core.leave_call(KEYS, WRITE, OWNER, WAIT):
                    leaves += 1
                    request = step(op, 0)
                else:
                    request = step(op, None)  # Subscribe
            request = step(op, [code, 1 if code == GRANTED else 0, ms, 9])
        raise AssertionError("the operation never ended")
    except Finished as done:
        result = done.value
    if result is None:
        assert timeout is not None and clock.now >= start_at + timeout - 1e-9
        assert leaves == (1 if side == WRITE else 0)
    else:
        assert result.count == 1 and leaves == 0


def test_release_returns_what_remains_or_raises_lease_lost() -> None:
    op = core.release(KEYS, WRITE, OWNER, held=2, request_id="r", token=7)
    call = next(op)
    assert call == core.release_call(KEYS, WRITE, OWNER, 2, request_id="r", token=7)
    assert call.args == (OWNER, 2, "r", "publish", 0, 7)  # acts only on the hold with token 7
    assert finish(op, [core.RELEASED, 1]) == 1
    # a re-entry whose outcome is unknown: the script may drop one hold more
    op = core.release(KEYS, READ, OWNER, held=2, request_id="r", token=7, unsure=True)
    assert first_call(op).args == (OWNER, 2, "r", "publish", 1, 7)
    op = core.release(KEYS, READ, OWNER, held=1, request_id="r", token=7)
    next(op)
    with pytest.raises(LeaseLostError):
        op.send([LOST, 0])


# --- status ----------------------------------------------------------------------------------


def test_status_is_parsed_and_split_by_side() -> None:
    reply = [b"w:1", 2, 4500, 11, 3, 22, 8000, b"w:1", 1, b"r:9", 4]
    status = core.parse_status(reply)
    assert status == core.RwStatus(
        writer="w:1",
        write_count=2,
        write_ttl=4.5,
        write_token=11,
        readers={"w:1": 1, "r:9": 4},
        read_ttl=8.0,
        read_token=22,
        waiters=3,
    )
    assert status.side(WRITE) == Status(ttl=4.5, holders={"w:1": 2}, waiters=3, token=11)
    assert status.side(READ) == Status(ttl=8.0, holders={"w:1": 1, "r:9": 4}, waiters=3, token=22)
    free = core.parse_status([b"", 0, -2, 0, 0, 0, -2])
    assert free.writer is None and free.readers == {} and free.read_token is None
    assert not free.side(WRITE).locked and not free.side(READ).locked


# --- renewal by the client's one watchdog ----------------------------------------------------


def _hold(table: HoldTable, keys: Any, owner: str) -> Any:
    return table.granted(keys, owner, Acquired(1, 30.0, 0.0, 1), None)


@given(
    plain=st.integers(0, 5),
    per_side=st.lists(st.integers(0, BATCH + 3), min_size=4, max_size=4),
)
@settings(max_examples=30)
def test_watchdog_renews_rw_holds_with_their_own_script(plain: int, per_side: list[int]) -> None:
    from redlease._core.keys import LockKeys

    table = HoldTable()
    plain_holds = [_hold(table, LockKeys.for_name(f"lock-{i}"), "o:1") for i in range(plain)]
    sides = [core.RwKeys.for_name(n).side_keys(s) for n in ("a", "b") for s in core.SIDES]
    rw_holds = [
        _hold(table, keys, f"o:{i}")
        for keys, n in zip(sides, per_side, strict=True)
        for i in range(n)
    ]
    replication = Replication(1, 100)
    for hold in rw_holds[::2]:
        hold.replication = replication
    policy = RenewalPolicy(30.0)
    calls = policy.calls([*plain_holds, *rw_holds])
    plain_calls = [(b, c) for b, c in calls if c.script is scripts.LOCK_RENEW]
    assert plain_calls == policy.calls(plain_holds)  # exactly as without them
    renewed: list[Any] = []
    for batch, call in calls:
        if call.script is scripts.LOCK_RENEW:
            continue
        assert call.script is core.RW_RENEW and 1 <= len(batch) <= BATCH
        keys = batch[0].keys
        assert isinstance(keys, core.SideKeys)
        assert all(h.keys == keys and h.replication == batch[0].replication for h in batch)
        assert call.replication == batch[0].replication
        assert call.args == (
            to_ms(30.0),
            keys.side,
            *(h.owner for h in batch),
            *(h.token for h in batch),  # each hold's own token
        )
        renewed.extend(batch)
    assert sorted(map(id, renewed)) == sorted(map(id, rw_holds))


# --- Redisson's layout ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "channel", "hold"),
    [
        ("cat", "redisson_rwlock:{cat}", "{cat}:o:1:rwlock_timeout:2"),
        ("{cat}:7", "redisson_rwlock:{cat}:7", "{cat}:7:o:1:rwlock_timeout:2"),
    ],
)
def test_redisson_layout_names_keys_as_redisson_does(name: str, channel: str, hold: str) -> None:
    from redlease._core.keys import hash_slot
    from redlease._core.rwlock_redisson import RedissonRwKeys

    keys = RedissonRwKeys.for_name(name)
    assert keys.channel == channel
    assert keys.hold_key("o:1", 2) == hold
    for key in (keys.channel, hold, keys.fence, keys.tokens, keys.receipt(WRITE, "o:1")):
        assert hash_slot(key) == hash_slot(name)
    read = keys.acquire_call(READ, "o:1", 1, 30.0, True, WAIT, token=5)
    assert read.keys[:2] == (name, hold)  # the new hold's lease key: count + 1
    assert read.args[3:] == ("o:1:write", WAIT, 5)
    write = keys.acquire_call(WRITE, "o:1", 0, 30.0, True, WAIT)
    assert write.args[1] == "o:1:write" and write.args[4:] == (WAIT, 0)
    for side in core.SIDES:  # no line in Redisson's layout: only a hold to give back
        assert keys.leave_call(side, "o:1", WAIT, give_back=False) is None
        leave = keys.leave_call(side, "o:1", WAIT)
        assert leave is not None and leave.keys == (name, channel, keys.tokens, keys.hold_prefix)
        assert leave.args == (keys.field(side, "o:1"), side, "publish", WAIT)


def test_redisson_layout_status_reads_the_hash() -> None:
    from redlease._core.rwlock_redisson import RedissonRwKeys

    keys = RedissonRwKeys.for_name("cat")
    reply = [
        1500,
        b"mode",
        b"write",
        b"w:1:write",
        b"2",
        b"w:1",
        b"1",
        b"tokens",
        b"w:1:write",
        b"7",
    ]
    status = keys.parse_status("w:1", reply)
    assert (status.writer, status.write_count, status.write_token) == ("w:1", 2, 7)
    assert status.readers == {"w:1": 1} and status.read_ttl == status.write_ttl == 1.5
    free = keys.parse_status("w:1", [-2, b"tokens"])
    assert free.writer is None and not free.readers and free.write_ttl is None


def _redisson_calls() -> list[tuple[Call, int]]:
    """Every kind of call the Redisson layout builds, with the number of holds it is about."""
    from redlease._core.rwlock_redisson import RedissonRwKeys

    keys = RedissonRwKeys.for_name("orders:42")
    out: list[tuple[Call, int]] = []
    for side in core.SIDES:
        for held in (0, 1):
            call = keys.acquire_call(side, OWNER, held, 30.0, True, WAIT, token=5 if held else 0)
            out.append((call, 1))
            assert call.undo is not None
            undo = call.undo([GRANTED, held + 1, 30000, 5])
            assert undo is not None
            out.append((undo, 1))
        leave = keys.leave_call(side, OWNER, WAIT)
        assert leave is not None
        out.append((leave, 1))
        release = keys.release_call(side, OWNER, 2, request_id="r", token=5)
        assert release.args[-1] == 5
        out.append((release, 1))
        out.append((keys.force_release_call(side), 1))
        for n in (1, 3):
            renew = keys.side_keys(side).renew_call(
                [f"o:{i}" for i in range(n)], 9000, None, tokens=list(range(1, n + 1))
            )
            fields = tuple(keys.field(side, f"o:{i}") for i in range(n))
            assert renew.args == (9000, side, *fields, *range(1, n + 1))
            out.append((renew, n))
    out.append((keys.status_call(OWNER), 1))
    return out


def test_redisson_layout_calls_cover_every_script() -> None:
    from redlease._core import rwlock_redisson

    names = sorted(s.name for s in rwlock_redisson.SCRIPTS)
    assert names == sorted(p.stem for p in LUA_DIR.glob("redisson_rw_*.lua"))
    assert {c.script.name for c, _ in _redisson_calls()} == set(names)


@pytest.mark.parametrize(("call", "n"), _redisson_calls(), ids=lambda v: getattr(v, "script", v))
def test_redisson_layout_calls_match_the_script_headers(call: Call, n: int) -> None:
    assert header_arity(call.script.name, n) == (len(call.keys), len(call.args))
    assert all(isinstance(k, str) and k for k in call.keys)
    assert all(isinstance(a, str | int) and not isinstance(a, bool) for a in call.args)
    assert len({hash_slot(k) for k in call.keys}) == 1


def test_redisson_layout_first_grants_undo_gives_back_by_the_calls_wait_id() -> None:
    from redlease._core.rwlock_redisson import LEAVE, WRITE_RELEASE, RedissonRwKeys

    keys = RedissonRwKeys.for_name("orders:42")
    for side in core.SIDES:
        undo = keys.acquire_call(side, OWNER, 0, 30.0, True, WAIT).undo
        assert undo is not None
        back = undo([GRANTED, 1, 30000, 5])
        assert back is not None and back.script is LEAVE and back.args[-1] == WAIT
        assert undo([HELD, 0, 100, 0]) is None
    reentry = keys.acquire_call(WRITE, OWNER, 1, 30.0, True, WAIT, token=5).undo
    assert reentry is not None
    back = reentry([GRANTED, 2, 30000, 5])
    assert back is not None and back.script is WRITE_RELEASE and back.args[1] == 2
    assert back.args[-1] == 5  # the token of the hold the re-entry joined


@pytest.mark.parametrize("side", core.SIDES)
def test_a_grant_is_trusted_only_for_the_lease_left_on_the_server(side: str) -> None:
    """A retry that finds its own grant (its first reply was lost) answers the TTL left on
    the key, shorter than the lease asked for: the caller believes no more than that, and a
    grant with less left than the time its request took is given back, not reported."""
    clock = FakeClock(100.0)
    op, _ = start(clock, side, blocking=False)
    clock.advance(0.01)
    assert finish(op, [GRANTED, 1, 3000, 7]) == Acquired(1, 3.0, 100.0, 7)
    clock = FakeClock(100.0)
    op, _ = start(clock, side, blocking=False)
    clock.advance(2.99)  # the 30 s asked for would be left; the 3 s on the server are not
    back = step(op, [GRANTED, 1, 3000, 7])
    assert isinstance(back, Call) and back.args[:2] == (OWNER, 1) and back.args[-1] == 7
    assert finish(op, [core.RELEASED, 0]) is None
