"""The fair lock in Redisson's RedissonFairLock layout (``_core/fair.py``): its keys, the calls
the lock's core builds with it (the scripts' interfaces), and the core's acquire loop driven
by hand with that layout (no server)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from redlease._core import fair, lock, scripts
from redlease._core.keys import LockKeys, PubSub, hash_slot
from redlease._core.lock import RECEIPT_MS, Acquired, HoldTable
from redlease._core.requests import Call, Subscribe, WaitWake
from redlease._core.watchdog import RenewalPolicy
from redlease._shared.lockbase import fair_layout
from redlease.errors import InvalidArgumentError, LeaseLostError

from ._fakes import FakeClock, finish, step
from .test_scripts import _redis_calls, header_arity, publish_argument

OWNER = "5f0c2a9e-0000-4000-8000-000000000000:7"
LAYOUT = fair.REDISSON_FAIR
KEYS = LAYOUT.keys("orders:42", PubSub(sharded=False))
LUA_DIR = Path(str(resources.files("redlease").joinpath("lua")))


# --- keys and layout ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "queue", "timeouts", "channel"),
    [
        (
            "orders:42",
            "redisson_lock_queue:{orders:42}",
            "redisson_lock_timeout:{orders:42}",
            "redisson_lock__channel:{orders:42}",
        ),
        (  # a name with braces of its own keeps them (Redisson's prefixName)
            "{user:7}:slot",
            "redisson_lock_queue:{user:7}:slot",
            "redisson_lock_timeout:{user:7}:slot",
            "redisson_lock__channel:{user:7}:slot",
        ),
    ],
)
def test_redisson_names_and_one_hash_slot(name, queue, timeouts, channel) -> None:
    keys = LAYOUT.keys(name, PubSub(sharded=True))
    assert isinstance(keys, fair.RedissonFairKeys)
    assert (keys.name, keys.line, keys.places, keys.channel) == (name, queue, timeouts, channel)
    plain = LockKeys.for_name(name)
    assert (keys.fence, keys.receipt(OWNER)) == (plain.fence, plain.receipt(OWNER))
    assert LAYOUT.listen(keys, OWNER) == (channel, f"{channel}:{OWNER}")  # Redisson's own
    slots = {hash_slot(k) for k in (name, queue, timeouts, channel, keys.fence, f"{channel}:x")}
    assert slots == {hash_slot(name)}


def test_layout_by_name() -> None:
    assert fair_layout("redisson") is fair.REDISSON_FAIR
    assert fair_layout("redlease") is lock.REDLEASE
    for bad in ("Redisson", "java", "", None, 1):
        with pytest.raises(InvalidArgumentError, match=repr(bad)):
            fair_layout(bad)


def test_wait_is_redissons() -> None:
    assert fair.wait_ms(None) == fair.THREAD_WAIT_MS == 300_000
    assert fair.wait_ms(2.5) == 2500
    assert fair.wait_ms(0.0001) == 1
    assert fair.wait_ms(1e30) == fair.wait_ms(1.7e308) == fair.MAX_WAIT_MS


# --- the scripts and their calls ------------------------------------------------------------


def _calls() -> list[Call]:
    acquire = LAYOUT.acquire_call(
        KEYS,
        OWNER,
        held=0,
        lease=30.0,
        join_line=True,
        wait_id="w",
        timeout=None,
        fair=True,
        handover=True,
    )
    assert acquire.undo is not None
    undo = acquire.undo([1, 1, 30000, 5])
    assert undo is not None
    reentry = LAYOUT.acquire_call(
        KEYS,
        OWNER,
        held=1,
        lease=30.0,
        join_line=False,
        wait_id="w",
        timeout=None,
        fair=True,
        handover=True,
        token=7,
    )
    return [
        acquire,
        undo,
        LAYOUT.release_call(KEYS, OWNER, 2, request_id="r", token=7, unsure=True),
        LAYOUT.leave_call(KEYS, OWNER, "w", 3.0, "3000"),
        LAYOUT.force_release_call(KEYS),
        LAYOUT.status_call(KEYS),
        reentry,
    ]


def test_every_redisson_fair_lua_file_is_a_loaded_script() -> None:
    names = sorted(s.name for s in fair.SCRIPTS)
    assert names == sorted(p.stem for p in LUA_DIR.glob("redisson_fair_*.lua"))
    assert {c.script.name for c in _calls()} == {*names, "lock_status"}
    assert not {s.name for s in scripts.ALL} & set(names)


@pytest.mark.parametrize("call", _calls(), ids=lambda c: c.script.name)
def test_calls_match_the_script_headers(call: Call) -> None:
    assert header_arity(call.script.name, 1) == (len(call.keys), len(call.args))
    assert all(isinstance(k, str) and k for k in call.keys)
    assert all(isinstance(a, str | int) and not isinstance(a, bool) for a in call.args)
    assert len({hash_slot(k) for k in call.keys}) == 1
    index = publish_argument(call.script.source.decode())
    if index is not None:
        assert call.args[index - 1] == "publish"


def test_the_calls_arguments() -> None:
    acquire, undo, release, leave, force, status, reentry = _calls()
    assert acquire.keys == (KEYS.name, KEYS.line, KEYS.places, KEYS.fence)
    assert acquire.args == (30000, OWNER, 0, fair.THREAD_WAIT_MS, 1, "w", 0)
    # a re-entry joins only the hold with the owner's token
    assert reentry.args == (30000, OWNER, 1, fair.THREAD_WAIT_MS, 0, "w", 7)
    # a first hold goes back by its call's wait id, never a later call's hold of the owner
    assert undo.script is fair.REDISSON_FAIR_LEAVE and undo.args == (OWNER, 300_000, "publish", "w")
    assert release.keys == (
        KEYS.name,
        KEYS.line,
        KEYS.places,
        KEYS.channel,
        KEYS.receipt(OWNER),
    )
    assert release.args == (OWNER, 2, "r", "publish", 1, 7)  # acts only on the hold with 7
    assert leave.keys == (KEYS.name, KEYS.line, KEYS.places, KEYS.channel)
    assert leave.args == (OWNER, 3000, "publish", "w")  # the same wait as its acquire's
    assert force.args == ("publish", "redlease:holder:{orders:42}:")  # holders are told
    assert status.script is scripts.LOCK_STATUS and status.keys == (KEYS.name, KEYS.places)
    sharded = LAYOUT.keys("orders:42", PubSub(sharded=True))
    assert LAYOUT.release_call(sharded, OWNER, 1, request_id="r", token=7).args[3] == "spublish"
    assert LAYOUT.leave_call(sharded, OWNER, "w", None, "w30000").args == (
        OWNER,
        fair.THREAD_WAIT_MS,
        "spublish",
        "w",
    )


def test_a_grants_undo_only_takes_back_a_counted_grant() -> None:
    acquire = _calls()[0]
    assert acquire.undo is not None
    assert acquire.undo([0, 0, 5000, 3]) is None
    assert acquire.undo([-1, 2, 5000, 0]) is None
    reentry = LAYOUT.acquire_call(
        KEYS,
        OWNER,
        held=1,
        lease=30.0,
        join_line=False,
        wait_id="w",
        timeout=None,
        fair=True,
        handover=True,
        token=5,
    )
    assert reentry.undo is not None
    back = reentry.undo([1, 2, 30000, 5])  # a re-entry's hold goes back by its count
    assert back is not None and back.script is fair.REDISSON_FAIR_RELEASE
    assert back.args[:2] == (OWNER, 2) and back.args[-1] == 5  # and the hold's token
    assert reentry.undo([1, 1, 30000, 5]) is None


def test_receipt_lifetime_matches_the_core_constant() -> None:
    assert f"'px', {RECEIPT_MS})" in fair.REDISSON_FAIR_RELEASE.source.decode()


@pytest.mark.parametrize("script", fair.SCRIPTS, ids=lambda s: s.name)
def test_the_one_built_name_is_the_first_waiters_channel(script: scripts.Script) -> None:
    """Built names are channels only: the first waiter's (Redisson's), and, for a force
    release, each holder's client's own channel (redlease's, from the prefix given)."""
    calls = _redis_calls(script.source.decode())
    built = [args[0] for _, args in calls if args and ".." in args[0]]
    publishes = [args[0] for command, args in calls if command.startswith("argv[")]
    assert set(built) <= {"KEYS[4] .. ':' .. head", "ARGV[2] .. client"}
    assert built == publishes  # only a publish builds a name, and every publish does


def test_the_watchdog_renews_a_redisson_fair_hold_with_the_plain_renewal() -> None:
    """Redisson's own watchdog renews a fair lock's hold as an RLock's (the same hash)."""
    table = HoldTable()
    hold = table.granted(KEYS, OWNER, Acquired(count=1, ttl=30.0, requested_at=0.0, token=1), None)
    ((batch, call),) = RenewalPolicy(30.0).calls([hold])
    assert batch == [hold]
    assert call.script is scripts.LOCK_RENEW and call.keys == (KEYS.name, KEYS.fence)
    assert call.args == (30000, OWNER, 1)  # the owner field, then its token


# --- the core's loop with this layout -------------------------------------------------------


def _start(clock: FakeClock, **kw: object):
    args: dict[str, object] = {
        "held": 0,
        "lease": 30.0,
        "blocking": True,
        "timeout": 10.0,
        "wait_id": "w",
        "clock": clock,
        "fair": True,
        "handover": True,
        "layout": LAYOUT,
    }
    args.update(kw)
    op = lock.acquire(KEYS, OWNER, **args)  # type: ignore[arg-type]
    return op, step(op, first=True)


def test_a_waiter_listens_on_its_own_channel_and_leaves_with_its_wait() -> None:
    clock = FakeClock()
    op, first = _start(clock)
    leave = LAYOUT.leave_call(KEYS, OWNER, "w", 10.0, "w30000")
    assert first == Subscribe(KEYS.channel, OWNER, leave, True, f"{KEYS.channel}:{OWNER}", "w")
    call = step(op, False)
    assert call.script is fair.REDISSON_FAIR_ACQUIRE and call.args[3:] == (10000, 1, "w", 0)
    assert step(op, [0, 0, 12000, 5]) == Subscribe(
        KEYS.channel, OWNER, leave, private=f"{KEYS.channel}:{OWNER}", wait="w"
    )
    assert step(op, True).script is fair.REDISSON_FAIR_ACQUIRE  # tries again once listening
    assert step(op, [0, 0, 3000, 5]) == WaitWake(3.0)
    assert step(op, True).script is fair.REDISSON_FAIR_ACQUIRE
    # free, but another waiter's turn: looked at again soon
    assert step(op, [0, 0, -2, 5]) == WaitWake(pytest.approx(lock.TURN_WAIT))  # type: ignore[arg-type]  # approx equals a float
    step(op, False)
    clock.advance(20.0)
    assert step(op, [0, 0, 3000, 5]) == leave  # out of time: leave the line
    assert finish(op, 0) is None


def test_a_late_grant_is_given_back_with_the_fair_release() -> None:
    clock = FakeClock()
    op, _ = _start(clock, blocking=False, lease=1.0)
    clock.advance(2.0)
    back = step(op, [1, 1, 1000, 9])
    assert back.script is fair.REDISSON_FAIR_RELEASE and back.args[:2] == (OWNER, 1)
    assert back.args[-1] == 9  # the grant's token
    assert finish(op, [1, 0]) is None


def test_release_and_status_with_the_layout() -> None:
    op = lock.release(KEYS, OWNER, held=1, request_id="r", token=7, handover_ms=1000, layout=LAYOUT)
    call = step(op, first=True)
    assert call.script is fair.REDISSON_FAIR_RELEASE  # no hand-over window in this layout
    assert call.args[-1] == 7  # the owner's token: no other hold of its field is released
    assert finish(op, [1, 0]) == 0
    op = lock.release(KEYS, OWNER, held=1, request_id="r", token=7, layout=LAYOUT)
    step(op, first=True)
    with pytest.raises(LeaseLostError):
        finish(op, [-1, 0])
    op2 = lock.status(KEYS, LAYOUT)
    assert step(op2, first=True) == LAYOUT.status_call(KEYS)
    status = finish(op2, [25000, 2, OWNER, b"1", b"redlease:fence", b"77", b"redlease:wait", b"w"])
    assert (status.ttl, status.holders, status.waiters, status.token) == (25.0, {OWNER: 1}, 2, 77)
    op3 = lock.force_release(KEYS, LAYOUT)
    assert step(op3, first=True).script is fair.REDISSON_FAIR_FORCE_RELEASE
    assert finish(op3, 1) is True
